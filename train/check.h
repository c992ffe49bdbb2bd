// The equivalence check, in one place: for a TrainConfig, which single-rank reference run it
// must match, whether it must match bitwise, and within which tolerance; then the verdict.
// `dtsim train --check`, `dtsim demo` and tests/train all judge a run here.
//
// Reference and criterion:
//   - DDP and ZeRO under Algo::kDeterministic do the reference's float operations in the
//     same order: bitwise equal to accumulation over the same ranks x micro-batches (ZeRO-3
//     with several micro-batches reduce-scatters each one: within tolerance of it); so do
//     dp x pp meshes without tp (MLP or MoE), with ZeRO-0/1/2 along dp, and with ep when
//     ep = dp (each expert runs on and sums its sources apart, in accumulation's group
//     order: expert_parallel.cc); ep < dp sums an expert's groups in two levels (within its
//     expert groups, then across them), so it is judged by tolerance and floor;
//   - MoE runs (any data-parallel strategy, ep) against accumulation over the same ranks x
//     micro-batches, since expert capacity and the aux loss depend on the token grouping;
//   - single, and MoE accum with more than one group (a reference itself), bitwise against a
//     second run of itself: a determinism check;
//   - everything else against plain single-rank training.
//   - Stated tolerance (allclose on every parameter and loss): fp32 rtol 1e-5 atol 1e-6; bf16
//     keeps 8 significant bits, so two rounding steps, rtol 2/256 atol 2e-3.
//
// Lockstep. When the run recorded its parameters after every step (record_history, fp32),
// the reference and the floor partner start every step from the run's parameters of the
// step before (lockstep_plan), and the comparisons below are over every step's parameters:
// round-off cannot compound through Adam from step to step, so a correct run passes however
// long or wide it is, while an error of one step (a forgotten division, a dropped
// all-reduce, a wrong shard) still shows in that step. A resumed run (--resume) is judged
// from its checkpoint: the reference and the floor partner resume from it too (on one rank),
// so they start at its step from its parameters and optimizer state; they never --save.
// Divergence. A run whose loss grows past 100 x its first step's fails whatever the
// comparison says (a reference started from its parameters diverges with it).
//
// Verdict. A bitwise pair passes only when bitwise equal. Otherwise a run passes when it is
// allclose to the reference within the stated tolerance. When it is not, that can still be
// correct training: a different summation order rounds differently, and Adam turns a tiny
// difference in a near-zero gradient into a whole lr step, so longer or wider runs drift
// past any fixed tolerance. So we then measure the reassociation floor: the difference
// between two correct single-rank runs that differ only in summation order,
//   - reference single: single vs accumulation over the strategy's grouping (R ranks x M
//     micro-batches, R lowered until it divides the batch; at least two groups);
//   - reference accum: accum vs the same accum summed in reverse (reverse_accumulation);
//   - the accum strategy vs single is itself the first pair, so its floor is single vs
//     the reversed accum.
// The run passes "within float drift" when it is allclose to the reference with the floor
// added to atol four times over: for every parameter i,
//   |run_i - ref_i| <= atol + rtol |ref_i| + 4 F,   F = max_j |ref_j - partner_j|,
// and likewise every loss with the loss floor. The floor is the largest difference over all
// parameters, not each parameter's own: reassociation drift is chaotic (which near-zero
// Adam gradient flips sign depends on the exact rounding), so two correct orderings move
// different parameters, and a per-parameter floor fails correct runs where the partner
// happened not to flip (measured at D 64 H 256, 20 fp32 Adam steps: 1 tp and 60 dp-tp
// parameters of 66436 beyond their own 4 x floor, none beyond 4 x the largest).
// The factor 4 is headroom for a strategy's reassociation being larger than the floor
// pair's. In lockstep the floor also holds in gradient units: the references record each
// parameter's step size s_i (how far it moved per unit of its gradient: lr for SGD,
// lr (1 - beta1) / (1 - beta1^t) / (sqrt(v_hat) + eps) for Adam), G = max_j |ref_j -
// partner_j| / s_j is the floor pair's largest gradient difference, and parameter i's floor is
// F_i = max(F, min(G s_i, lr / 2)): a gradient as far off as the floor pair's moves a
// parameter whose Adam step is large per unit of gradient (a near-zero gradient) that much
// further, and never more than Adam's step of about lr can (a reversed step: 4 F_i <= 2 lr).
// TP reorders the hidden sums, which the floor pair does not, and its run on 8 ranks at D 64
// H 256 (20 Adam steps) drifts 7.2e-5, 21 F, on such parameters: it fails a uniform floor and
// passes F_i (check_test's Lockstep cases, which also fail a 1e-3 error in one tensor at one
// step and a 1% wrong lr). Without lockstep (the demo) the floor is F alone. With two groups the
// reversed accumulation is the same sum (addition commutes), so that floor is 0 and the stated
// tolerance alone applies. An error smaller than 4 F cannot be seen; the ones the lesson
// cares about (a forgotten division, a wrong lr) are far above it, as check_test asserts.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "train/config.h"
#include "train/result.h"

