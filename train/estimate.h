// The analytical estimator: static model-state bytes per device by category and bytes sent
// per step per device, for any parameter count, rank count, ZeRO stage and precision. The
// formulas are the lesson's (16 bytes per parameter for mixed-precision Adam, ring traffic
// 2(N - 1)/N of the data) and are tested against dtsim's measured accounting.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "model/memory.h"
#include "train/pipeline_parallel/schedule.h"
#include "train/pipeline_parallel/schedule_check.h"

namespace dtsim::train {

struct EstimateInput {
  double params = 0;   // Psi
  int ranks = 1;       // N data-parallel ranks
  int zero_stage = 0;  // 0: DDP, 1: optimizer state, 2: + gradients, 3: + parameters
  model::Precision precision = model::Precision::kMixedBf16;
  model::OptimizerKind optimizer = model::OptimizerKind::kAdam;
};

struct Estimate {
  // Static bytes per device by model::MemoryCategory (activations are not estimated: 0).
  std::array<double, model::kNumMemoryCategories> bytes{};
  double static_bytes = 0;     // sum over the categories
  double gradient_bytes = 0;   // one full gradient in its precision (what DDP all-reduces)
  double parameter_bytes = 0;  // one full set of weights in their precision
  // Bytes one device sends per step with ring collectives: stage 0 all-reduces the
  // gradients, 2(N-1)/N G; stages 1 and 2 reduce-scatter them and all-gather the updated
  // weights, (N-1)/N (G + W), no more than DDP (ZeRO paper, section 7); stage 3 all-gathers
  // the weights twice and reduce-scatters, (N-1)/N (2 W + G).
  double bytes_sent_per_step = 0;
};

// The estimate for `in` (ranks >= 1, stage 0..3).
Estimate estimate(const EstimateInput& in);

// The estimate of one device whose model state its placements give (placement_plan.h's
// elements: the exact shards of dtsim's own models on a mesh), ZeRO `zero_stage` over `dp`
// ranks: its categories from the elements, its full gradient and weights (and the traffic)
// of the parameters it holds.
struct StateElements;
Estimate estimate_from_elements(const StateElements& e, int dp, int zero_stage,
                                model::Precision precision, model::OptimizerKind optimizer);

// A device mesh dp x tp x pp (Megatron-LM's 3D parallelism) with ZeRO along dp. Each device
// holds Psi / (tp pp) parameters (tensor parallelism shards every layer, the pipeline
// splits the layers evenly); ZeRO shards that slice's state over the dp ranks of its stage.
struct MeshEstimateInput {
  double params = 0;  // Psi of the whole model
  int dp = 1, tp = 1;
  int zero_stage = 0;
  model::Precision precision = model::Precision::kMixedBf16;
  model::OptimizerKind optimizer = model::OptimizerKind::kAdam;
  pipeline::ScheduleSpec schedule;  // stages = pp; must validate
  // Activations one micro-batch saves for backward through the whole model on one
  // tensor-parallel rank (0: unknown, only the in-flight counts are estimated).
  double activation_bytes = 0;
};

struct MeshEstimate {
  int devices = 1;               // dp tp pp
  double params_per_device = 0;  // Psi / (tp pp)
  Estimate state;                // model state of one device; traffic is the dp group's only
  // The schedule's unit-slot dry run: measured bubble and peak in-flight micro-batches (chunk
  // units when interleaved) per stage; the paper's formula beside it. A schedule of more
  // than kMaxDryRunActions compute actions is not dry-run (it would take minutes and
  // gigabytes): then bubble is the formula and in_flight the schedule's bound, which
  // pipeline_schedule_test proves equal to the dry run for GPipe, 1F1B and interleaved.
  static constexpr int64_t kMaxDryRunActions = int64_t{1} << 20;
  bool dry_run = true;
  pipeline::Fraction bubble, bubble_formula;
  std::vector<int> in_flight;
  // Per stage: the micro-batches whose activations it keeps at its peak: in_flight, but for
  // ZB-H1 a micro-batch's activations stay until its W (peak_held_per_chunk; held_bound
  // when not dry-run).
  std::vector<int> held;
  // Per stage: held x activation_bytes / (pp v), the activations a device of the stage
  // holds at its peak.
  std::vector<double> activation_bytes;
};

// The estimate for `in` (dp, tp >= 1; in.schedule valid).
MeshEstimate estimate_mesh(const MeshEstimateInput& in);

}  // namespace dtsim::train
