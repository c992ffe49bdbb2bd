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
#include "train/cli/html_report.h"
#include "train/cli/output_file.h"
#include "train/cli/progress.h"
#include "train/cli/report_json.h"
#include "train/cli/table.h"
#include "train/launch.h"
#include "train/models/model_spec.h"
#include "train/strategies.h"

namespace dtsim::cli {
namespace {

const std::vector<std::string> kStrategies = {"single", "accum", "ddp", "zero1", "zero2",
                                              "zero3",  "tp",    "ep",  "dp-tp"};

// What the command line sets; parse_config() turns it into a TrainConfig.
struct TrainFlags {
  std::string strategy = "ddp", model = "mlp", optimizer = "sgd", precision = "fp32";
  std::string algo = "auto", pitfall, report, trace, html;
  int ranks = 4, steps = 20, batch = 32, micro_batches = 1, dim = 16, hidden = 64, layers = 2;
  int experts = 4, top_k = 2, tp = 2, threads_per_process = 1;
  int heads = 2, head_dim = 0, seq = 12, vocab = 9;  // gpt
  int dp = 1, pp = 1, ep = 1, zero = 0, virtual_stages = 1;
  std::vector<int> stage_layers;
  std::string schedule = "1f1b", recompute = "none";
  double lr = 0.05;
  int64_t seed = 1;
  bool check = false, quiet = false;
  train::checkpoint::Options checkpoint;  // cli/checkpoint.cc
};

void declare(CLI::App* app, TrainFlags& f) {
  app->add_option("--strategy", f.strategy, "tp and dp-tp need --model mlp, ep needs --model moe")
      ->check(OneOf(kStrategies,
                    "FSDP is ZeRO-3, --strategy zero3 (zero2 shards gradients and optimizer "
                    "state but keeps whole weights)"));
  std::vector<std::string> models;
  for (const train::ModelSpec* spec : train::model_specs()) models.push_back(spec->name());
  app->add_option("--model", f.model)->check(OneOf(models));
  app->add_option("--ranks", f.ranks, "rank threads (falls back to $WORLD_SIZE, as torchrun sets)")
      ->transform(Integer(1, 256))
      ->envname("WORLD_SIZE");
  app->add_option("--threads-per-process", f.threads_per_process,
                  "under mpirun: rank threads per process; the world is processes x this, and "
                  "--ranks defaults to it")
      ->transform(Integer(1, 256));
  app->add_option("--steps", f.steps, "optimizer steps")->transform(Integer(1, 100000));
  app->add_option("--batch", f.batch, "global batch: samples per step over all ranks")
      ->transform(Integer(1, 1 << 20));
  app->add_option("--micro-batches", f.micro_batches,
                  "micro-batches per rank per step, accumulated")
      ->transform(Integer(1, 4096));
  app->add_option("--optimizer", f.optimizer)->check(OneOf({"sgd", "adam"}));
  app->add_option("--lr", f.lr, "learning rate [default: 0.05 for sgd, 0.01 for adam]")
      ->check(Number(1e-12, 100))
      ->default_str("");
  app->add_option("--precision", f.precision,
                  "bf16: bf16 weights and gradients with an fp32 master copy")
      ->check(OneOf({"fp32", "bf16"}));
  app->add_option("--dim", f.dim, "model width D")->transform(Integer(1, 4096));
  app->add_option("--hidden", f.hidden, "MLP hidden width / expert hidden width [default: 64 / 32]")
      ->transform(Integer(1, 65536))
      ->default_str("");
  app->add_option("--layers", f.layers,
                  "MLP blocks (mlp; default 2) or MoE layers (moe; default 1)")
      ->transform(Integer(1, 64));
  app->add_option("--experts", f.experts, "experts of the MoE layer (moe only)")
      ->transform(Integer(1, 1024));
  app->add_option("--top-k", f.top_k, "experts per token, at most --experts (moe only)")
      ->transform(Integer(1, 1024));
  app->add_option("--heads", f.heads, "attention heads (gpt only)")->transform(Integer(1, 256));
  app->add_option("--head-dim", f.head_dim,
                  "size of each head (gpt only) [default: --dim / --heads]")
      ->transform(Integer(1, 4096))
      ->default_str("");
  app->add_option("--seq", f.seq, "sequence length, even: the reversal task's 2n tokens (gpt only)")
      ->transform(Integer(2, 4096));
  app->add_option("--vocab", f.vocab, "vocabulary: a separator and --vocab - 1 symbols (gpt only)")
      ->transform(Integer(3, 1 << 16));
  app->add_option("--tp", f.tp,
                  "mesh: tensor-parallel width (also dp-tp's; --strategy tp uses every rank) "
                  "[default: 1 on the mesh, 2 for --strategy dp-tp]")
      ->transform(Integer(1, 256))
      ->default_str("");
  app->add_option("--dp", f.dp,
                  "mesh: data-parallel replicas; --dp x --tp x --pp is the world size "
                  "[default: --ranks / (--tp x --pp) when --ranks is given, else 1]")
      ->transform(Integer(1, 256))
      ->default_str("");
  app->add_option("--pp", f.pp, "mesh: pipeline stages (the layers split evenly)")
      ->transform(Integer(1, 256));
  app->add_option("--ep", f.ep,
                  "mesh: experts sharded over groups of --ep data-parallel ranks (moe; divides "
                  "--dp)")
      ->transform(Integer(1, 256));
  app->add_option("--zero", f.zero, "mesh: ZeRO stage along the data axis (0: DDP all-reduce)")
      ->transform(Integer(0, 3));
  app->add_option("--schedule", f.schedule, "pipeline schedule (with --pp > 1)")
      ->check(OneOf({"gpipe", "1f1b", "interleaved", "zb-h1"}));
  app->add_option("--virtual-stages", f.virtual_stages,
                  "model chunks per pipeline rank (--schedule interleaved)")
      ->transform(Integer(1, 64));
  app->add_option("--stage-layers", f.stage_layers,
                  "blocks per pipeline chunk, e.g. 1,2,1 (default: as even as --layers allows)")
      ->delimiter(',')
      ->type_name("N,N,...");
  // The all_reduce algorithm (the other collectives follow it where the registry lists it
  // for them, else run their auto one). Checked after --threads-per-process (declared
  // above): `mpi` needs mpirun with one rank per process.
  app->add_option("--algo", f.algo,
                  "all_reduce algorithm, below; deterministic makes ddp and zero bitwise equal "
                  "to accumulation")
      ->check(AlgoFor(
          [] { return OpKind::kAllReduce; },
          [&f] {
            return ProcessModel::from_environment(0, f.threads_per_process).world_features();
          },
          /*name_op=*/false, {OpKind::kAllReduce}));
  app->add_option("--recompute", f.recompute,
                  "activation recomputation: selective rebuilds GELU outputs before backward, "
                  "full re-runs each layer's forward (docs/recompute.md)")
      ->check(OneOf({"none", "selective", "full"}));
  app->add_option("--seed", f.seed, "initialisation and data seed")
      ->transform(Integer(0, INT64_MAX));
  app->add_option("--pitfall", f.pitfall,
                  "forget-divide: skip the division by N (ddp, zero1-3), so --check fails")
      ->check(OneOf({"forget-divide"}))
      ->default_str("");
  app->add_flag("--check", f.check,
                "also run the single-rank reference and compare (past the tolerance, also the "
                "reassociation floor); exit 1 on a mismatch");
  app->add_option("--report", f.report,
                  "write a JSON report (see README, \"Report fields\"); - is standard output")
      ->type_name("FILE")
      ->default_str("");
  app->add_option("--trace", f.trace,
                  "write a Chrome trace, one track per rank (open in ui.perfetto.dev)")
      ->type_name("FILE")
      ->default_str("");
  app->add_option("--html", f.html,
                  "write a self-contained HTML page: loss curve, memory per rank, traffic per "
                  "group, time per collective (README, \"Pictures\")")
      ->type_name("FILE")
      ->default_str("");
  app->add_flag("--quiet", f.quiet, "no progress bar, no notes on stderr");
  declare_checkpoint_flags(app, f.checkpoint);
}

// The mesh flags: without --strategy they lay the run on a device mesh (presets included:
// --dp 4 is ddp); with one, only dp-tp's --tp applies.
void parse_mesh(const CLI::App& a, const TrainFlags& f, train::TrainConfig& c) {
  bool mesh = false;
  for (const char* flag : {"--dp", "--pp", "--ep", "--zero"}) mesh = mesh || given(a, flag);
  const bool dp_tp = c.strategy == train::Strategy::kDpTp;
  if (given(a, "--strategy")) {
    if (mesh || (given(a, "--tp") && !dp_tp)) {
      fail("train", "--strategy " + f.strategy +
                        " is a preset of the mesh; give either --strategy or the mesh flags "
                        "(--dp --tp --pp --ep --zero), not both");
    }
  } else if (mesh || given(a, "--tp")) {
    c.strategy = train::Strategy::kMesh;
  }
  for (const char* flag : {"--schedule", "--virtual-stages", "--stage-layers"}) {
    if (given(a, flag) && f.pp == 1) {
      fail("train", std::string(flag) + " applies to a pipeline: give --pp > 1");
    }
  }
  train::pipeline::parse_schedule(f.schedule, &c.schedule);  // OneOf accepted it
  c.virtual_stages = f.virtual_stages;
  c.stage_layers = f.stage_layers;
  if (c.strategy != train::Strategy::kMesh) return;
  c.pp = f.pp;
  c.ep = f.ep;
  c.zero = f.zero;
  const int tp = given(a, "--tp") ? f.tp : 1;
  c.tp_size = tp;
  const bool world_given = given(a, "--ranks") || ProcessModel::from_environment(0, 1).mpi;
  if (given(a, "--dp")) {
    c.dp = f.dp;
    if (!world_given) c.ranks = c.dp * tp * c.pp;
  } else if (world_given) {
    c.dp = std::max(1, c.ranks / (tp * c.pp));  // validate() checks the product
  } else {
    c.dp = 1;
    c.ranks = tp * c.pp;
  }
  train::resolve_preset(c);
}

train::TrainConfig parse_config(const CLI::App& a, const TrainFlags& f) {
  train::TrainConfig c;
  train::parse_strategy(f.strategy, &c.strategy);
  const train::ModelSpec& spec = *train::find_model_spec(f.model);  // the CLI checked the name
  c.model = spec.kind();
  c.ranks = f.ranks;
  // Under mpirun the world is processes x --threads-per-process ranks (README, "Across
  // processes and machines"); --ranks defaults to that and must agree with it.
  c.threads_per_process = f.threads_per_process;
  const ProcessModel job = ProcessModel::from_environment(0, c.threads_per_process);
  if (!job.mpi && given(a, "--threads-per-process")) {
    fail("train", "--threads-per-process needs mpirun; without it use --ranks N");
  }
  if (job.mpi) {
    if (given(a, "--ranks") && f.ranks != job.world_size()) {
      fail("train", fmt::format("--ranks {} but mpirun started {} = {} ranks; drop --ranks or "
                                "make them match",
                                f.ranks, job.describe(), job.world_size()));
    }
    c.ranks = job.world_size();
    // single and accum run in one thread of one process: under mpirun every process would
    // run the whole job and print it.
    if (job.processes > 1 &&
        (c.strategy == train::Strategy::kSingle || c.strategy == train::Strategy::kAccum)) {
      fail("train", "--strategy " + f.strategy +
                        " trains in one process; run it without mpirun (or with -np 1)");
    }
  }
  if (c.strategy == train::Strategy::kSingle) {
    if (given(a, "--ranks") && f.ranks != 1) {
      fail("train", "--strategy single trains on one rank, not --ranks " + std::to_string(f.ranks) +
                        "; drop --ranks, or use --strategy accum (one rank accumulating what " +
                        std::to_string(f.ranks) + " would compute) or ddp");
    }
    c.ranks = 1;
  }
  c.steps = f.steps;
  c.global_batch = f.batch;
  c.micro_batches = f.micro_batches;
  const bool adam = f.optimizer == "adam";
  c.optimizer = adam ? model::OptimizerKind::kAdam : model::OptimizerKind::kSgd;
  c.lr = static_cast<float>(given(a, "--lr") ? f.lr : adam ? 0.01 : 0.05);
  c.precision = f.precision == "bf16" ? model::Precision::kMixedBf16 : model::Precision::kFp32;
  // A model's own flags apply to it alone.
  for (const train::ModelSpec* owner : train::model_specs()) {
    if (owner == &spec) continue;
    const std::vector<std::string> mine = spec.own_flags();
    for (const std::string& flag : owner->own_flags()) {
      if (given(a, flag) && std::find(mine.begin(), mine.end(), flag) == mine.end()) {
        fail("train", flag + " applies to --model " + owner->name());
      }
    }
  }
  train::ModelFlags model_flags;
  model_flags.dim = f.dim;
  model_flags.experts = f.experts;
  model_flags.top_k = f.top_k;
  model_flags.heads = f.heads;
  if (given(a, "--head-dim")) model_flags.head_dim = f.head_dim;
  model_flags.seq = f.seq;
  model_flags.vocab = f.vocab;
  if (given(a, "--hidden")) model_flags.hidden = f.hidden;
  if (given(a, "--layers")) model_flags.layers = f.layers;
  spec.configure(model_flags, c);
  c.tp_size = f.tp;
  parse_mesh(a, f, c);
  parse_algo(f.algo, &c.algo);  // AlgoFor() accepted it
  c.seed = static_cast<uint64_t>(f.seed);
  c.recompute = f.recompute == "full"        ? model::Recompute::kFull
                : f.recompute == "selective" ? model::Recompute::kSelective
                                             : model::Recompute::kNone;
  if (!f.pitfall.empty())
    c.pitfall = train::Pitfall::kForgetDivide;  // validate() checks the strategy
  c.checkpoint = f.checkpoint;
  return c;
}

std::string shape_text(const train::TrainConfig& c) { return train::model_spec(c).describe(c); }

// What runs: "1 rank", "1 rank accumulating as 4 would", "8 ranks (dp 4 x tp 2)".
std::string ranks_text(const train::TrainConfig& c) {
  switch (c.strategy) {
    case train::Strategy::kSingle:
      return "1 rank";
    case train::Strategy::kAccum:
      return fmt::format("1 rank accumulating as {} would", c.ranks);
    case train::Strategy::kDpTp:
      return fmt::format("{} ranks (dp {} x tp {})", c.ranks, c.ranks / c.tp_size, c.tp_size);
    case train::Strategy::kMesh: {
      const train::MeshShape m = c.mesh();
      std::string text = fmt::format("{} ranks (dp {} x tp {} x pp {}", c.ranks, m.dp, m.tp, m.pp);
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
  train::TrainConfig config = parse_config(a, f);
  try {
    train::validate(config);
  } catch (const UsageError& e) {
    fail("train", e.what());
  }
  check_checkpoint_flags(a, config, f.check);
  // Open the output files before any work: a bad path is a usage error, not a lost run.
  // Only the process of global rank 0 prints and writes files (all of them, with threads).
  const bool root = train::holds_global_rank0();
  OutputFile report, trace, html;
  if (given(a, "--report")) report = OutputFile("train", "report", f.report, root);
  if (given(a, "--html")) html = OutputFile("train", "html", f.html, root);
  if (given(a, "--trace")) trace = OutputFile("train", "trace", f.trace, root);
  // Every rank records its timeline: for the --trace file (rank 0 writes it), and in a
  // pipeline for the wall-time bubble.
  config.trace = given(a, "--trace") || config.pp > 1;
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
  if (config.pp > 1) {
    const PipelineBubble b = pipeline_bubble(config, run);
    std::printf(
        "pipeline bubble: %s of the slots idle (%.1f%%; formula %s), wall time %.1f%% "
        "(median over steps after the first)\n",
        train::pipeline::to_string(b.slots).c_str(), 100 * b.slots.value(),
        train::pipeline::to_string(b.formula).c_str(), 100 * b.wall);
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
    html.stage(
        html_page("dtsim train", "one run; hover a mark for its value", {{title, r}}, nullptr));
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
  declare(app, *flags);
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
