#include "train/check.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <tuple>

#include "train/models/model_spec.h"
#include "train/strategies.h"

namespace dtsim::train {
namespace {

constexpr double kFloorFactor = 4;

std::string fmt(const char* f, double a, double b = 0, double c = 0, double d = 0) {
  char buf[160];
  std::snprintf(buf, sizeof buf, f, a, b, c, d);
  return buf;
}

std::string tolerance_text(Tolerance t) { return fmt("rtol %.3g atol %.3g", t.rtol, t.atol); }

std::string grouping_text(const TrainConfig& c) {
  return std::string("accum ") + std::to_string(c.ranks) + "x" + std::to_string(c.micro_batches) +
         (c.reverse_accumulation ? " reversed" : "");
}

// Accumulation over the strategy's grouping: R ranks (lowered until R x M divides the
// batch) x M micro-batches, and at least two groups so that the sum order differs.
TrainConfig accum_partner(const TrainConfig& config, const TrainConfig& reference) {
  TrainConfig p = reference;
  p.strategy = Strategy::kAccum;
  p.micro_batches = config.micro_batches;
  int g = config.ranks;
  while (g > 1 && config.global_batch % (g * p.micro_batches) != 0) --g;
  if (g * p.micro_batches == 1 && config.global_batch % 2 == 0) g = 2;
  p.ranks = g;
  return p;
}

// max |a - b| over parameters and over losses (compare()'s, NaN counting as infinite);
// infinite on a shape mismatch.
std::pair<double, double> max_diffs(const RunResult& a, const RunResult& b) {
  if (a.params.size() != b.params.size() || a.losses.size() != b.losses.size()) {
    return {INFINITY, INFINITY};
  }
  const Comparison c = compare(a, b, 0, 0);
  return {c.max_abs_diff, c.max_loss_diff};
}

}  // namespace

Tolerance stated_tolerance(model::Precision precision) {
  if (precision == model::Precision::kMixedBf16) return {2.0 / 256, 2e-3};
  return {1e-5, 1e-6};
}

namespace {

CheckPlan plan_references(const TrainConfig& config) {
  CheckPlan p;
  p.reference = config;
  p.reference.pitfall = Pitfall::kNone;
  p.reference.trace = false;
  p.reference.reverse_accumulation = false;
  p.reference.on_step = nullptr;  // the caller's progress callback is the run's, not ours
  // Sequence parallelism is a tensor-parallel layout, which a reference does not have.
  p.reference.sequence_parallel = false;
  p.tolerance = stated_tolerance(config.precision);
  const Strategy s = config.strategy;
  // A batch-coupled model (MoE capacity) needs a reference that groups samples as the run.
  const bool moe = model_spec(config).batch_coupled();
  const bool deterministic = config.algo == Algo::kDeterministic;
  const int groups = config.ranks * config.micro_batches;

  if (s == Strategy::kMesh) {
    // The data axis decides the grouping: dp replicas x micro-batches, whatever tp, pp, ep.
    const MeshShape m = config.mesh();
    p.reference.ranks = m.dp;
    p.reference.widths.dp = 1;
    p.reference.widths.tp = 1;
    p.reference.widths.pp = 1;
    p.reference.widths.ep = 1;
    p.reference.zero = 0;
    p.reference.virtual_stages = 1;
    TrainConfig by_dp = config;
    by_dp.ranks = m.dp;
    // dp x pp (any ZeRO stage but 3; MLP or MoE) does accumulation's float operations in
    // its order, and so does ep when its expert groups span dp (each expert's sources are
    // all of the reference's groups); tp reorders the blocks' sums, and ep over several
    // expert groups sums an expert's groups in two levels (within, then across); cp merges
    // partial softmaxes in ring order and averages per-rank token means.
    p.bitwise =
        deterministic && m.tp == 1 && m.cp == 1 && (m.ep == 1 || m.ep == m.dp) && config.zero < 3;
    p.reference.strategy = p.bitwise || moe ? Strategy::kAccum : Strategy::kSingle;
    if (p.reference.strategy == Strategy::kSingle) p.reference.micro_batches = 1;
    p.description = (p.bitwise ? std::string("bitwise") : tolerance_text(p.tolerance)) + " vs " +
                    to_string(p.reference.strategy);
    if (p.bitwise) return p;
    if (p.reference.strategy == Strategy::kAccum) {
      p.floor_partner = p.reference;
      p.floor_partner.reverse_accumulation = true;
    } else {
      p.floor_partner = accum_partner(by_dp, p.reference);
    }
    p.floor_partner.on_step = nullptr;
    p.floor_description =
        std::string(to_string(p.reference.strategy)) + " vs " + grouping_text(p.floor_partner);
    return p;
  }
  if (s == Strategy::kSingle || (s == Strategy::kAccum && moe && groups > 1)) {
    p.bitwise = true;  // a reference itself: checked for determinism against a second run
  } else if (s == Strategy::kAccum) {
    p.reference.strategy = Strategy::kSingle;  // reference_test: within fp32 rounding
  } else if ((data_parallel(s) || s == Strategy::kEp) && deterministic &&
             !(s == Strategy::kZero3 && config.micro_batches > 1)) {
    p.reference.strategy = Strategy::kAccum;  // ddp_test, zero_test, ep_test: bitwise
    p.bitwise = true;
  } else if (moe || data_parallel(s)) {
    // MoE: the same routing groups (ep_test, zero_test). MLP ddp/zero get here only under
    // kDeterministic (ZeRO-3 with micro-batches): within tolerance of accumulation.
    p.reference.strategy = moe || deterministic ? Strategy::kAccum : Strategy::kSingle;
  } else {
    p.reference.strategy = Strategy::kSingle;  // tp, dp-tp
  }
  if (p.reference.strategy == Strategy::kSingle) p.reference.micro_batches = 1;
  p.description = (p.bitwise ? std::string("bitwise") : tolerance_text(p.tolerance)) + " vs " +
                  to_string(p.reference.strategy);
  if (p.bitwise) return p;

  if (p.reference.strategy == Strategy::kAccum || s == Strategy::kAccum) {
    p.floor_partner = s == Strategy::kAccum ? config : p.reference;
    p.floor_partner.pitfall = Pitfall::kNone;
    p.floor_partner.trace = false;
    p.floor_partner.reverse_accumulation = true;
  } else {
    p.floor_partner = accum_partner(config, p.reference);
  }
  p.floor_partner.on_step = nullptr;
  p.floor_description =
      std::string(to_string(p.reference.strategy)) + " vs " + grouping_text(p.floor_partner);
  return p;
}

}  // namespace

CheckPlan plan_check(const TrainConfig& config) {
  CheckPlan p = plan_references(config);
  // A resumed run's references resume from the same checkpoint (onto their one rank): they
  // start from its parameters and optimizer state at its step, as the run does. They save
  // nothing.
  for (TrainConfig* c : {&p.reference, &p.floor_partner}) {
    c->checkpoint.save_dir.clear();
    c->checkpoint.save_every = 0;
    c->checkpoint.on_io = nullptr;
  }
  return p;
}

CheckResult judge_with_partner(const CheckPlan& plan, const RunResult& run,
                               const RunResult& reference, const RunResult& partner) {
  CheckResult r;
  r.reference_name = to_string(plan.reference.strategy);
  r.reference_losses = reference.losses;
  r.comparison = compare(run, reference, plan.tolerance.rtol, plan.tolerance.atol);
  r.criterion = plan.bitwise ? "bitwise" : tolerance_text(plan.tolerance);
  // A diverged reference leaves nothing to compare against; a diverged run fails plainly.
  if (const int s = reference.first_nonfinite_step(); s >= 0) {
    r.verdict_text = std::string("FAIL (the reference diverged") +
                     (run.first_nonfinite_step() >= 0 ? " too" : "") +
                     fmt(": its loss is not finite from step %.0f)", s);
    return r;
  }
  if (const int s = run.first_nonfinite_step(); s >= 0) {
    r.verdict_text = fmt(
        "FAIL (the run diverged: its loss is not finite from step %.0f; the reference's is)", s);
    return r;
  }
  if (plan.bitwise) {
    r.passed = r.comparison.bitwise_equal;
    r.verdict = r.passed ? Verdict::kBitwise : Verdict::kFail;
    r.verdict_text = r.passed ? "PASS" : "FAIL";  // the criterion says "bitwise"
    return r;
  }
  if (r.comparison.passed) {
    r.passed = true;
    r.verdict = Verdict::kWithinTolerance;
    r.verdict_text = "PASS";
    return r;
  }
  r.floor_measured = true;
  std::tie(r.floor, r.loss_floor) = max_diffs(reference, partner);
  const Tolerance t = plan.tolerance;
  const double loss_slack = kFloorFactor * r.loss_floor;
  bool params_ok = run.params.size() == reference.params.size() &&
                   partner.params.size() == reference.params.size();
  bool losses_ok = run.losses.size() == reference.losses.size();
  // Lockstep references record each parameter's step size (how far it moved per unit of its
  // gradient); the floor then holds in gradient units too: F_i = max(F, G s_i).
  const std::vector<float>* sizes = nullptr;
  if (reference.step_sizes.size() == 1 && reference.step_sizes[0].size() == run.params.size()) {
    sizes = &reference.step_sizes[0];
  }
  double gradient_floor = 0;  // G = max_j |ref_j - partner_j| / s_j
  for (size_t j = 0; sizes != nullptr && params_ok && j < sizes->size(); ++j) {
    const double d = std::abs(double(reference.params[j]) - partner.params[j]);
    if ((*sizes)[j] > 0) gradient_floor = std::max(gradient_floor, d / (*sizes)[j]);
  }
  // No correct run moves a parameter more than Adam's largest step, about lr, from another
  // (a near-zero gradient's step can at most reverse): 4 F_i stops at 2 lr.
  const double cap =
      plan.reference.optimizer == model::OptimizerKind::kAdam ? plan.reference.lr / 2.0 : INFINITY;
  double worst = -INFINITY, largest = -INFINITY;  // |run - ref| / (tol + 4 F_i); |run - ref|
  for (size_t i = 0; params_ok && i < reference.params.size(); ++i) {
    const double b = reference.params[i];
    const double d = std::isnan(run.params[i]) ? INFINITY : std::abs(run.params[i] - b);
    const double tol = t.atol + t.rtol * std::abs(b);
    const double floor =
        sizes ? std::max(r.floor, std::min(cap, gradient_floor * (*sizes)[i])) : r.floor;
    const double ratio = d / (tol + kFloorFactor * floor);
    // A failing run names its worst parameter; a passing one its largest difference.
    if (ratio > 1 ? ratio > worst : worst <= 1 && d > largest) {
      r.worst_diff = d;
      r.worst_tol = tol;
      r.worst_floor = floor;
    }
    worst = std::max(worst, ratio);
    largest = std::max(largest, d);
  }
  params_ok = params_ok && std::isfinite(r.floor) && std::isfinite(gradient_floor) && worst <= 1;
  for (size_t s = 0; losses_ok && s < reference.losses.size(); ++s) {
    const double b = reference.losses[s];
    const double d = std::isnan(run.losses[s]) ? INFINITY : std::abs(run.losses[s] - b);
    losses_ok = d <= t.atol + t.rtol * std::abs(b) + loss_slack;
  }
  r.passed = params_ok && losses_ok;
  r.verdict = r.passed ? Verdict::kWithinDrift : Verdict::kFail;
  if (r.passed) {
    r.verdict_text = fmt("PASS (within float drift: %.2g <= %.2g tol + 4 x %.2g floor)",
                         r.worst_diff, r.worst_tol, r.worst_floor);
  } else if (!params_ok) {
    r.verdict_text = fmt("FAIL (beyond float drift: %.2g > %.2g tol + 4 x %.2g floor)",
                         r.worst_diff, r.worst_tol, r.worst_floor);
  } else {
    r.verdict_text = fmt("FAIL (beyond float drift: loss %.2g > tol + 4 x %.2g loss floor)",
                         r.comparison.max_loss_diff, r.loss_floor);
  }
  return r;
}

namespace {

// A lockstep run as one comparable result: every step's parameters one after the other.
RunResult lockstep_view(const RunResult& r) {
  RunResult v;
  v.losses = r.losses;
  v.steps = r.steps;
  for (const std::vector<float>& p : r.param_history) {
    v.params.insert(v.params.end(), p.begin(), p.end());
  }
  if (!r.step_sizes.empty()) {
    v.step_sizes.emplace_back();
    for (const std::vector<float>& s : r.step_sizes) {
      v.step_sizes[0].insert(v.step_sizes[0].end(), s.begin(), s.end());
    }
  }
  return v;
}

bool lockstep(const CheckPlan& plan) { return plan.reference.lockstep != nullptr; }

// The run's loss above kDivergenceFactor times its first step's: training that blew up,
// which a reference started from the same parameters (lockstep) blows up with it.
constexpr double kDivergenceFactor = 100;

}  // namespace

CheckResult judge(const CheckPlan& plan, const RunResult& run, const RunResult& reference,
                  const RunFn& run_fn) {
  const bool step = lockstep(plan);
  const RunResult run_v = step ? lockstep_view(run) : RunResult();
  const RunResult ref_v = step ? lockstep_view(reference) : RunResult();
  const RunResult& a = step ? run_v : run;
  const RunResult& b = step ? ref_v : reference;
  CheckResult r;
  if (plan.bitwise || compare(a, b, plan.tolerance.rtol, plan.tolerance.atol).passed) {
    r = judge_with_partner(plan, a, b, b);  // no floor to measure
  } else {
    const RunResult partner =
        run_fn ? run_fn(plan.floor_partner) : run_training(plan.floor_partner);
    r = judge_with_partner(plan, a, b, step ? lockstep_view(partner) : partner);
  }
  r.lockstep = step;
  if (r.passed && !run.losses.empty() && std::isfinite(run.losses[0])) {
    for (size_t s = 0; s < run.losses.size(); ++s) {
      if (run.losses[s] > kDivergenceFactor * std::abs(run.losses[0])) {
        r.passed = false;
        r.verdict = Verdict::kFail;
        r.verdict_text =
            fmt("FAIL (the run diverged: loss %.3g at step %.0f is over %.0f x its "
                "first, %.3g; lower --lr)",
                run.losses[s], static_cast<double>(s), kDivergenceFactor, run.losses[0]);
        break;
      }
    }
  }
  return r;
}

CheckPlan lockstep_plan(CheckPlan plan, const RunResult& run) {
  if (run.param_history.empty() || plan.reference.precision != model::Precision::kFp32) {
    return plan;
  }
  for (TrainConfig* c : {&plan.reference, &plan.floor_partner}) {
    c->lockstep = &run.param_history;
    c->record_history = true;
  }
  plan.description += " (lockstep)";
  return plan;
}

CheckResult check(const TrainConfig& config, const RunResult& run, const RunFn& run_fn) {
  const CheckPlan plan = lockstep_plan(plan_check(config), run);
  const RunResult reference = run_fn ? run_fn(plan.reference) : run_training(plan.reference);
  return judge(plan, run, reference, run_fn);
}

}  // namespace dtsim::train
