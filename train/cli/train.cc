// dtsim train: one training run of one strategy on N rank threads. Prints the loss every
// few steps, then per rank the memory held by category and the bytes sent per step; with
// --check also the single-rank reference that tests/train use (train/check.h), the
// verdict and the largest parameter difference (and the reassociation floor when measured).
// --report and --trace write JSON files that are either complete or absent. Exit code 0, 1 when the
// check fails, 2 on bad input.
#include <cstdio>
#include <optional>
#include <string>

#include "model/moe_model.h"
#include "model/param_layout.h"
#include "runtime/algorithms/registry.h"
#include "train/check.h"
#include "train/cli/args.h"
#include "train/cli/commands.h"
#include "train/cli/output_file.h"
#include "train/cli/progress.h"
#include "train/cli/report_json.h"
#include "train/cli/table.h"
#include "train/launch.h"
#include "train/strategies.h"

namespace dtsim::cli {
namespace {

const char* kHelp =
    "usage: dtsim train [--strategy S] [--model M] [--ranks N] [--steps S] [--batch B]\n"
    "                   [--micro-batches M] [--optimizer sgd|adam] [--lr X]\n"
    "                   [--precision fp32|bf16] [--dim D] [--hidden H] [--layers L]\n"
    "                   [--experts E] [--top-k K] [--tp T] [--algo A] [--seed S]\n"
    "                   [--pitfall forget-divide] [--check] [--report FILE] [--trace FILE]\n"
    "                   [--quiet]\n"
    "\n"
    "Trains a small model with one strategy, every rank a thread, and prints the loss every\n"
    "few steps, then per rank the memory it holds by category and the bytes it sends per\n"
    "step (from the runtime's counters).\n"
    "\n"
    "  --strategy       single | accum | ddp | zero1 | zero2 | zero3 | tp | ep | dp-tp\n"
    "                   (default ddp; tp and dp-tp need --model mlp, ep needs --model moe)\n"
    "  --model          mlp | moe (default mlp)\n"
    "  --ranks          rank threads, 1..256 (default 4)\n"
    "  --steps          optimizer steps (default 20)\n"
    "  --batch          global batch: samples per step over all ranks (default 32)\n"
    "  --micro-batches  micro-batches per rank per step, accumulated (default 1)\n"
    "  --optimizer      sgd | adam (default sgd)\n"
    "  --lr             learning rate (default 0.05 for sgd, 0.01 for adam)\n"
    "  --precision      fp32 | bf16 (bf16: bf16 weights and gradients, fp32 master copy)\n"
    "  --dim            model width D (default 16)\n"
    "  --hidden         MLP hidden width / expert hidden width (default 64 / 32)\n"
    "  --layers         MLP blocks (default 2; mlp only)\n"
    "  --experts        experts of the MoE layer (default 4; moe only)\n"
    "  --top-k          experts per token, 1 or 2 (default 2; moe only)\n"
    "  --tp             tensor-parallel width of dp-tp (default 2)\n"
    "  --algo           all_reduce algorithm (listed below); the other collectives\n"
    "                   follow it where they have it, else run their auto one\n"
    "                   (deterministic makes ddp and zero bitwise equal to accumulation)\n"
    "  --seed           initialisation and data seed (default 1)\n"
    "  --pitfall        forget-divide: skip the division by N (ddp, zero1-3): --check fails\n"
    "  --check          also run the single-rank reference and compare (past the tolerance,\n"
    "                   also the reassociation floor); exit 1 on a mismatch\n"
    "  --report FILE    write a JSON report (see README, \"Report fields\")\n"
    "  --trace FILE     write a Chrome trace (open in ui.perfetto.dev): one track per rank\n"
    "  --quiet          no progress bar\n"
    "\n"
    "example: dtsim train --strategy zero2 --model mlp --ranks 4 --optimizer adam --check\n";

train::TrainConfig parse_config(const Args& a) {
  train::TrainConfig c;
  const std::string strategy =
      a.choice("strategy", "ddp",
               {"single", "accum", "ddp", "zero1", "zero2", "zero3", "tp", "ep", "dp-tp"});
  train::parse_strategy(strategy, &c.strategy);
  const std::string model = a.choice("model", "mlp", {"mlp", "moe"});
  c.model = model == "mlp" ? train::ModelKind::kMlp : train::ModelKind::kMoe;
  c.ranks = static_cast<int>(a.integer("ranks", 4, 1, 256));
  c.steps = static_cast<int>(a.integer("steps", 20, 1, 100000));
  c.global_batch = static_cast<int>(a.integer("batch", 32, 1, 1 << 20));
  c.micro_batches = static_cast<int>(a.integer("micro-batches", 1, 1, 4096));
  const bool adam = a.choice("optimizer", "sgd", {"sgd", "adam"}) == "adam";
  c.optimizer = adam ? model::OptimizerKind::kAdam : model::OptimizerKind::kSgd;
  c.lr = static_cast<float>(a.number("lr", adam ? 0.01 : 0.05, 1e-12, 100));
  const bool bf16 = a.choice("precision", "fp32", {"fp32", "bf16"}) == "bf16";
  c.precision = bf16 ? model::Precision::kMixedBf16 : model::Precision::kFp32;
  const int dim = static_cast<int>(a.integer("dim", 16, 1, 4096));
  const bool mlp = c.model == train::ModelKind::kMlp;
  for (const char* flag : {"experts", "top-k"}) {
    if (mlp && a.has(flag)) fail("train", std::string("--") + flag + " applies to --model moe");
  }
  if (!mlp && a.has("layers")) fail("train", "--layers applies to --model mlp (MoE has one layer)");
  if (mlp) {
    c.mlp = {.input_dim = dim,
             .hidden_dim = static_cast<int>(a.integer("hidden", 64, 1, 65536)),
             .num_blocks = static_cast<int>(a.integer("layers", 2, 1, 64)),
             .output_dim = 4};
  } else {
    c.moe.input_dim = dim;
    c.moe.num_classes = 4;
    c.moe.moe.d_model = dim;
    c.moe.moe.d_ff = static_cast<int>(a.integer("hidden", 32, 1, 65536));
    c.moe.moe.num_experts = static_cast<int>(a.integer("experts", 4, 1, 1024));
    c.moe.moe.top_k = static_cast<int>(a.integer("top-k", 2, 1, 2));
  }
  if (a.has("tp") && c.strategy != train::Strategy::kDpTp) {
    fail("train", "--tp applies to --strategy dp-tp (tp uses every rank)");
  }
  c.tp_size = static_cast<int>(a.integer("tp", 2, 1, 256));
  const std::string algo = a.str("algo", "auto");
  // --algo names the all-reduce algorithm (the others follow it where they have it).
  if (!parse_algo(algo, &c.algo) || !has_algorithm(OpKind::kAllReduce, c.algo)) {
    fail("train",
         "--algo must be one of " + algorithm_list(OpKind::kAllReduce) + " (got '" + algo + "')");
  }
  c.seed = static_cast<uint64_t>(a.integer("seed", 1, 0, INT64_MAX));
  if (a.has("pitfall")) {
    a.choice("pitfall", "", {"forget-divide"});  // validate() checks the strategy
    c.pitfall = train::Pitfall::kForgetDivide;
  }
  return c;
}

std::string shape_text(const train::TrainConfig& c) {
  if (c.model == train::ModelKind::kMlp) {
    return format("mlp D %d H %d L %d", c.mlp.input_dim, c.mlp.hidden_dim, c.mlp.num_blocks);
  }
  return format("moe D %d F %d E %d top-%d", c.moe.moe.d_model, c.moe.moe.d_ff,
                c.moe.moe.num_experts, c.moe.moe.top_k);
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
    row.push_back(format("%.1f", double(total.msgs_sent) / run.steps));
    t.add(row);
  }
  std::printf("\nper rank: peak memory by category, traffic per step\n");
  t.print(stdout, "  ");
}

}  // namespace

