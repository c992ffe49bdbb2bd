// validate() turns every configuration a strategy cannot run into one line naming the CLI
// flag and the constraint; launch_training() validates, then dispatches on the strategy.
#include <string>
#include <utility>

#include "runtime/types.h"
#include "runtime/world.h"
#include "train/memory_plan.h"
#include "train/models/model_spec.h"
#include "train/pipeline_parallel/pipeline_parallel.h"
#include "train/pipeline_parallel/schedule.h"
#include "train/strategies.h"

namespace dtsim::train {
namespace {

[[noreturn]] void fail(const std::string& message) { throw UsageError(message); }

void require(bool ok, const std::string& message) {
  if (!ok) fail(message);
}

// "; try --batch 28 or 32": the multiples of `unit` nearest to `batch`.
std::string nearest_batches(int batch, int unit) {
  const int below = batch / unit * unit, above = below + unit;
  if (below == 0) return "; try --batch " + std::to_string(above);
  return "; try --batch " + std::to_string(below) + " or " + std::to_string(above);
}

void validate_counts(const TrainConfig& c) {
  require(c.ranks >= 1 && c.ranks <= World::kMaxRanks, "--ranks " + std::to_string(c.ranks) +
                                                           " must be between 1 and " +
                                                           std::to_string(World::kMaxRanks));
  require(c.steps >= 1, "--steps " + std::to_string(c.steps) + " must be at least 1");
  require(c.global_batch >= 1, "--batch " + std::to_string(c.global_batch) + " must be at least 1");
  require(c.micro_batches >= 1,
          "--micro-batches " + std::to_string(c.micro_batches) + " must be at least 1");
  require(c.lr > 0, "--lr " + std::to_string(c.lr) + " must be positive");
}

void validate_model(const TrainConfig& c) {
  require(!c.sequence_parallel || model_spec(c).has_sequence(),
          "--sequence-parallel shards a sequence: it needs --model gpt");
  const std::string why = model_spec(c).validate(c);
  require(why.empty(), why);
}

// The pitfall skips the division by N after the gradient sum, which only ddp and zero have.
void validate_pitfall(const TrainConfig& c) {
  require(c.pitfall == Pitfall::kNone || data_parallel(c.strategy),
          "--pitfall forget-divide applies to --strategy ddp, zero1, zero2, zero3");
}

// accum cuts the batch as data-parallel ranks would.
void validate_data_parallel(const TrainConfig& c) {
  if (c.strategy != Strategy::kAccum && !data_parallel(c.strategy)) return;
  const int unit = c.ranks * c.micro_batches;
  require(c.global_batch % unit == 0,
          "--batch " + std::to_string(c.global_batch) + " is not divisible by --ranks " +
              std::to_string(c.ranks) + " x --micro-batches " + std::to_string(c.micro_batches) +
              nearest_batches(c.global_batch, unit));
}

// The model's message about `--tp N`, said of the tp preset's width (--ranks).
std::string as_width(std::string why, int tp, const std::string& flag) {
  const auto swap = [&why](const std::string& from, const std::string& to) {
    if (const size_t at = why.find(from); at != std::string::npos) why.replace(at, from.size(), to);
  };
  swap("--tp " + std::to_string(tp),
       "the tensor-parallel width " + std::to_string(tp) + " (" + flag + ")");
  swap("or --tp", "or " + flag);
  return why;
}

// Tensor parallel (tp, dp-tp) splits the MLP's hidden width; expert parallel (ep) shards
// the MoE's experts, the same number on every rank, and splits the batch over the ranks.
void validate_model_parallel(const TrainConfig& c) {
  const std::string name = to_string(c.strategy);
  if (c.strategy == Strategy::kTp || c.strategy == Strategy::kDpTp) {
    require(model_spec(c).experts(c) == 0,
            "--strategy " + name + " needs a model without experts; for --model " +
                to_string(c.model) + " give --dp --tp (--ep) instead");
    const int tp = c.strategy == Strategy::kTp ? c.ranks : c.widths.tp;
    // The width is --ranks under tp (every rank holds a slice) and --tp under dp-tp.
    const std::string width =
        c.strategy == Strategy::kTp && !c.preset_from_mesh ? "--ranks" : "--tp";
    require(tp >= 1 && c.ranks % tp == 0,
            "--ranks " + std::to_string(c.ranks) + " is not divisible by --tp " +
                std::to_string(tp) + "; dp-tp runs --ranks / --tp replicas of --tp ranks each");
    const std::string why = model_spec(c).validate_mesh(c, {.tp = tp});
    require(why.empty(), width == "--tp" ? why : as_width(why, tp, width));
    const int dp = c.ranks / tp;
    require(c.global_batch % (dp * c.micro_batches) == 0,
            "--batch " + std::to_string(c.global_batch) + " is not divisible by the " +
                std::to_string(dp) + " data-parallel replicas x --micro-batches " +
                std::to_string(c.micro_batches) +
                nearest_batches(c.global_batch, dp * c.micro_batches));
  }
  if (c.strategy == Strategy::kEp) {
    const int e = model_spec(c).experts(c);
    require(e > 0, "--strategy ep needs --model moe (expert parallelism shards the experts)");
    const std::string width = c.preset_from_mesh ? "--ep" : "--ranks";
    require(c.ranks <= e, width + " " + std::to_string(c.ranks) + " exceeds --experts " +
                              std::to_string(e) +
                              ": expert parallelism needs at least one expert per rank; lower " +
                              width + " or raise --experts");
    require(e % c.ranks == 0, "--experts " + std::to_string(e) + " is not divisible by --ranks " +
                                  std::to_string(c.ranks) +
                                  ": every rank holds the same number of experts; pick --ranks "
                                  "dividing --experts");
    require(c.global_batch % (c.ranks * c.micro_batches) == 0,
            "--batch " + std::to_string(c.global_batch) + " is not divisible by --ranks " +
                std::to_string(c.ranks) + " x --micro-batches " + std::to_string(c.micro_batches) +
                nearest_batches(c.global_batch, c.ranks * c.micro_batches));
  }
}

std::string str(int v) { return std::to_string(v); }

// The pipeline flags, whatever the strategy: a schedule needs --pp > 1 (checked by the CLI),
// and a pipeline needs a schedule that validates and layers that divide into its chunks.
void validate_pipeline(const TrainConfig& c) {
  require(c.widths.pp >= 1, "--pp " + str(c.widths.pp) + " must be at least 1");
  require(c.virtual_stages >= 1,
          "--virtual-stages " + str(c.virtual_stages) + " must be at least 1");
  if (c.widths.pp == 1) {
    require(c.virtual_stages == 1, "--virtual-stages applies to --pp > 1 (interleaved schedule)");
    return;
  }
  require(c.strategy == Strategy::kMesh,
          "--pp " + str(c.widths.pp) +
              " is a mesh axis: give --dp --tp --pp instead of --strategy " +
              to_string(c.strategy));
  const std::string why = pipeline::validate(schedule_spec(c));
  require(why.empty(), why);
  // The pipeline cuts the MLP's blocks or the MoE's MoE layers (--layers either way),
  // evenly where they divide, else as evenly as they can (or as --stage-layers says).
  const std::string split = pipeline::validate_stage_layers(c, c.widths.pp * c.virtual_stages);
  require(split.empty(), split);
  require(c.schedule != pipeline::ScheduleKind::kZeroBubbleH1 || model_spec(c).splits_backward(),
          std::string("--schedule zb-h1 splits each layer's backward into input and weight "
                      "gradients, which --model ") +
              to_string(c.model) + "'s layers do not; use another --schedule");
  require(c.global_batch % (c.mesh().dp * c.micro_batches) == 0,
          "--batch " + str(c.global_batch) + " is not divisible by --dp " + str(c.mesh().dp) +
              " x --micro-batches " + str(c.micro_batches));
}

// --algo mpi: MPI's own collectives, on float32 and on the world communicator only; a mesh
// whose --algo collectives run on groups (dp-tp, pipelines) would fail at its first call.
void validate_mpi_algo(const TrainConfig& c) {
  // single and accum run no collective (and are --check's references under any --algo).
  if (c.algo != Algo::kMpi || c.strategy == Strategy::kSingle || c.strategy == Strategy::kAccum) {
    return;
  }
  require(c.precision == model::Precision::kFp32,
          "--algo mpi has no bfloat16 (MPI has no such type); use --precision fp32 or another "
          "--algo");
  const MeshShape m = c.mesh();
  // Experts shard over groups of --ep data-parallel ranks; with ep == dp those groups are
  // single ranks, which run nothing.
  require((m.dp == c.ranks || m.tp == c.ranks) && (m.ep == 1 || m.ep == m.dp),
          "--algo mpi runs MPI's collectives on the world communicator only, and this mesh "
          "(dp " +
              str(m.dp) + " x tp " + str(m.tp) + " x pp " + str(m.pp) + ", ep " + str(m.ep) +
              ") runs them on groups; use another --algo, or one axis (--dp or --tp) as the "
              "whole world");
}

// --dp --tp --pp --ep --zero (Strategy::kMesh): the product is the world, each axis fits
// the model, the batch splits over the data axis.
void validate_mesh(const TrainConfig& c) {
  if (c.strategy != Strategy::kMesh) return;
  const MeshShape m = c.mesh();
  // "--dp 2 x --tp 2 x --pp 1": the axes that multiply the world (ep lies inside dp), the
  // first three always, any other only when it is not 1.
  std::string product;
  for (int a = 0; a < kMeshAxes; ++a) {
    const auto axis = static_cast<MeshAxis>(a);
    const std::string flag = std::string("--") + axis_name(axis);
    require(m.on(axis) >= 1, flag + " " + str(m.on(axis)) + " must be at least 1");
    if (axis == MeshAxis::kEp || (a > static_cast<int>(MeshAxis::kPp) && m.on(axis) == 1)) continue;
    product += (product.empty() ? "" : " x ") + flag + " " + str(m.on(axis));
  }
  require(m.cp == 1 || model_spec(c).has_sequence(),
          "--cp " + str(m.cp) + " splits the sequence over a ring of ranks: it needs --model gpt");
  require(m.world() == c.ranks, product + " = " + str(m.world()) + " ranks, but the world has " +
                                    str(c.ranks) + " (--ranks); make the product the world size");
  require(c.zero >= 0 && c.zero <= 3, "--zero " + str(c.zero) + " must be 0, 1, 2 or 3");
  // The unsupported combinations first, so that the --dp hint below leads somewhere.
  const std::string why = model_spec(c).validate_mesh(c, m);
  require(why.empty(), why);
  require(c.pitfall == Pitfall::kNone,
          "--pitfall forget-divide applies to --strategy ddp, zero1, zero2, zero3");
  const int unit = m.dp * c.micro_batches;
  require(c.global_batch % unit == 0,
          "--batch " + str(c.global_batch) + " is not divisible by --dp " + str(m.dp) +
              " x --micro-batches " + str(c.micro_batches) + nearest_batches(c.global_batch, unit));
}

}  // namespace

void validate(const TrainConfig& config) {
  validate_pitfall(config);
  validate_counts(config);
  validate_model(config);
  validate_data_parallel(config);
  validate_model_parallel(config);
  validate_mesh(config);
  validate_pipeline(config);
  validate_mpi_algo(config);
  require_memory(config);  // memory_plan.h: refuse what cannot fit, before any work
}

std::optional<RunResult> launch_training(const TrainConfig& requested) {
  TrainConfig config = requested;
  resolve_preset(config);  // a preset given by its mesh runs the preset's code
  validate(config);
  switch (config.strategy) {
    case Strategy::kSingle:
      return run_single(config);
    case Strategy::kAccum:
      return run_accum(config);
    default:
      if (config.widths.pp > 1) return run_pipeline(config);  // train/pipeline_parallel/
      return run_mesh(config);
  }
  fail("--strategy has an unknown value");
}

RunResult run_training(const TrainConfig& config) {
  std::optional<RunResult> result = launch_training(config);
  if (!result) {
    throw Error("run_training: global rank 0 is in another process; use launch_training");
  }
  return std::move(*result);
}

}  // namespace dtsim::train
