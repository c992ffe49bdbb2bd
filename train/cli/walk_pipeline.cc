// dtsim walk --pp P --micro-batches M --schedule S [--virtual-stages V]: generates the
// schedule (train/pipeline_parallel/schedule.h), checks it and dry-runs it on unit-time
// slots (schedule_check.h), and prints it as the papers draw it: one row per stage, one
// column per slot, F3 / B3 cells (F3.1 with the rank's chunk when interleaved), idle slots
// as dots; then the measured bubble beside the formula and the peak in-flight activations.
#include "train/cli/walk_pipeline.h"

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>

#include "runtime/job_start.h"
#include "train/cli/flags.h"
#include "train/pipeline_parallel/schedule.h"
#include "train/pipeline_parallel/schedule_check.h"

namespace dtsim::cli {
namespace {

namespace pp = train::pipeline;

struct PipelineFlags {
  int stages = 1, micro_batches = 8, virtual_stages = 1;
  std::string schedule = "1f1b";
  bool wide = false;
};

constexpr size_t kColumns = 100;  // a terminal's width, unless --wide
const char* kPipelineFlags[] = {"--micro-batches", "--schedule", "--virtual-stages", "--wide"};
const char* kCollectiveFlags[] = {"--op", "--ranks", "--numel", "--algo", "--root"};

std::string bound_text(const pp::ScheduleSpec& spec) {
  switch (spec.kind) {
    case pp::ScheduleKind::kGpipe:
      return "m";
    case pp::ScheduleKind::kInterleaved:
      return spec.micro_batches == spec.stages ? "v m (m = p: all warm-up)"
                                               : "min(2 (p - r - 1) + (v - 1) p + 1, v m)";
    default:
      return "min(p - r, m)";
  }
}

int run_walk_pipeline(const PipelineFlags& f) {
  pp::ScheduleSpec spec;
  pp::parse_schedule(f.schedule, &spec.kind);  // OneOf(schedule_names()) accepted it
  spec.stages = f.stages;
  spec.micro_batches = f.micro_batches;
  spec.virtual_stages = f.virtual_stages;
  if (const std::string why = pp::validate(spec); !why.empty()) fail("walk", why);
  const pp::Schedule s = pp::make_schedule(spec);
  const pp::DryRun d = pp::dry_run(s);
  if (!d.error.empty()) throw std::logic_error("generated schedule is broken: " + d.error);
  begin_work();

  const int p = spec.stages, v = spec.virtual_stages, m = spec.micro_batches;
  const bool wide = f.wide;
  const bool zb = spec.kind == pp::ScheduleKind::kZeroBubbleH1;
  std::printf("dtsim walk: %s, %d stages, %d micro-batches", pp::info(spec.kind).title, p, m);
  if (v > 1) std::printf(", %d chunks per rank", v);
  std::printf("\none column per time slot; %s takes one slot\n\n",
              zb ? "each forward, input-gradient and weight-gradient pass"
                 : (v > 1 ? "each chunk's forward or backward" : "each forward or backward"));

  std::vector<std::vector<std::string>> cells(p);
  size_t width = std::to_string(d.total_slots - 1).size();
  for (int r = 0; r < p; ++r) {
    for (int a : d.timeline[r]) {
      cells[r].push_back(a < 0 ? "." : pp::label(s.ranks[r][a], p, v));
      width = std::max(width, cells[r].back().size());
    }
  }
  // A terminal's 100 columns hold as many slots as fit; the rest follow in further bands,
  // each under its own slot numbers (--wide: one band, however wide).
  const std::string head = fmt::format("stage {}", p - 1);
  const int per_band =
      wide ? d.total_slots
           : std::max<int>(1, static_cast<int>((kColumns - head.size()) / (width + 1)));
  for (int from = 0; from < d.total_slots; from += per_band) {
    const int to = std::min(d.total_slots, from + per_band);
    if (from > 0) std::printf("\n");
    std::string line = fmt::format("{:<{}}", "slot", head.size());
    for (int t = from; t < to; ++t) line += fmt::format(" {:>{}}", t, width);
    std::printf("%s\n", line.c_str());
    for (int r = 0; r < p; ++r) {
      line = fmt::format("{:<{}}", fmt::format("stage {}", r), head.size());
      for (int t = from; t < to; ++t) line += fmt::format(" {:>{}}", cells[r][t], width);
      std::printf("%s\n", line.c_str());
    }
  }
  std::printf("\n");
  if (v > 1) {
    std::printf(
        "F3.1: forward of micro-batch 3 through the stage's chunk 1 (of 0..%d; stage r holds\n"
        "global chunks r, r + p, ...); B3.1: its backward; .: idle\n",
        v - 1);
  } else if (zb) {
    std::printf(
        "F3: forward of micro-batch 3; B3: its input-gradient pass (sent back at once); W3: its\n"
        "weight-gradient pass (deferred into idle slots); .: idle\n");
  } else {
    std::printf(
        "F3: forward of micro-batch 3; B3: its backward (input and weight gradients); .: idle\n");
  }

  int messages = 0;
  for (const auto& rank : s.ranks) {
    messages += static_cast<int>(std::count_if(
        rank.begin(), rank.end(), [](const pp::Action& a) { return pp::is_send(a.op); }));
  }
  const pp::Fraction formula = pp::bubble_formula(spec);
  std::printf(
      "\nchecked: %d sends, each matched by its receive in order; no deadlock in %d slots\n",
      messages, d.total_slots);
  std::printf("bubble: %s of the slots idle (%.1f%%: %lld idle of %d x %d); formula %s = %s%s\n",
              pp::to_string(d.bubble).c_str(), 100 * d.bubble.value(),
              static_cast<long long>(d.idle_slots), p, d.total_slots, pp::info(spec.kind).formula,
              pp::to_string(formula).c_str(),
              d.bubble == formula ? "" : (zb && m < p ? "" : " MISMATCH"));
  if (zb && m < p && d.bubble != formula) {
    std::printf(
        "  (the formula holds for m >= p: with %d micro-batches for %d stages the warm-up and\n"
        "  drain have idle slots that the %d deferred W passes cannot fill)\n",
        m, p, m);
  }
  std::printf("peak in-flight activations per stage, bound %s\n(%s past forward, before %s):\n",
              bound_text(spec).c_str(), v > 1 ? "chunk micro-batches" : "micro-batches",
              zb ? "B" : "backward");
  bool within = true;
  for (int r = 0; r < p; ++r) {
    const int bound = pp::in_flight_bound(spec, r);
    within = within && d.peak_in_flight[r] <= bound;
    std::printf("  stage %d: %d (bound %d)", r, d.peak_in_flight[r], bound);
    // ZB-H1 keeps a micro-batch's activations (and its saved gradients) until its W.
    if (zb) std::printf("; %d kept until their W", pp::peak_held_per_chunk(s, r)[0]);
    std::printf("\n");
  }
  return (d.bubble == formula || (zb && m < p)) && within ? 0 : 1;
}

}  // namespace

std::function<std::optional<int>()> add_walk_pipeline(CLI::App* walk) {
  auto f = std::make_shared<PipelineFlags>();
  walk->add_option("--pp", f->stages, "pipeline stages: walk a pipeline schedule instead")
      ->transform(Integer(1, 64))
      ->default_str("");
  walk->add_option("--micro-batches", f->micro_batches, "micro-batches per step (with --pp)")
      ->transform(Integer(1, 256));
  walk->add_option("--schedule", f->schedule, "pipeline schedule (with --pp)")
      ->check(OneOf(train::pipeline::schedule_names()));
  walk->add_option("--virtual-stages", f->virtual_stages,
                   "model chunks per stage (with --pp and --schedule interleaved)")
      ->transform(Integer(1, 16));
  walk->add_flag("--wide", f->wide,
                 "draw the schedule in one band however wide (with --pp; default: bands of "
                 "100 columns)");
  return [f, walk]() -> std::optional<int> {
    if (!given(*walk, "--pp")) {
      for (const char* flag : kPipelineFlags) {
        if (given(*walk, flag))
          fail("walk", std::string(flag) + " needs --pp (the pipeline's stages)");
      }
      return std::nullopt;
    }
    for (const char* flag : kCollectiveFlags) {
      if (given(*walk, flag)) {
        fail("walk", std::string(flag) +
                         " walks a collective; with --pp give only --micro-batches, "
                         "--schedule, --virtual-stages");
      }
    }
    return run_walk_pipeline(*f);
  };
}

}  // namespace dtsim::cli
