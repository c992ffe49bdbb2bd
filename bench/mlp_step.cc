// One core, no ranks: the MLP training step of bench/torch_compare.sh (forward, backward,
// SGD; a fresh synthetic batch every step, as `dtsim train --strategy single` makes, but
// made outside the timed step) timed per step in wall-clock and in this thread's CPU time.
// CPU time is what the step costs the core; on a shared machine it stays put while wall
// time grows with other programs.
//
//   mlp_step [--dim D] [--hidden H] [--batch B] [--steps S] [--overwrite 0|1] [--fused 0|1]
//
// --overwrite 1: forward_backward_overwrite instead of zero_grad + forward_backward (same
// bits; PyTorch's counterpart is zero_grad(set_to_none=True)).
// --fused 1: forward_backward_sgd, the SGD step applied inside backward as each weight
// gradient is computed, gradients never stored (same bits as --overwrite 1 with its
// separate sgd.step; dtsim train --strategy single runs it with plain SGD).
//
// Prints `dtsim_step wall_ms W cpu_ms C cpu_p10_ms P data_cpu_ms D` (medians over the steps
// after the first, and the 10th percentile of the CPU times; D: making the batch, which the
// step's times leave out, as bench/torch_mlp.py's do).
#include <oneapi/tbb/global_control.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

#include "bench/step_clock.h"
#include "model/data.h"
#include "model/mlp.h"
#include "model/optimizer.h"

using dtsim::bench::median;
using dtsim::bench::seconds;

int main(int argc, char** argv) {
  using namespace dtsim::model;
  MlpConfig c;
  c.input_dim = 256;
  c.hidden_dim = 1024;
  c.num_blocks = 1;
  int batch = 64, steps = 50, overwrite = 0, fused = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const int v = std::atoi(argv[i + 1]);
    if (flag == "--dim") {
      c.input_dim = v;
    } else if (flag == "--hidden") {
      c.hidden_dim = v;
    } else if (flag == "--batch") {
      batch = v;
    } else if (flag == "--steps") {
      steps = v;
    } else if (flag == "--overwrite") {
      overwrite = v;
    } else if (flag == "--fused") {
      fused = v;
    } else {
      std::fprintf(
          stderr,
          "mlp_step: unknown option '%s' (--dim/--hidden/--batch/--steps/--overwrite/--fused)\n",
          argv[i]);
      return 2;
    }
  }
  if (c.input_dim < 1 || c.hidden_dim < 1 || batch < 1 || steps < 2 || overwrite < 0 ||
      overwrite > 1 || fused < 0 || fused > 1) {
    std::fprintf(stderr,
                 "mlp_step: --dim, --hidden, --batch must be >= 1, --steps >= 2, --overwrite and "
                 "--fused 0 or 1\n");
    return 2;
  }
  // One thread: oneTBB's workers would run kernels outside this thread's CPU clock.
  tbb::global_control one_thread(tbb::global_control::max_allowed_parallelism, 1);
  MlpModel model(c, 1);
  SgdConfig sc;
  sc.lr = 0.05f;
  Sgd sgd(sc, model.num_params());
  RegressionTask task(c.input_dim, c.output_dim, 1);
  std::vector<float> x(size_t(batch) * c.input_dim), y(size_t(batch) * c.output_dim);
  std::vector<double> wall, cpu, data;
  for (int s = 0; s < steps; ++s) {
    // The batch is made before the clocks start, as bench/torch_mlp.py makes its batches
    // before its loop: the step timed is forward, backward and SGD on both sides.
    const double d0 = seconds(CLOCK_THREAD_CPUTIME_ID);
    task.batch(s, 0, batch, x, y);
    const double w0 = seconds(CLOCK_MONOTONIC), c0 = seconds(CLOCK_THREAD_CPUTIME_ID);
    if (fused) {
      model.forward_backward_sgd(x, y, batch, 1.0f / float(batch), sgd.plain_update());
    } else {
      if (overwrite) {
        model.forward_backward_overwrite(x, y, batch, 1.0f / float(batch));
      } else {
        model.zero_grad();
        model.forward_backward(x, y, batch);
      }
      sgd.step(model.params(), model.grads());
    }
    if (s > 0) {
      wall.push_back(seconds(CLOCK_MONOTONIC) - w0);
      cpu.push_back(seconds(CLOCK_THREAD_CPUTIME_ID) - c0);
      data.push_back(c0 - d0);
    }
  }
  // The 10th percentile too: on a shared machine the steps a neighbour did not slow down.
  std::vector<double> sorted = cpu;
  std::sort(sorted.begin(), sorted.end());
  std::printf("dtsim_step wall_ms %.3f cpu_ms %.3f cpu_p10_ms %.3f data_cpu_ms %.3f\n",
              median(wall) * 1e3, median(cpu) * 1e3, sorted[sorted.size() / 10] * 1e3,
              median(data) * 1e3);
  return 0;
}
