// Pipeline parallelism (GPipe, Huang et al. 2019; 1F1B, Narayanan et al. 2021; interleaved
// 1F1B, Megatron-LM) on the device mesh (train/mesh.h): dp x tp x pp ranks. The model's L
// blocks (the MLP's blocks or the MoE's MoE layers) are cut into p v chunks of L/(p v)
// blocks (the MoE's embedding rides with the first chunk, the head with the last); stage s
// holds chunks s, s + p, ..., each as a stack of plain, tensor-parallel (MLP) or
// expert-parallel (MoE, --ep) layers.
// Each step, every replica runs its M micro-batches through its pipeline with a checked
// schedule (schedule.h, executed by pipeline_stage.h): activations go forward and their
// gradients back by point-to-point sends on the pipeline group; the last stage computes the
// loss (its tp rank 0 reports it). Then each stage all-reduces its gradients over the dp
// ranks of the same (tp, pp) position (in rank order under --algo deterministic) and
// divides by dp, or with ZeRO-1 reduce-scatters them and all-gathers the updated shards,
// and steps its own optimizer; under --ep the replicated tensors are summed over dp and the
// experts over expert_dp. A stage's weight gradients accumulate in micro-batch order, and
// an MoE layer routes each micro-batch on its own (its aux loss weighs in its backward), so
// without tp and ep and with --algo deterministic the run is bitwise equal to run_accum with
// dp groups of M micro-batches. train::run_pipeline (strategies.h) is the entry point.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "model/layer.h"
#include "runtime/communicator.h"
#include "train/config.h"
#include "train/data_parallel/data_parallel.h"
#include "train/mesh_shape.h"
#include "train/pipeline_parallel/schedule.h"
#include "train/result.h"
#include "train/step_runner.h"
#include "train/traced_comm.h"

namespace dtsim::train::pipeline {

// The L layers a pipeline cuts: the MLP's blocks (--layers) or the MoE's MoE layers.
int pipeline_blocks(const TrainConfig& config);

// The model layers [first, last) of chunk `chunk` (0..p v - 1): blocks
// [c L/(p v), (c + 1) L/(p v)), the MoE's embedding too for the first chunk and the head
// for the last.
std::pair<int, int> chunk_layers(const TrainConfig& config, const ScheduleSpec& spec, int chunk);

// "" when the model's blocks split into `chunks` pipeline chunks of at least one block each,
// by --stage-layers (one count per chunk, adding up to --layers) or evenly; else one line.
std::string validate_stage_layers(const TrainConfig& config, int chunks);

// "" when `config` can run as dp x pp with `spec`, else one line naming the flag: its
// blocks (--layers) divisible by p v, the batch by dp M, config.micro_batches = M
// (the mesh's own checks are train::validate's).
std::string validate_pipeline(const TrainConfig& config, const ScheduleSpec& spec, int dp);

// The activation bytes pipeline rank `stage` holds at its peak with micro-batches of
// `batch` samples (all fp32), by the formula: each local chunk j keeps P_j passes, P_j its
// peak passes held (peak_held_per_chunk: forward to backward, or to W for ZB-H1), of
// b (D + k D + 2 k H [+ O]) floats (the input copy, k block outputs and each block's saved
// pre-activation and GELU output, and the head's output on the last chunk), for ZB-H1 plus
// b (k (D + H) [+ O]) (each block's output and pre-activation gradients and the head's
// output gradient, kept from B to W), plus its workspace of b H floats (a block's fused
// backward; none for ZB-H1's input half) and, on the last chunk, b D for the head's input
// gradient;
// the stage adds one received activation and one received gradient buffer of b D floats
// where it receives them, and b O per micro-batch in flight (forward to backward or B,
// peak_in_flight_per_chunk) on the last chunk for the loss gradient. Under mixed precision
// each chunk's ParamStore also keeps two fp32 views of its largest layer.
int64_t stage_activation_bytes(const TrainConfig& config, const ScheduleSpec& spec, int stage,
                               int batch);

// The bubble of step `step` measured in wall time on the --trace timelines of one
// replica's stages (timelines[s]: stage s's events, TrainConfig::trace): each stage's
// forward and backward phases (named F3, B3, W3, F3.1 as walk draws them) are its busy time;
// the step spans from the first phase's start to the last one's end over all stages.
struct WallBubble {
  double busy_seconds = 0;  // summed over the stages
  double span_seconds = 0;  // first start to last end
  double bubble = 0;        // 1 - busy / (p span)
};
WallBubble wall_bubble(const std::vector<const std::vector<PhaseEvent>*>& timelines,
                       const ScheduleSpec& spec, int step);

// The wall-time bubble of a finished pipeline run, from its ranks' timelines (recorded when
// TrainConfig::trace): the median of wall_bubble's bubble over every replica and every step
// after the first (the first also allocates; step 0 when it is the only one). NaN when the
// run has no compute phases on its timelines.
double measured_wall_bubble(const TrainConfig& config, const RunResult& run);

// A rank's groups on the mesh (train/mesh.h; null where an axis has size 1): `pipe` holds
// its replica's stages in stage order (its rank is the stage), `dp` the same (tp, pp)
// position of every replica, `tp` its tensor-parallel group (blocks split Megatron-style),
// `ep` its expert group (the MoE's experts sharded) and `expert_dp` the ranks of the stage
// holding the same experts.
struct PipelineGroups {
  Communicator* pipe = nullptr;
  Communicator* dp = nullptr;
  Communicator* tp = nullptr;
  Communicator* ep = nullptr;
  Communicator* expert_dp = nullptr;
  Communicator* cp = nullptr;     // the context-parallel ring
  Communicator* dp_cp = nullptr;  // the gradient sync over dp x cp (dp when cp is 1)
};

// Where a rank sits on the model-parallel axes inside its stage, with the groups its layers
// talk on (null for the layout only).
struct ChunkParallel {
  int tp_rank = 0, tp_size = 1;
  TracedComm* tp = nullptr;
  int ep_rank = 0, ep_size = 1;
  TracedComm* ep = nullptr;
  int cp_rank = 0, cp_size = 1;
  TracedComm* cp = nullptr;
};
// Chunk `chunk`'s layers on the rank `at` (rank_layers, cut to the chunk).
model::Layers layers_of_chunk(const TrainConfig& config, const ScheduleSpec& spec, int chunk,
                              const ChunkParallel& at = {});

// The parameters stage `stage` holds, chunk after chunk.
model::ParamLayout stage_layout(const TrainConfig& config, const ScheduleSpec& spec, int stage,
                                const ChunkParallel& at);

// One rank's part of a run: builds the stage's chunks and runs `runner` over them, each
// chunk's buffer in its own data-parallel wrapper (data_parallel.h) over the stage's dp
// group with the config's ZeRO stage, taking parts[c] (the placement's, one per chunk).
void run_pipeline_rank(const TrainConfig& config, const ScheduleSpec& spec,
                       const PipelineGroups& groups, StepRunner& runner, const MeshShape& shape,
                       const std::vector<DpParts>& parts);

}  // namespace dtsim::train::pipeline
