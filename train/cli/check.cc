#include "train/cli/check.h"

#include <cmath>
#include <cstdio>

namespace dtsim::cli {
namespace {

using train::ModelKind;
using train::Strategy;

// tests/train/train_test_util.h: kFp32Rtol/Atol and kBf16Rtol/Atol.
constexpr double kFp32Rtol = 1e-5, kFp32Atol = 1e-6;
constexpr double kBf16Rtol = 2.0 / 256, kBf16Atol = 2e-3;

bool data_parallel(Strategy s) {
  return s == Strategy::kDdp || s == Strategy::kZero1 || s == Strategy::kZero2 ||
         s == Strategy::kZero3;
}

std::string tolerance_text(double rtol, double atol) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "rtol %.3g atol %.3g", rtol, atol);
  return buf;
}

}  // namespace

CheckPlan plan_check(const train::TrainConfig& config) {
  CheckPlan p;
  p.reference = config;
  p.reference.pitfall = train::Pitfall::kNone;
  p.reference.trace = false;
  const bool bf16 = config.precision == model::Precision::kMixedBf16;
  p.rtol = bf16 ? kBf16Rtol : kFp32Rtol;
  p.atol = bf16 ? kBf16Atol : kFp32Atol;
  const Strategy s = config.strategy;
  const bool moe = config.model == ModelKind::kMoe;
  const bool deterministic = config.algo == Algo::kDeterministic;
  const int groups = config.ranks * config.micro_batches;

  if (s == Strategy::kSingle || (s == Strategy::kAccum && moe && groups > 1)) {
    // A reference itself (MoE accumulation has no other: its routing groups are its own):
    // checked for determinism, bitwise against a second run.
    p.bitwise = true;
  } else if (s == Strategy::kAccum) {
    p.reference.strategy = Strategy::kSingle;  // reference_test: within fp32 rounding
  } else if (data_parallel(s) && deterministic &&
             !(s == Strategy::kZero3 && config.micro_batches > 1)) {
    p.reference.strategy = Strategy::kAccum;  // ddp_test, zero_test: bitwise
    p.bitwise = true;
  } else if (moe && (data_parallel(s) || s == Strategy::kEp)) {
    p.reference.strategy = Strategy::kAccum;  // ep_test, zero_test: same routing groups
    if (s == Strategy::kEp && bf16 && config.optimizer == model::OptimizerKind::kAdam) {
      p.adam_step_slack = config.lr;  // ep_test's check_bf16_adam
    }
  } else if (data_parallel(s) && deterministic) {
    p.reference.strategy = Strategy::kAccum;  // zero_test: ZeRO-3 micro-batches, within fp32
  } else {
    p.reference.strategy = Strategy::kSingle;  // ddp, zero, tp, dp-tp tests
  }
  if (p.reference.strategy == Strategy::kSingle) p.reference.micro_batches = 1;
  p.description = std::string(p.bitwise ? "bitwise" : tolerance_text(p.rtol, p.atol)) + " vs " +
                  train::to_string(p.reference.strategy);
  return p;
}

CheckResult judge(const CheckPlan& plan, const train::RunResult& run,
                  const train::RunResult& reference) {
  CheckResult r;
  r.reference_name = train::to_string(plan.reference.strategy);
  r.comparison = train::compare(run, reference, plan.rtol, plan.atol);
  if (plan.bitwise) {
    r.criterion = "bitwise";
    r.passed = r.comparison.bitwise_equal;
    return r;
  }
  r.criterion = tolerance_text(plan.rtol, plan.atol);
  r.passed = r.comparison.passed;
  if (r.passed || plan.adam_step_slack <= 0 || run.params.size() != reference.params.size()) {
    return r;
  }
  // bf16 Adam under ep: every parameter within tolerance + lr, at most 1% beyond tolerance,
  // every loss within tolerance.
  r.criterion += " (+lr on <= 1% of params)";
  size_t over = 0;
  bool ok = run.losses.size() == reference.losses.size();
  for (size_t i = 0; ok && i < reference.params.size(); ++i) {
    const double d = std::abs(double(run.params[i]) - reference.params[i]);
    const double tol = plan.atol + plan.rtol * std::abs(reference.params[i]);
    ok = d <= tol + plan.adam_step_slack;
    over += d > tol;
  }
  for (size_t s = 0; ok && s < reference.losses.size(); ++s) {
    ok = std::abs(run.losses[s] - reference.losses[s]) <=
         plan.atol + plan.rtol * std::abs(reference.losses[s]);
  }
  r.passed = ok && over <= reference.params.size() / 100;
  return r;
}

}  // namespace dtsim::cli