int train_main(const Words& words) {
  Args a("train", words,
         {"strategy", "model",     "ranks", "steps",   "batch",  "micro-batches", "optimizer",
          "lr",       "precision", "dim",   "hidden",  "layers", "experts",       "top-k",
          "tp",       "algo",      "seed",  "pitfall", "report", "trace"},
         {"help", "check", "quiet"});
  if (a.on("help")) {
    std::fputs(kHelp, stdout);
    std::printf("\n--algo (from the algorithm registry; auto: %s):\n",
                auto_rule(OpKind::kAllReduce).c_str());
    for (const AlgoRow* row : algorithms_of(OpKind::kAllReduce)) {
      std::printf("  %-14s %s\n", to_string(row->algo), row->how);
    }
    return 0;
  }
  train::TrainConfig config = parse_config(a);
  try {
    train::validate(config);
  } catch (const UsageError& e) {
    fail("train", e.what());
  }
  // Open the output files before any work: a bad path is a usage error, not a lost run.
  // Only the process of global rank 0 prints and writes files (all of them, with threads).
  const bool root = train::holds_global_rank0();
  OutputFile report, trace;
  if (root && a.has("report")) report = OutputFile("train", "report", a.str("report", ""));
  if (root && a.has("trace")) trace = OutputFile("train", "trace", a.str("trace", ""));
  config.trace = a.has("trace");  // every rank records its timeline; rank 0 writes the file
  const bool check = a.on("check");
  const train::CheckPlan plan = train::plan_check(config);

  if (root) {
    std::printf("dtsim train: %s, %s (%zu params), %d ranks, %d steps, batch %d",
                train::to_string(config.strategy), shape_text(config).c_str(),
                train::model_layout(config).size(), config.ranks, config.steps,
                config.global_batch);
    if (config.micro_batches > 1) std::printf(" in %d micro-batches", config.micro_batches);
    std::printf(", %s lr %g, %s, algo %s%s\n", optimizer_name(config.optimizer), config.lr,
                precision_name(config.precision), to_string(config.algo),
                config.pitfall == train::Pitfall::kForgetDivide ? ", PITFALL forget-divide" : "");
    std::printf("\n  step  loss\n");
    std::fflush(stdout);
  }

  std::optional<train::RunResult> trained;
  train::CheckResult result;
  {
    // The run, its reference, and the floor partner when the tolerance alone fails. Each
    // loss line is printed as its step finishes.
    Progress progress(check ? 3 : 1, root && !a.on("quiet"));
    auto on_step = [&](int done, double) { progress.set_steps(done, config.steps); };
    progress.advance(std::string("training ") + train::to_string(config.strategy));
    config.on_step = [&](int done, double loss) {
      on_step(done, loss);
      if (prints_loss(done - 1, config.steps)) {
        progress.print_line(format("  %4d  %.6f", done - 1, loss));
      }
    };
    trained = train::launch_training(config);
    if (!trained) return 0;  // global rank 0 is in another process: it reports
    if (check) {
      progress.advance(std::string("reference ") + train::to_string(plan.reference.strategy));
      train::TrainConfig reference_config = plan.reference;
      reference_config.on_step = on_step;
      const train::RunResult reference = train::run_training(reference_config);
      result = train::judge(plan, *trained, reference, [&](const train::TrainConfig& c) {
        progress.advance("reassociation floor");
        return train::run_training(c);
      });
    }
  }
  const train::RunResult& run = *trained;
  print_ranks(run);
  std::printf("\ncollectives ran: %s\n", algorithms_ran_text(run).c_str());
  std::printf("\nstep time %s (median over steps after the first)\n",
              seconds_text(run.seconds_per_step).c_str());

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
  if (report.open()) {
    report.commit(
        report_json(config, train::model_layout(config).size(), run, check ? &result : nullptr));
    std::printf("report: %s\n", report.path().c_str());
  }
  if (trace.open()) {
    trace.commit(trace_json(config, run));
    std::printf("trace: %s (open in ui.perfetto.dev or chrome://tracing)\n", trace.path().c_str());
  }
  return check && !result.passed ? 1 : 0;
}

}  // namespace dtsim::cli
