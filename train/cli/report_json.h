// The JSON documents dtsim writes: the --report of a training run (configuration, loss per
// step, per-rank memory by category and traffic by collective, the check) and the --trace
// in Chrome's trace-event format (one track per rank, phases and collectives as complete
// events), which ui.perfetto.dev and chrome://tracing open. README.md documents each field.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "train/check.h"
#include "train/config.h"
#include "train/pipeline_parallel/schedule_check.h"
#include "train/result.h"

namespace dtsim::cli {

inline constexpr int kReportVersion = 1;

// The --report document for `run` of `config`; `check` is null when --check was not given.
// report_object() is the same document as JSON, for the --html page (html_report.h).
nlohmann::json report_object(const train::TrainConfig& config, size_t num_params,
                             const train::RunResult& run, const train::CheckResult* check);
std::string report_json(const train::TrainConfig& config, size_t num_params,
                        const train::RunResult& run, const train::CheckResult* check);

// A pipeline run's bubble (config.widths.pp > 1): the idle fraction of its schedule's unit-slot dry
// run, the paper's formula, and the wall-time bubble measured on the ranks' timelines
// (train::pipeline::measured_wall_bubble; NaN without timelines).
struct PipelineBubble {
  train::pipeline::Fraction slots, formula;
  double wall = 0;
};
PipelineBubble pipeline_bubble(const train::TrainConfig& config, const train::RunResult& run);

// The --trace document: RankReport::timeline of every rank (config.trace must have been on).
std::string trace_json(const train::TrainConfig& config, const train::RunResult& run);

// What each collective of the run resolved to, over all ranks, in collective order: pairs
// like ("all_reduce", "rd (auto)"), ("all_gather", "ring"), ("reduce_scatter",
// "rd, ring (auto)") when auto picked by size. From the runtime's counters.
std::vector<std::pair<std::string, std::string>> algorithms_ran(const train::RunResult& run);
// The same on one line: "all_reduce rd (auto), all_gather ring".
std::string algorithms_ran_text(const train::RunResult& run);

// Short names used in tables, reports and help: "sgd", "adam", "fp32", "bf16".
const char* optimizer_name(model::OptimizerKind k);
const char* precision_name(model::Precision p);

}  // namespace dtsim::cli
