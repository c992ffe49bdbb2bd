// Measures this machine as a hardware file for the projection. Compute: `dtsim train
// --strategy single` on thirteen calibration shapes (mlp, moe and gpt, three of them tiny;
// none of them a run bench/estimate_vs_train.py holds out), each the median of 5 runs of 20
// steps (interleaved with the runs below, so drift on a shared machine spoils no one kind),
// and a least-squares fit, non-negative and in relative error, of each run's step time to
//
//   step = 3 FLOPs / peak + elements e_kind + params q + s
//
// (a forward's activation elements: projection.h's forward_elements, at a cost per model
// kind, as moe's routing and gpt's attention run other element-wise kernels than mlp's),
// each run's kernels on one core, whose terms become the file's one-core peak_flops,
// element_seconds (moe_, gpt_), param_seconds and step_seconds. How ranks share the cores
// (train/intra_op.h): the same runs with the kernels on every core give parallel_speedup
// (over the shapes whose GEMMs the kernels split); the same runs as ddp on `cores` rank
// threads (the batch split among them, as a mesh splits its global batch) shared_slowdown,
// on 2 x `cores` oversubscribed_slowdown (medians over the shapes of the ratio to the fit's
// one-core time for a rank's share of the batch). Links, on 2 rank threads: the
// channels' alpha and beta from a ring all_gather (of 1 float a rank, and of 4 MiB), the shared
// buffer's from dtsim's shared all_reduce (4 bytes, 4 MiB); an all_gather on twice as many rank
// threads as cores gives oversubscribed_latency (its p - 1 messages).
//
// Thread safety: runs Worlds; call from one (non-rank) thread.
#pragma once

#include <string>
#include <vector>

#include "runtime/process_model.h"
#include "train/estimate/hardware.h"

namespace dtsim::train::estimator {

struct CalibrationRun {
  std::string name;
  double flops = 0, elements = 0, params = 0;  // of one step
  double seconds = 0;         // measured median step, kernels on one core (median of 5)
  double all_cores = 0;       // the same, kernels on every core
  double concurrent = 0;      // as ddp on `cores` rank threads, the batch split among them
  double oversubscribed = 0;  // the same on 2 x `cores`
  double fitted = 0;          // the fit's step time
};

struct Calibration {
  Hardware hw;
  std::vector<CalibrationRun> runs;
  double large_bytes = 0;
  double small_seconds = 0, large_seconds = 0;                // the shared all_reduce's
  double gather_small_seconds = 0, gather_large_seconds = 0;  // the ring all_gather's
  int link_ranks = 2;                 // the world the links were measured on
  int oversubscribed_ranks = 0;       // twice the cores
  double oversubscribed_seconds = 0;  // a 4-byte all_reduce on that many rank threads
};

// Takes about half a minute.
Calibration calibrate();

// Under mpirun: `base` (a thread-world calibration's file) with its links measured on the
// job's world laid out as `model` (every process of the job calls it, as calibrate() measures
// a thread world's; processes > cores: what an oversubscribed job pays). Compute and
// oversubscribed_latency stay `base`'s. Throws UsageError for a world of one rank.
Calibration calibrate_links(const Hardware& base, const ProcessModel& model);

}  // namespace dtsim::train::estimator
