// Measures this machine as a hardware file for the projection. Compute: `dtsim train
// --strategy single` on nine calibration shapes (mlp, moe and gpt; none of them a run
// bench/estimate_vs_train.py holds out), each the fastest of 5 runs (the least disturbed on a
// shared machine), and a least-squares fit, non-negative and in relative error, of each
// run's step time to
//
//   step = 3 FLOPs / peak + elements e + layers l + params q + s
//
// (a forward's activation elements and the layers: projection.h's forward_elements and
// layer_count; the parameters), whose terms become the file's peak_flops, element_seconds,
// layer_seconds, param_seconds and step_seconds. One rank runs its kernels on the intra-op
// threads of every core; `cores` ranks share them (train/intra_op.h): the same shapes,
// `cores` copies at once, give shared_slowdown (the median ratio of the slowest copy's step
// to the lone run's). Links: the alpha and beta of a 2-rank thread world's all_reduce as
// dtsim train runs it (Algo::kAuto), priced as a ring: a 4-byte call is 2 alpha, a 16 MiB
// call 2 alpha + n beta.
//
// Thread safety: runs Worlds; call from one (non-rank) thread.
#pragma once

#include <string>
#include <vector>

#include "train/estimate/hardware.h"

namespace dtsim::train::estimator {

struct CalibrationRun {
  std::string name;
  double flops = 0, elements = 0, layers = 0, params = 0;  // of one step
  double seconds = 0;                                      // measured median step, all cores
  double concurrent = 0;  // the slowest of `cores` copies run at once
  double fitted = 0;      // the fit's step time
};

struct Calibration {
  Hardware hw;
  std::vector<CalibrationRun> runs;
  double small_seconds = 0, large_seconds = 0, large_bytes = 0;  // the all_reduce timings
};

// Takes some seconds.
Calibration calibrate();

}  // namespace dtsim::train::estimator
