// Where the one-core N = 1 step's time goes: bench/mlp_step.cc's step with SGD inside
// backward (what `dtsim train --strategy single` runs), one residual block and the head,
// made of the kernel calls MlpModel::forward_backward_sgd makes, in its order, each timed.
//
//   step_phases [--dim D] [--hidden H] [--batch B] [--steps S]
//
// Prints, per phase, the median over the steps (after the first) of its time in this
// thread's CPU clock, its share of their sum, and for a GEMM phase its GFLOP/s; then the
// median step with its phases timed and MlpModel's own, timed whole. The calls
// are copied from model/mlp_layers.cc, model/layer_stack.cc and model/mlp.cc, so they could
// fall behind the model: afterwards the same model trains through MlpModel on the same
// batches, and unless both end with the same parameters, bit for bit, the program prints
// nothing but that and exits 1.
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
#include "model/kernels.h"
#include "model/mlp.h"
#include "model/mlp_layers.h"

namespace {

using dtsim::bench::median;

double now() { return dtsim::bench::seconds(CLOCK_THREAD_CPUTIME_ID); }

struct Phase {
  const char* name;
  double gflop;  // 0: not a GEMM
  std::vector<double> seconds;
};

}  // namespace

int main(int argc, char** argv) {
  using namespace dtsim::model;
  int D = 256, H = 1024, B = 64, steps = 300;
  const int O = 4;
  for (int i = 1; i < argc; i += 2) {
    const std::string flag = argv[i];
    const int v = i + 1 < argc ? std::atoi(argv[i + 1]) : 0;
    int* dst = flag == "--dim"      ? &D
               : flag == "--hidden" ? &H
               : flag == "--batch"  ? &B
               : flag == "--steps"  ? &steps
                                    : nullptr;
    if (dst == nullptr || v < 1) {
      std::fprintf(stderr,
                   "step_phases: '%s %s': the flags are --dim, --hidden, --batch, --steps, each "
                   "with a positive number\n",
                   argv[i], i + 1 < argc ? argv[i + 1] : "");
      return 2;
    }
    *dst = v;
  }
  if (steps < 2) {
    std::fprintf(stderr, "step_phases: --steps must be at least 2 (the first is not timed)\n");
    return 2;
  }
  // One thread: oneTBB's workers would run kernels outside this thread's CPU clock.
  tbb::global_control one_thread(tbb::global_control::max_allowed_parallelism, 1);
  MlpConfig c;
  c.input_dim = D;
  c.hidden_dim = H;
  c.num_blocks = 1;
  c.output_dim = O;
  MlpModel reference(c, 1);
  std::vector<float> p(reference.params().begin(), reference.params().end());
  const MlpBlockOffsets o(D, H);
  const size_t head = reference.layer_range(1).begin;
  std::span<float> w1(p.data() + o.w1, size_t(H) * D), b1(p.data() + o.b1, H),
      w2(p.data() + o.w2, size_t(D) * H), b2(p.data() + o.b2, D),
      wo(p.data() + head, size_t(O) * D), bo(p.data() + head + size_t(O) * D, O);
  const SgdUpdate u{0.05f, 0.0f};
  const float grad_scale = 1.0f / float(B);
  RegressionTask task(D, O, 1);
  std::vector<float> x(size_t(B) * D), t(size_t(B) * O), pre(size_t(B) * H), hid(size_t(B) * H),
      x1(size_t(B) * D), y(size_t(B) * O), dy(size_t(B) * O), dx1(size_t(B) * D),
      dpre(size_t(B) * H);
  const double gemm = 2e-9 * B * D * H;
  std::vector<Phase> phases = {{"x W1^T + b1", gemm, {}},
                               {"GELU forward", 0, {}},
                               {"h W2^T + b2, residual", gemm, {}},
                               {"head, loss, head backward", 0, {}},
                               {"dpre = (dx1 W2) gelu'", gemm, {}},
                               {"W2, b2 SGD (dW2 = dx1^T h)", gemm, {}},
                               {"W1, b1 SGD (dW1 = dpre^T x)", gemm, {}}};
  for (int s = 0; s < steps; ++s) {
    task.batch(s, 0, B, x, t);
    double t0 = now();
    size_t k = 0;
    auto mark = [&] {
      const double t1 = now();
      if (s > 0) phases[k].seconds.push_back(t1 - t0);
      ++k;
      t0 = t1;
    };
    linear_forward(x, w1, b1, pre, B, D, H);
    mark();
    gelu_forward_keep_grad(pre, hid, pre);  // pre := gelu'(pre)
    mark();
    linear_forward(hid, w2, b2, x1, B, H, D);
    for (size_t i = 0; i < x1.size(); ++i) x1[i] += x[i];
    mark();
    linear_forward(x1, wo, bo, y, B, D, O);
    mse_loss_forward(y, t, B, O);
    std::fill(dy.begin(), dy.end(), 0.0f);
    mse_loss_backward(y, t, B, O, grad_scale, dy);
    linear_input_grad(dy, wo, dx1, B, D, O);
    linear_weight_sgd(dy, x1, wo, bo, B, D, O, u);
    mark();
    linear_input_grad_scaled(dx1, w2, pre, dpre, B, H, D);  // GELU's derivative as stored
    mark();
    linear_weight_sgd(dx1, hid, w2, b2, B, H, D, u);
    mark();
    linear_weight_sgd(dpre, x, w1, b1, B, D, H, u);
    mark();
  }
  std::vector<double> whole;
  for (int s = 0; s < steps; ++s) {  // the model itself, on the same batches
    task.batch(s, 0, B, x, t);
    const double t0 = now();
    reference.forward_backward_sgd(x, t, B, grad_scale, u);
    if (s > 0) whole.push_back(now() - t0);
  }

  if (std::memcmp(p.data(), reference.params().data(), p.size() * sizeof(float)) != 0) {
    std::fprintf(stderr,
                 "step_phases: its parameters differ from MlpModel's after %d steps: its copy "
                 "of the step's kernel calls has fallen behind the model; update it\n",
                 steps);
    return 1;
  }
  double total = 0;
  for (const Phase& ph : phases) total += median(ph.seconds);
  std::printf(
      "step_phases: D %d H %d B %d O %d, %d steps (medians of thread CPU time; the "
      "parameters match MlpModel's bit for bit)\n",
      D, H, B, O, steps);
  for (const Phase& ph : phases) {
    const double m = median(ph.seconds);
    std::printf("%-30s %8.1f us %5.1f%%", ph.name, m * 1e6, 100.0 * m / total);
    if (ph.gflop > 0) std::printf("  %6.1f GFLOP/s", ph.gflop / m);
    std::printf("\n");
  }
  std::vector<double> sums(phases[0].seconds.size(), 0.0);
  for (const Phase& ph : phases) {
    for (size_t i = 0; i < sums.size(); ++i) sums[i] += ph.seconds[i];
  }
  std::printf("%-30s %8.1f us\n", "sum of the medians", total * 1e6);
  std::printf("%-30s %8.1f us (with the clock reads between phases)\n", "median step, phases timed",
              median(sums) * 1e6);
  std::printf("%-30s %8.1f us (MlpModel::forward_backward_sgd, one clock read per step)\n",
              "median step, untimed phases", median(whole) * 1e6);
  return 0;
}
