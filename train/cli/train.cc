// dtsim train: one training run of one strategy on N rank threads. Prints the loss every
// few steps, then per rank the memory held by category and the bytes sent per step; with
// --check also the single-rank reference that tests/train use (train/check.h), the
// verdict and the largest parameter difference (and the reassociation floor when measured).
// --report and --trace write JSON files that are either complete or absent. Exit code 0, 1 when the
// check fails, 2 on bad input.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "model/param_layout.h"
#include "runtime/algorithms/registry.h"
#include "runtime/job_start.h"
#include "runtime/process_model.h"
#include "train/check.h"
#include "train/cli/checkpoint.h"
#include "train/cli/commands.h"
#include "train/cli/flags.h"
#include "train/cli/html_data.h"
#include "train/cli/html_report.h"
#include "train/cli/output_file.h"
#include "train/cli/progress.h"
#include "train/cli/report_json.h"
#include "train/cli/table.h"
#include "train/cli/train_flags.h"
#include "train/launch.h"
#include "train/models/model_spec.h"
#include "train/pipeline_parallel/schedule_check.h"
#include "train/strategies.h"

namespace dtsim::cli {
namespace {

std::string shape_text(const train::TrainConfig& c) { return train::model_spec(c).describe(c); }

// What runs: "1 rank", "1 rank accumulating as 4 would", "8 ranks (dp 4 x tp 2)".
std::string ranks_text(const train::TrainConfig& c) {
  switch (c.strategy) {
    case train::Strategy::kSingle:
      return "1 rank";
    case train::Strategy::kAccum:
      return fmt::format("1 rank accumulating as {} would", c.ranks);
    case train::Strategy::kDpTp:
      return fmt::format("{} ranks (dp {} x tp {})", c.ranks, c.ranks / c.widths.tp, c.widths.tp);
    case train::Strategy::kMesh: {
      const train::MeshShape m = c.mesh();
      std::string text = fmt::format("{} ranks (dp {} x tp {} x pp {}", c.ranks, m.dp, m.tp, m.pp);
      if (m.cp > 1) text += fmt::format(" x cp {}", m.cp);
      if (m.ep > 1) text += fmt::format(", ep {}", m.ep);
      if (c.zero > 0) text += fmt::format(", zero {}", c.zero);
      return text + ")";
    }
    default:
      return fmt::format("{} rank{}", c.ranks, c.ranks == 1 ? "" : "s");
  }
}

// The header's algorithm: --algo, and which of the run's collectives lack it and so run
// their auto choice ("tree (reduce_scatter, all_gather have no tree: auto)" for zero1).
std::string algo_text(const train::TrainConfig& c) {
  std::string text = to_string(c.algo);
  if (c.algo == Algo::kAuto) return text;
  using train::Strategy;
  const train::MeshShape m = c.mesh();
  const bool sharded = c.strategy == Strategy::kZero1 || c.strategy == Strategy::kZero2 ||
                       c.strategy == Strategy::kZero3 || (c.strategy == Strategy::kMesh && c.zero);
  std::vector<OpKind> used;
  if (c.strategy == Strategy::kSingle || c.strategy == Strategy::kAccum) return text;
  if (sharded) used = {OpKind::kReduceScatter, OpKind::kAllGather};
  if (!sharded || m.tp > 1 || c.strategy == Strategy::kTp) used.push_back(OpKind::kAllReduce);
  if (m.ep > 1) {  // the expert exchange
    used.push_back(OpKind::kAllToAll);
  }
  std::string lacking;
  for (OpKind op : used) {
    if (find_algorithm(op, c.algo) == nullptr) {
      lacking += (lacking.empty() ? "" : ", ") + std::string(to_string(op));
    }
  }
  if (lacking.empty()) return text;
  return fmt::format("{} ({} {} no {}: auto)", text, lacking,
                     lacking.find(',') == std::string::npos ? "has" : "have", text);
}

// Under mpirun: how the ranks lie on processes, " as 2 MPI processes x 2 rank threads".
std::string processes_text(const train::TrainConfig& c) {
  const ProcessModel job = ProcessModel::from_environment(0, c.threads_per_process);
  if (!job.mpi) return "";
  return fmt::format(" as {} MPI process{} x {} rank thread{}", job.processes,
                     job.processes == 1 ? "" : "es", job.threads, job.threads == 1 ? "" : "s");
}

// One line on stderr (from the first process under mpirun, which counts the whole job on
// this machine) when ranks outnumber the cores: they take turns, so step times are not those
// of as many devices.
void note_oversubscription(const train::TrainConfig& c, bool quiet) {
  const unsigned cores = std::thread::hardware_concurrency();
  const int ranks =
      c.strategy == train::Strategy::kSingle || c.strategy == train::Strategy::kAccum ? 1 : c.ranks;
  const ProcessModel job = ProcessModel::from_environment(0, c.threads_per_process);
  if (quiet || cores == 0 || ranks <= static_cast<int>(cores) || job.process != 0) return;
  std::fprintf(stderr,
               "note: %d %s on %u cores take turns (oversubscribed): results hold, step times "
               "are not those of %d devices\n",
               ranks, job.mpi ? "ranks" : "rank threads", cores, ranks);
}

// Loss lines are printed for steps 0, every, 2 every, ... and the last (ten or so lines).
bool prints_loss(int step, int steps) {
  const int every = steps <= 10 ? 1 : (steps + 9) / 10;
  return step % every == 0 || step == steps - 1;
}

void print_ranks(const train::RunResult& run) {
  std::vector<std::string> header{"rank"};
  for (int c = 0; c < model::kNumMemoryCategories; ++c) header.push_back(category_short_name(c));
  header.insert(header.end(), {"sent/step", "msgs/step"});
  Table t(header, std::vector<bool>(header.size(), true));
  for (const train::RankReport& r : run.ranks) {
    std::vector<std::string> row{std::to_string(r.rank)};
    for (int c = 0; c < model::kNumMemoryCategories; ++c) row.push_back(bytes_text(r.memory[c]));
    const OpCounters total = r.counters.total();
    row.push_back(bytes_text(double(total.bytes_sent) / run.steps));
    row.push_back(fmt::format("{:.1f}", double(total.msgs_sent) / run.steps));
    t.add(row);
  }
  std::printf("\nper rank: peak memory by category, traffic per step\n");
  t.print(stdout, "  ");
}

// The largest activation peak of any rank, with the recomputation it ran under.
void print_activation_peak(const train::TrainConfig& c, const train::RunResult& run) {
  int64_t peak = 0;
  for (const train::RankReport& r : run.ranks) {
    peak = std::max(peak, r.memory[static_cast<int>(model::MemoryCategory::kActivations)]);
  }
  std::printf("\nactivations peak %s (largest rank; recompute %s)\n", bytes_text(peak).c_str(),
              model::recompute_name(c.recompute));
}

int run_train(const CLI::App& a, const TrainFlags& f) {
  train::TrainConfig config = parse_train_config(a, f);
  try {
    train::validate(config);
  } catch (const UsageError& e) {
    fail("train", e.what());
  }
  check_checkpoint_flags(a, config);
  // Open the output files before any work: a bad path is a usage error, not a lost run.
  // Only the process of global rank 0 prints and writes files (all of them, with threads).
  const bool root = train::holds_global_rank0();
  OutputFile report, trace, html;
  if (given(a, "--report")) report = OutputFile("train", "report", f.report, root);
  if (given(a, "--html")) html = OutputFile("train", "html", f.html, root);
  if (given(a, "--trace")) trace = OutputFile("train", "trace", f.trace, root);
  // Every rank records its timeline: for the --trace file (rank 0 writes it), and in a
  // pipeline for the wall-time bubble.
  config.trace = given(a, "--trace") || config.widths.pp > 1;
  const bool check = f.check;
  // --check compares in lockstep: the run records its parameters after every step.
  config.record_history = check;
  train::CheckPlan plan = train::plan_check(config);
  begin_work();

  if (root) {
    std::printf("dtsim train: %s, %s (%zu params), %s, %d steps, batch %d",
                train::to_string(config.strategy), shape_text(config).c_str(),
                train::model_layout(config).size(),
                (ranks_text(config) + processes_text(config)).c_str(), config.steps,
                config.global_batch);
    if (config.micro_batches > 1) std::printf(" in %d micro-batches", config.micro_batches);
    std::printf(", %s lr %g, %s, algo %s%s\n", optimizer_name(config.optimizer), config.lr,
                precision_name(config.precision), algo_text(config).c_str(),
                config.pitfall == train::Pitfall::kForgetDivide ? ", PITFALL forget-divide" : "");
    std::fflush(stdout);
    note_oversubscription(config, f.quiet);
    std::printf("\n  step  loss\n");
    std::fflush(stdout);
  }

  std::optional<train::RunResult> trained;
  train::CheckResult result;
  {
    // The run, its reference, and the floor partner when the tolerance alone fails. Each
    // loss line is printed as its step finishes.
    Progress progress(check ? 3 : 1, root && !f.quiet);
    auto on_step = [&](int done, double) { progress.set_steps(done, config.steps); };
    progress.advance(std::string("training ") + train::to_string(config.strategy));
    config.on_step = [&](int done, double loss) {
      on_step(done, loss);
      if (prints_loss(done - 1, config.steps)) {
        progress.print_line(fmt::format("  {:4d}  {:.6f}", done - 1, loss));
      }
    };
    trained = train::launch_training(config);
    if (!trained) return 0;  // global rank 0 is in another process: it reports
    if (check) {
      plan = train::lockstep_plan(plan, *trained);
      progress.advance(std::string("reference ") + train::to_string(plan.reference.strategy));
      train::TrainConfig reference_config = plan.reference;
      reference_config.on_step = on_step;
      const train::RunResult reference = train::run_training(reference_config);
      result = train::judge(plan, *trained, reference, [&](const train::TrainConfig& c) {
        progress.advance("reassociation floor");
        train::TrainConfig floor = c;
        floor.on_step = on_step;
        return train::run_training(floor);
      });
    }
  }
  const train::RunResult& run = *trained;
  if (const int s = run.first_nonfinite_step(); s >= 0) {
    std::printf(
        "\nwarning: training diverged: the loss is not finite from step %d on; a smaller "
        "--lr (now %g) usually cures it\n",
        s, config.lr);
  }
  print_ranks(run);
  print_activation_peak(config, run);
  std::printf("\ncollectives ran: %s\n", algorithms_ran_text(run).c_str());
  std::printf("\nstep time %s (median over steps after the first)\n",
              seconds_text(run.seconds_per_step).c_str());
  if (const std::string e = train::model_spec(config).evaluate(config, run.params); !e.empty()) {
    std::printf("%s\n", e.c_str());
  }
  if (config.widths.pp > 1) {
    const PipelineBubble b = pipeline_bubble(config, run);
    std::printf(
        "pipeline bubble: %s of the slots idle (%.1f%%; formula %s), wall time %.1f%% "
        "(median over steps after the first)\n",
        train::pipeline::to_string(b.slots).c_str(), 100 * b.slots.value(),
        train::pipeline::to_string(b.formula).c_str(), 100 * b.wall);
    // Fewer micro-batches than stages leave most slots idle: say how to fill them.
    if (config.micro_batches < config.widths.pp) {
      for (const int m : {4 * config.widths.pp, 2 * config.widths.pp, config.widths.pp}) {
        if (config.global_batch % (config.mesh().dp * m) != 0) continue;
        train::pipeline::ScheduleSpec more = train::schedule_spec(config);
        more.micro_batches = m;
        std::printf(
            "note: with %d micro-batch%s for %d stages the stages mostly wait for each other; "
            "--micro-batches %d gives a bubble of %s\n",
            config.micro_batches, config.micro_batches == 1 ? "" : "es", config.widths.pp, m,
            train::pipeline::to_string(train::pipeline::bubble_formula(more)).c_str());
        break;
      }
    }
  }

  if (check) {
    std::printf("check: %s  max |dparam| %.3g, max |dloss| %.3g (%s vs %s)\n",
                result.verdict_text.c_str(), result.comparison.max_abs_diff,
                result.comparison.max_loss_diff, result.criterion.c_str(),
                result.reference_name.c_str());
    if (result.floor_measured) {
      std::printf("       floor: %s, max |dparam| %.3g, max |dloss| %.3g\n",
                  plan.floor_description.c_str(), result.floor, result.loss_floor);
    }
  }
  // Every output is written to its temporary first, then all are renamed: a full disk
  // leaves none of them (not an earlier one beside a failed run).
  if (report.open()) {
    report.stage(
        report_json(config, train::model_layout(config).size(), run, check ? &result : nullptr));
  }
  if (html.open()) {
    const nlohmann::json r =
        report_object(config, train::model_layout(config).size(), run, check ? &result : nullptr);
    const std::string title = std::string(train::to_string(config.strategy)) + " " +
                              train::to_string(config.model) + " on " +
                              std::to_string(config.ranks) + " ranks";
    HtmlPanel panel{title, r, mesh_diagram(config), nullptr};
    if (r.contains("pipeline")) panel.p2p = pipeline_p2p(config, run, r["pipeline"]["timeline"]);
    html.stage(html_page("dtsim train", "one run; hover a mark for its value", {panel}, nullptr));
  }
  if (trace.open()) trace.stage(trace_json(config, run));
  const bool wrote_report = report.open(), wrote_html = html.open(), wrote_trace = trace.open();
  OutputFile::commit_all({&report, &html, &trace});
  if (wrote_report) std::printf("report: %s\n", report.name().c_str());
  if (wrote_html) std::printf("html: %s\n", html.name().c_str());
  if (wrote_trace) {
    std::printf("trace: %s (open in ui.perfetto.dev or chrome://tracing)\n", trace.name().c_str());
  }
  return check && !result.passed ? 1 : 0;
}

}  // namespace

Command add_train(CLI::App& dtsim) {
  CLI::App* app = dtsim.add_subcommand(
      "train", "train one strategy on N rank threads; --check against single-rank training");
  describe(
      app,
      "Trains a small model with one strategy, every rank a thread, and prints the loss every\n"
      "few steps, then per rank the memory it holds by category and the bytes it sends per\n"
      "step (from the runtime's counters).");
  app->option_defaults()->always_capture_default();
  app->fallthrough();  // --config belongs to dtsim
  auto flags = std::make_shared<TrainFlags>();
  declare_train_flags(app, *flags);
  std::string algos = fmt::format("\n--algo (from the algorithm registry; auto: {}):\n",
                                  auto_rule(OpKind::kAllReduce));
  for (const AlgoRow* row : algorithms_of(OpKind::kAllReduce)) {
    algos += fmt::format("  {:<14} {}{}\n", to_string(row->algo), row->how,
                         row->needs & kWorldMpi ? " (under mpirun, one rank per process)" : "");
  }
  app->footer(
      "example: dtsim train --strategy zero2 --model mlp --ranks 4 --optimizer adam --check\n" +
      algos);
  return {app, [app, flags] { return run_train(*app, *flags); }};
}

}  // namespace dtsim::cli
