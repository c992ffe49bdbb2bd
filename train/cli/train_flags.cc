#include "train/cli/train_flags.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>

#include "runtime/algorithms/registry.h"
#include "runtime/process_model.h"
#include "train/cli/checkpoint.h"
#include "train/cli/flags.h"
#include "train/models/model_spec.h"
#include "train/strategies.h"

namespace dtsim::cli {
namespace {

const std::vector<std::string> kStrategies = {"single", "accum", "ddp", "zero1", "zero2",
                                              "zero3",  "tp",    "ep",  "dp-tp"};

}  // namespace

void declare_train_flags(CLI::App* app, TrainFlags& f) {
  app->add_option("--strategy", f.strategy,
                  "a preset is a mesh over --ranks N: ddp = --dp N, zero1|2|3 = --dp N "
                  "--zero 1|2|3, tp = --tp N, dp-tp = --dp N/T --tp T, ep = --dp N --ep N "
                  "(moe); single and accum: one rank (the references)")
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
  app->add_option("--cp", f.cp,
                  "mesh: context-parallel ranks: the sequence in 2 --cp chunks, attention as a "
                  "ring (gpt; --dp x --tp x --pp x --cp is the world size)")
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
  app->add_flag("--sequence-parallel", f.sequence_parallel,
                "gpt with --tp 2 or more: shard the norm regions along the sequence "
                "(all-gather and reduce-scatter in place of each all-reduce; docs/gpt.md)");
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
namespace {

void parse_mesh(const CLI::App& a, const TrainFlags& f, train::TrainConfig& c) {
  bool mesh = false;
  for (const char* flag : {"--dp", "--pp", "--ep", "--cp", "--zero"}) {
    mesh = mesh || given(a, flag);
  }
  const bool dp_tp = c.strategy == train::Strategy::kDpTp;
  if (given(a, "--strategy")) {
    if (mesh || (given(a, "--tp") && !dp_tp)) {
      fail("train", "--strategy " + f.strategy +
                        " is a preset of the mesh; give either --strategy or the mesh flags "
                        "(--dp --tp --pp --ep --cp --zero), not both");
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
  c.widths.pp = f.pp;
  c.widths.ep = f.ep;
  c.zero = f.zero;
  c.widths.cp = f.cp;
  const int tp = (given(a, "--tp") ? f.tp : 1) * c.widths.cp;  // ranks per replica and stage
  c.widths.tp = tp / c.widths.cp;
  const bool world_given = given(a, "--ranks") || ProcessModel::from_environment(0, 1).mpi;
  if (given(a, "--dp")) {
    c.widths.dp = f.dp;
    if (!world_given) c.ranks = c.widths.dp * tp * c.widths.pp;
  } else if (world_given) {
    c.widths.dp = std::max(1, c.ranks / (tp * c.widths.pp));  // validate() checks the product
  } else {
    // Experts shard over groups of --ep data-parallel ranks: --ep alone fills the data axis,
    // as --tp and --pp fill theirs.
    c.widths.dp = std::max(1, c.widths.ep);
    c.ranks = c.widths.dp * tp * c.widths.pp;
  }
  train::resolve_preset(c);
}

}  // namespace

train::TrainConfig parse_train_config(const CLI::App& a, const TrainFlags& f) {
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
  c.widths.tp = f.tp;
  parse_mesh(a, f, c);
  parse_algo(f.algo, &c.algo);  // AlgoFor() accepted it
  c.seed = static_cast<uint64_t>(f.seed);
  c.sequence_parallel = f.sequence_parallel;
  c.recompute = f.recompute == "full"        ? model::Recompute::kFull
                : f.recompute == "selective" ? model::Recompute::kSelective
                                             : model::Recompute::kNone;
  if (!f.pitfall.empty())
    c.pitfall = train::Pitfall::kForgetDivide;  // validate() checks the strategy
  c.checkpoint = f.checkpoint;
  return c;
}

}  // namespace dtsim::cli
