// Measures this machine as a hardware file for the projection. Compute: `dtsim train
// --strategy single` on thirteen calibration shapes (mlp, moe and gpt, three of them tiny;
// none of them a run bench/estimate_vs_train.py holds out), each the median of 5 runs of 20
// steps (the trials outermost, so a slow stretch of a shared machine falls on one trial of
// every shape), and a least-squares fit, non-negative and in relative error, of each run's
// step time to
//
//   step = 3 FLOPs / peak + elements e_kind + params q + s
//
// (a forward's activation elements: projection.h's forward_elements, at a cost per model
// kind, as moe's routing and gpt's attention run other element-wise kernels than mlp's),
// each run's kernels on one core, whose terms become the file's one-core peak_flops,
// element_seconds (moe_, gpt_), param_seconds and step_seconds. How ranks share the cores
// (train/intra_op.h): the same runs with the kernels on every core give parallel_speedup
// (over the shapes whose GEMMs the kernels split); the same runs as ddp on `cores`, 2 x and
// 4 x `cores` rank threads (the batch split among them, as a mesh splits its global batch)
// give, fitted over the shapes for each, a rank's slowdown over the fit's one-core time for
// its share and its gradients' all_reduce cost per byte (Hardware's shared_, oversubscribed_,
// crowded_slowdown and _sync_seconds). The first gpt shape as `--cp 2` gives
// ring_block_seconds: what its projection without them leaves, per ring-attention block; the
// first moe shape whose experts split 2 x `cores` ways, as ep on that many ranks,
// expert_imbalance: what its projection leaves, over its expert compute.
// Links, on 2 rank threads: the channels' alpha and beta from a ring all_gather (of 1 float
// a rank, and of 4 MiB), the shared buffer's from dtsim's shared all_reduce (4 bytes, 4 MiB);
// an all_gather on twice as many rank threads as cores gives oversubscribed_latency (its
// p - 1 messages).
//
// Thread safety: runs Worlds; call from one (non-rank) thread.
#pragma once

#include <array>
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
  double crowded = 0;         // and on 4 x `cores`
  double fitted = 0;          // the fit's step time
};

struct Calibration {
  Hardware hw;
  std::vector<CalibrationRun> runs;
  double large_bytes = 0;
  double small_seconds = 0, large_seconds = 0;                // the shared all_reduce's
  double gather_small_seconds = 0, gather_large_seconds = 0;  // the ring all_gather's
  std::string ring_name;                            // the context-parallel run (ring_block_seconds)
  double ring_seconds = 0;                          // its median step
  double ring_projected = 0;                        // the projection's, without ring_block_seconds
  std::string expert_name;                          // the expert-parallel run (expert_imbalance)
  double expert_seconds = 0, expert_projected = 0;  // likewise
  // Under mpirun: the job's ranks and twice as many (its rank threads doubled), their ddp
  // slowdown and gradient all_reduce seconds per byte.
  std::array<int, 2> job_ranks{};
  std::array<double, 2> job_slowdown{}, job_sync_seconds{};
  int link_ranks = 2;                 // the world the links were measured on
  int oversubscribed_ranks = 0;       // twice the cores
  double oversubscribed_seconds = 0;  // a 4-byte all_reduce on that many rank threads
};

// Takes about half a minute.
Calibration calibrate();

// Under mpirun: `base` (a thread-world calibration's file) with its links measured on the
// job's world laid out as `model` (every process of the job calls it, as calibrate() measures
// a thread world's; processes > cores: what an oversubscribed job pays), and the sharing
// regimes of the job's ranks and of twice as many (its rank threads doubled) fitted to the
// calibration shapes' ddp steps on those worlds. Compute, ring_block_seconds and
// oversubscribed_latency stay `base`'s. Throws UsageError for a world of one rank.
Calibration calibrate_links(const Hardware& base, const ProcessModel& model);

}  // namespace dtsim::train::estimator
