// Measures this machine as a hardware file for the projection: the compute rate of dtsim's
// own training step (a single-rank run of a calibration MLP, FLOPs / seconds, per core) and
// the alpha and beta of a thread world's ring all_reduce (2 ranks: a 4-byte call is
// 2 alpha, a 16 MiB call 2 alpha + n beta). Ranks are threads sharing the cores, so the
// file sets Hardware::cores: one rank runs at the single-rank rate (its kernels' intra-op
// threads gain little at these shapes: measured, bench/estimate_vs_train.py), N > cores
// ranks at cores / N of it.
//
// Thread safety: runs Worlds; call from one (non-rank) thread.
#pragma once

#include "train/estimate/hardware.h"

namespace dtsim::train::estimator {

struct Calibration {
  Hardware hw;
  double step_flops = 0, step_seconds = 0;                       // the calibration run's
  double small_seconds = 0, large_seconds = 0, large_bytes = 0;  // the all_reduce timings
};

// Takes a few seconds.
Calibration calibrate();

}  // namespace dtsim::train::estimator
