// What to train and how: the one description that the CLI fills from flags, that every
// strategy reads, and that the single-rank reference runs on the same global batch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "model/gpt_model.h"
#include "model/layer_stack.h"
#include "model/memory.h"
#include "model/mlp.h"
#include "model/moe_model.h"
#include "runtime/types.h"
#include "runtime/world.h"
#include "train/checkpoint/options.h"
#include "train/mesh_shape.h"
#include "train/pipeline_parallel/schedule.h"

namespace dtsim::train {

enum class Strategy {
  kSingle,  // one rank, the whole global batch per step (the reference)
  kAccum,   // one rank, gradient accumulation over micro-batches (DDP's bitwise reference)
  kDdp,
  kZero1,
  kZero2,
  kZero3,
  kTp,    // Megatron tensor parallel (MLP blocks)
  kEp,    // expert parallel (MoE)
  kDpTp,  // 2-D grid: data parallel x tensor parallel
  kMesh,  // any other device mesh: --dp --tp --pp --ep --cp --zero (TrainConfig::widths, zero)
};

enum class ModelKind { kMlp, kMoe, kGpt };

// The lesson's first pitfall, selectable so the demo can show what it does.
enum class Pitfall { kNone, kForgetDivide };

struct TrainConfig {
  Strategy strategy = Strategy::kSingle;
  ModelKind model = ModelKind::kMlp;
  int ranks = 4;
  // Under mpirun: rank threads per MPI process (ranks = processes x this; launch.h).
  int threads_per_process = 1;
  int steps = 20;
  int global_batch = 32;  // samples per optimizer step, over all data-parallel ranks
  int micro_batches = 1;  // per rank per step (DDP no_sync accumulation; kAccum's M)
  model::OptimizerKind optimizer = model::OptimizerKind::kSgd;
  float lr = 0.05f;
  model::Precision precision = model::Precision::kFp32;
  model::MlpConfig mlp;
  model::MoeModelConfig moe;
  model::GptConfig gpt;
  Algo algo = Algo::kAuto;          // all_reduce algorithm (kDeterministic: bitwise runs)
  size_t bucket_bytes = 64 * 1024;  // DDP gradient bucket size
  // The mesh flags (--dp --tp --pp --ep --cp): kMesh's device mesh, ranks = dp x tp x pp x cp
  // (ep shards within dp); kDpTp reads tp alone (its dp is ranks / tp), the other presets
  // none. mesh() gives every strategy's mesh. A new axis is a field of MeshShape, not here.
  MeshShape widths{.tp = 2};
  int zero = 0;  // ZeRO stage along the data axis (0: plain DDP all-reduce)
  // Sequence parallelism on the tensor-parallel axis (tp > 1, --model gpt; model/gpt_layers.h).
  bool sequence_parallel = false;
  // The pipeline (pp > 1): schedule and chunks per rank; m is micro_batches.
  pipeline::ScheduleKind schedule = pipeline::ScheduleKind::kOneFOneB;
  int virtual_stages = 1;
  // Blocks per pipeline chunk, chunk 0 first (--stage-layers); empty: balanced, chunk c
  // taking blocks [c L / C, (c + 1) L / C) of L over C = pp x virtual_stages chunks.
  std::vector<int> stage_layers;
  Pitfall pitfall = Pitfall::kNone;
  // Set by resolve_preset when mesh flags (--tp 4, --dp 4 --ep 4) became a preset, so that
  // messages name the flags the user gave, not the preset's (--ranks).
  bool preset_from_mesh = false;
  // Activation recomputation of every rank's LayerStack (model/layer_stack.h).
  model::Recompute recompute = model::Recompute::kNone;
  uint64_t seed = 1;
  bool trace = false;  // record per-rank phase and collective timings
  // Called on global rank 0 (the only rank of single/accum) as each step finishes, with the
  // number of steps done and that step's global mean loss (RunResult::losses[steps_done - 1]),
  // e.g. to print the loss or draw a progress bar; may be empty.
  std::function<void(int steps_done, double loss)> on_step;
  // kAccum only: sum the groups' gradients (and accumulate each group's micro-batches) in
  // reverse order. The same training in a different summation order: train/check.h measures
  // the reassociation floor of MoE and accumulation references with it.
  bool reverse_accumulation = false;
  // kSingle with plain SGD (no momentum) on an fp32 MLP: the update runs inside backward as
  // each weight gradient is computed, gradients never stored (model::Layer::backward_sgd),
  // bitwise the separate optimizer step; false runs that separate step (tests compare both).
  bool sgd_in_backward = true;
  // Testing: every step starts from NaN in every rank's gradient buffers
  // (StepRunner::add_gradients). A step writes each gradient before it reads it, so the
  // run's bits are those without it; a strategy that reads last step's gradients ends in NaN.
  bool poison_gradients = false;
  // The lockstep check (check.h): record the full parameters after every step
  // (RunResult::param_history); and, for the references (single, accum) in fp32, start each
  // step s > 0 from (*lockstep)[s - 1] instead of their own parameters (borrowed; must
  // outlive the run), so that round-off cannot compound from step to step.
  bool record_history = false;
  const std::vector<std::vector<float>>* lockstep = nullptr;
  // --save, --save-every, --resume (train/checkpoint/); with a resume, `steps` counts the
  // whole run: it continues from the checkpoint's step to `steps`.
  checkpoint::Options checkpoint;
  // Options of the rank threads' World (the controlled scheduler for schedule tests,
  // planted mutants); the defaults run free threads.
  WorldOptions world;

  // The mesh this run lays its ranks on: kMesh's fields, or what a preset means (ddp and
  // zero1-3: dp = ranks; tp: tp = ranks; dp-tp: dp x tp_size; ep: dp = ep = ranks).
  MeshShape mesh() const;
};

// The pipeline schedule of a run: (schedule, pp, micro_batches, virtual_stages).
pipeline::ScheduleSpec schedule_spec(const TrainConfig& config);

// Turns a kMesh config whose mesh is one of the presets into that preset (--dp 4 is ddp,
// --dp 4 --zero 3 is zero3, --tp 4 is tp, --dp 2 --tp 2 is dp-tp, --dp 4 --ep 4 is ep), so a
// preset and its mesh flags run the same code; other configs are left as they are.
void resolve_preset(TrainConfig& config);

// The full single-rank parameter layout of the model `config` names (mlp or moe).
model::ParamLayout model_layout(const TrainConfig& config);

// ddp and zero1-3: replicas that each take B/N samples and sum their gradients over the
// ranks (the strategies Pitfall::kForgetDivide applies to).
bool data_parallel(Strategy s);

const char* to_string(Strategy s);
const char* to_string(ModelKind m);
// Parses the CLI names: single, accum, ddp, zero1, zero2, zero3, tp, ep, dp-tp, mesh.
bool parse_strategy(const std::string& s, Strategy* out);

}  // namespace dtsim::train
