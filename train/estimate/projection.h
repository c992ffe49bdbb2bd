// Architecture and mesh in; memory per device, bytes per axis and step time out.
//
// One step on a mesh dp x tp x pp (x cp, with ep inside dp for MoE), Megatron-LM's rank order
// (tp fastest, then cp, then dp, then pp), m = B / (dp b) micro-batches per pipeline:
//
//   t_micro  = FLOPs of one micro-batch on one device (forward, backward = 2 forwards, and
//              what recomputation repeats) / (peak x efficiency)
//            + gpt: the element-wise work between the GEMMs, memory-bound: kActivationTraffic
//              (5, 7 with full recomputation) bytes moved per byte a layer saves without
//              recomputation (Korthikanti et al.'s count) / the device's memory bandwidth
//            + its tensor-parallel collectives (gpt: 2 all-reduces a layer in forward and 2
//              in backward, all-gather + reduce-scatter pairs under sequence parallelism;
//              dtsim's MLP: 1 and 1), context-parallel K/V all-gathers, expert all-to-alls
//              and the stage boundary's two sends, none of them overlapped
//   t_pipe   = m t_micro / (1 - bubble), the bubble from the schedule's dry run
//   t_step   = t_pipe + the data-parallel gradient sync (by ZeRO stage, not overlapped;
//              ZeRO-3 gathers and reduce-scatters each layer every micro-batch)
//
// On a calibrated file (Hardware::cores > 0: ranks as threads or processes on one machine's
// cores) the compute terms are one core's, scaled by how the devices share the cores
// (parallel_speedup alone, shared_slowdown up to the cores, time-sliced beyond), and a
// collective among more devices than cores pays oversubscribed_latency a message.
//
// Each collective's time is its algorithm's alpha-beta cost (collective_cost.h) on the link
// its group needs: within a node when the group's span of ranks fits one node.
#pragma once

#include <string>
#include <vector>

#include "model/memory.h"
#include "train/estimate.h"
#include "train/estimate/activations.h"
#include "train/estimate/architecture.h"
#include "train/estimate/collective_cost.h"
#include "train/estimate/hardware.h"
#include "train/pipeline_parallel/schedule.h"

namespace dtsim::train::estimator {

// Bytes of device-memory traffic per byte of saved activation in one forward and backward:
// forward writes each activation and its consumer reads it (2); backward reads it, writes
// its gradient and the next operation reads that (3). Full recomputation repeats the
// forward's 2.
inline constexpr double kActivationTraffic = 5, kRecomputeTraffic = 2;

struct ProjectionInput {
  Architecture arch;
  int dp = 1, tp = 1, pp = 1, ep = 1, cp = 1;
  int zero = 0;
  pipeline::ScheduleKind schedule = pipeline::ScheduleKind::kOneFOneB;
  int virtual_stages = 1;
  bool sequence_parallel = false;
  Recompute recompute = Recompute::kNone;
  bool dropout = true;
  int micro_batch = 1;   // b
  int global_batch = 1;  // B, a multiple of dp b
  model::Precision precision = model::Precision::kMixedBf16;
  model::OptimizerKind optimizer = model::OptimizerKind::kAdam;
  Algorithm all_reduce = Algorithm::kRing;
  Hardware hw;  // hw.cores > 0: the devices share that many cores
};

// "" when `in` is consistent, else one line saying what is wrong and how to fix it.
std::string validate(const ProjectionInput& in);

// One kind of traffic on one axis, per step per device.
struct AxisTraffic {
  std::string axis;  // dp, tp, pp, ep, cp
  CollectiveKind kind;
  Algorithm algorithm;
  int group = 1;       // ranks in the collective
  bool inter = false;  // over the inter-node link
  double calls = 0;    // per step
  double bytes = 0;    // buffer of one call
  double sent = 0;     // bytes one device sends per step
  double seconds = 0;  // per step, on the critical path
};

struct Projection {
  ParamCounts params;
  double params_per_device = 0;
  MeshEstimate mesh;                   // model state, bubble, activations per stage
  double micro_batch_activations = 0;  // one micro-batch through the model, one tp/cp rank
  double activation_peak = 0;          // the largest stage's
  double device_bytes = 0;             // state + activation_peak
  int micro_batches = 1;               // m per pipeline per step
  int devices = 1;
  std::vector<AxisTraffic> traffic;
  // Seconds per step.
  double compute = 0, bubble = 0, step = 0;
  double memory_bound = 0;    // the element-wise part of compute
  double sharing = 1;         // times a device's one-core time, as devices share the cores
  double expert_compute = 0;  // a device's expert FFNs (ep > 1), balanced, in compute
  double model_flops = 0;     // per step, all devices: 3 forwards
  double hardware_flops = 0;  // + recomputed forwards
  double tokens_per_second = 0;
  double mfu = 0, hfu = 0;
  double tflops_per_device = 0;  // hardware_flops / (step devices), as Narayanan et al. count
  double exposed_seconds(const std::string& axis) const;
};

// Activation elements one forward of `samples` samples (gpt: sequences, their tokens split
// over `cp`) writes on one tp rank: the element-wise work a calibrated file prices per
// element (Hardware::element_seconds). mlp: each block's D + H / tp + D; moe: each layer's
// D + E + k (2 D + F) a token; gpt: Korthikanti et al.'s saved elements a layer
// (activations.h, no dropout) and the logits.
double forward_elements(const Architecture& a, int samples, int tp, int cp);
// Transformer layers (gpt), blocks (mlp) or MoE layers (moe).
int layer_count(const Architecture& a);

// A calibrated file's cost per activation element of a `kind` model's forward
// (Hardware::moe_, gpt_element_seconds; element_seconds for mlp or when those are 0).
double element_seconds(const Hardware& hw, ArchKind kind);

// Ring-attention blocks one cp rank computes for `samples` sequences in a forward and backward
// (and the forward again under recomputation) on one tp rank: each layer's heads / tp times
// 2 cp + 1 blocks a pass (model/ring_attention.h: a full block and two diagonal ones at the
// first ring step, two full ones at each later step); 0 when cp is 1 (Hardware::
// ring_block_seconds prices each, its merge and bookkeeping beyond the FLOPs and elements).
double ring_attention_blocks(const Architecture& a, int samples, int tp, int cp,
                             Recompute recompute);

// The share of a step's linear-layer FLOPs (forward, input and weight gradients of `samples`
// samples on one tp rank) in GEMMs that dtsim's kernels cut into two slices or more
// (model/parallel.h's gemm_slice_width, along the side model/linear_kernels.cc cuts); a lone
// rank's intra-op threads speed up only these (Hardware::parallel_speedup). mlp: the
// blocks' and the head's; moe: each expert's (b k / E tokens), the router's, input and head;
// gpt: QKV, projection, MLP and LM head of b s tokens.
double splittable_share(const Architecture& a, int samples, int tp);

// The projection of `in` (validate(in) must be "").
Projection project(const ProjectionInput& in);

// The largest micro-batch b (dividing B / dp) whose device bytes fit `memory`, or 0.
int largest_micro_batch(ProjectionInput in, double memory);

}  // namespace dtsim::train::estimator
