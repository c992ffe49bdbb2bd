#include "train/estimate.h"

#include "train/placement_plan.h"

namespace dtsim::train {
namespace {

using model::MemoryCategory;

void set(Estimate& e, MemoryCategory c, double bytes) { e.bytes[static_cast<int>(c)] = bytes; }

// Bytes one device sends per step with ring collectives over n data-parallel ranks, of a
// gradient of g bytes and weights of w (estimate.h).
double dp_bytes_sent(int zero_stage, double n, double g, double w) {
  const double share = (n - 1) / n;  // of a buffer, per device, per ring pass
  switch (zero_stage) {
    case 0:
      return 2 * share * g;
    case 1:  // ZeRO section 7: reduce-scatter the gradients, all-gather the weights
    case 2:
      return share * (g + w);
    default:
      return share * (2 * w + g);
  }
}

}  // namespace

Estimate estimate(const EstimateInput& in) {
  const double psi = in.params, n = in.ranks;
  const bool mixed = in.precision == model::Precision::kMixedBf16;
  const double width = mixed ? 2 : 4;  // bytes of a weight and of a gradient
  const bool adam = in.optimizer == model::OptimizerKind::kAdam;
  const bool momentum = adam || in.optimizer == model::OptimizerKind::kSgdMomentum;
  // The divisor of each category: which objects the stage shards over the N ranks.
  const double state_div = in.zero_stage >= 1 ? n : 1;
  const double grad_div = in.zero_stage >= 2 ? n : 1;
  const double weight_div = in.zero_stage >= 3 ? n : 1;

  Estimate e;
  e.parameter_bytes = width * psi;
  e.gradient_bytes = width * psi;
  set(e, MemoryCategory::kWeights, e.parameter_bytes / weight_div);
  set(e, MemoryCategory::kGradients, e.gradient_bytes / grad_div);
  set(e, MemoryCategory::kMasterWeights, mixed ? 4 * psi / state_div : 0);
  set(e, MemoryCategory::kAdamM, momentum ? 4 * psi / state_div : 0);
  set(e, MemoryCategory::kAdamV, adam ? 4 * psi / state_div : 0);
  for (double b : e.bytes) e.static_bytes += b;

  e.bytes_sent_per_step = dp_bytes_sent(in.zero_stage, n, e.gradient_bytes, e.parameter_bytes);
  return e;
}

Estimate estimate_from_elements(const StateElements& el, int dp, int zero_stage,
                                model::Precision precision, model::OptimizerKind optimizer) {
  Estimate e;
  const std::array<int64_t, model::kNumMemoryCategories> b = state_bytes(el, precision, optimizer);
  for (int c = 0; c < model::kNumMemoryCategories; ++c) {
    e.bytes[c] = static_cast<double>(b[c]);
    e.static_bytes += e.bytes[c];
  }
  const double width = precision == model::Precision::kMixedBf16 ? 2 : 4;
  e.parameter_bytes = e.gradient_bytes = width * static_cast<double>(el.params);
  e.bytes_sent_per_step = dp_bytes_sent(zero_stage, dp, e.gradient_bytes, e.parameter_bytes);
  return e;
}

MeshEstimate estimate_mesh(const MeshEstimateInput& in) {
  const pipeline::ScheduleSpec& spec = in.schedule;
  MeshEstimate m;
  m.devices = in.dp * in.tp * spec.stages;
  m.params_per_device = in.params / (static_cast<double>(in.tp) * spec.stages);
  m.state = estimate({.params = m.params_per_device,
                      .ranks = in.dp,
                      .zero_stage = in.zero_stage,
                      .precision = in.precision,
                      .optimizer = in.optimizer});
  m.bubble_formula = pipeline::bubble_formula(spec);
  const int64_t actions = int64_t{2} * spec.stages * spec.virtual_stages * spec.micro_batches;
  m.dry_run = actions <= MeshEstimate::kMaxDryRunActions;
  if (m.dry_run) {
    const pipeline::Schedule schedule = pipeline::make_schedule(spec);
    const pipeline::DryRun run = pipeline::dry_run(schedule);
    m.bubble = run.bubble;
    m.in_flight = run.peak_in_flight;
    m.held = m.in_flight;
    if (spec.kind == pipeline::ScheduleKind::kZeroBubbleH1) {  // v = 1: one chunk per stage
      for (int r = 0; r < spec.stages; ++r)
        m.held[r] = pipeline::peak_held_per_chunk(schedule, r)[0];
    }
  } else {
    m.bubble = m.bubble_formula;
    for (int r = 0; r < spec.stages; ++r) m.in_flight.push_back(pipeline::in_flight_bound(spec, r));
    for (int r = 0; r < spec.stages; ++r) m.held.push_back(pipeline::held_bound(spec, r));
  }
  const double chunk = in.activation_bytes / (spec.stages * spec.virtual_stages);
  for (int n : m.held) m.activation_bytes.push_back(n * chunk);
  return m;
}

}  // namespace dtsim::train