namespace dtsim::train {

struct Tolerance {
  double rtol = 0, atol = 0;
};

// The stated allclose tolerance for a precision (fp32: 1e-5, 1e-6; bf16: 2/256, 2e-3).
Tolerance stated_tolerance(model::Precision precision);

struct CheckPlan {
  TrainConfig reference;          // the run to match
  bool bitwise = false;           // pass only when parameters and losses are identical
  Tolerance tolerance;            // allclose tolerance when not bitwise
  TrainConfig floor_partner;      // with `reference`, the floor pair (unused when bitwise)
  std::string description;        // "bitwise vs accum", "rtol 1e-05 atol 1e-06 vs single"
  std::string floor_description;  // "single vs accum 4x1", "accum 4x1 vs reversed"
};

enum class Verdict { kBitwise, kWithinTolerance, kWithinDrift, kFail };

struct CheckResult {
  Comparison comparison;  // run vs reference under the stated tolerance
  bool passed = false;
  Verdict verdict = Verdict::kFail;
  bool floor_measured = false;
  double floor = 0;            // max |ref - partner| over parameters
  double loss_floor = 0;       // max |ref - partner| over per-step losses
  double worst_diff = 0;       // |run - ref| at the parameter with the largest excess over tol
  double worst_tol = 0;        // atol + rtol |ref| at that parameter
  double worst_floor = 0;      // the floor at that parameter (F, or G s_i in lockstep)
  std::string reference_name;  // "single" or "accum"
  std::vector<double> reference_losses;  // the reference run's loss per step
  std::string criterion;                 // "bitwise" or "rtol 1e-05 atol 1e-06"
  // "PASS", "PASS (within float drift: 3.1e-05 <= 1.5e-06 tol + 4 x 2.7e-05 floor)",
  // "FAIL (beyond float drift: ...)", or plain "FAIL" (bitwise, or no floor measured).
  std::string verdict_text;
  bool lockstep = false;  // every step compared from the same starting parameters
};

// Runs one configuration; empty means run_training (the CLI passes one with progress or a cache).
using RunFn = std::function<RunResult(const TrainConfig&)>;

// The reference run, criterion and floor pair for `config`.
CheckPlan plan_check(const TrainConfig& config);

// Judges `run` against `reference` (the result of plan.reference); when the run fails the
// stated tolerance, runs plan.floor_partner through `run_fn` to measure the floor.
CheckResult judge(const CheckPlan& plan, const RunResult& run, const RunResult& reference,
                  const RunFn& run_fn = {});

// The same with the floor partner's result supplied (tests that perturb a run).
CheckResult judge_with_partner(const CheckPlan& plan, const RunResult& run,
                               const RunResult& reference, const RunResult& partner);

// `plan` for a run that recorded its parameters after every step (record_history) in fp32:
// the reference and the floor partner start each step from the run's parameters after the
// step before, and record theirs; judge() then compares every step's parameters, so a
// step's round-off is judged on its own and cannot compound. Otherwise `plan` unchanged.
CheckPlan lockstep_plan(CheckPlan plan, const RunResult& run);

// plan_check (lockstep_plan when the run recorded its history), run the reference, judge.
CheckResult check(const TrainConfig& config, const RunResult& run, const RunFn& run_fn = {});

}  // namespace dtsim::train
