// One core, no ranks: the GPT training step of `dtsim train --strategy single --model gpt
// --optimizer adam` (zero_grad, forward, backward, Adam; a fresh reversal batch every step,
// made outside the timed step) timed per step in wall-clock and in this thread's CPU time,
// for bench/gpt_vs_torch.sh beside bench/torch_gpt.py.
//
//   gpt_step [--dim D] [--seq S] [--heads H] [--layers L] [--hidden F] [--vocab V]
//            [--batch B] [--steps N] [--warmup W]
//
// Defaults are the README's tiny GPT (D 32, S 10, H 2, L 2, F 64, V 9, B 32); the head size
// is D / H, as dtsim train's default. Prints `dtsim_gpt params P wall_ms W cpu_ms C
// cpu_p10_ms Q loss_first A loss_last Z` (medians over the steps after the first W).
#include <oneapi/tbb/global_control.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <string>
#include <vector>

#include "bench/step_clock.h"
#include "model/gpt_model.h"
#include "model/optimizer.h"
#include "model/sequence_task.h"

using dtsim::bench::median;
using dtsim::bench::seconds;

int main(int argc, char** argv) {
  using namespace dtsim::model;
  GptConfig c;
  c.seq_len = 10;
  int batch = 32, steps = 30, warmup = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const int v = std::atoi(argv[i + 1]);
    int* p = flag == "--dim"      ? &c.d_model
             : flag == "--seq"    ? &c.seq_len
             : flag == "--heads"  ? &c.heads
             : flag == "--layers" ? &c.num_layers
             : flag == "--hidden" ? &c.mlp_hidden
             : flag == "--vocab"  ? &c.vocab
             : flag == "--batch"  ? &batch
             : flag == "--steps"  ? &steps
             : flag == "--warmup" ? &warmup
                                  : nullptr;
    if (!p) {
      std::fprintf(stderr,
                   "gpt_step: unknown option '%s' (--dim/--seq/--heads/--layers/--hidden/"
                   "--vocab/--batch/--steps/--warmup)\n",
                   argv[i]);
      return 2;
    }
    *p = v;
  }
  if (c.d_model < 1 || c.heads < 1 || c.d_model % c.heads || c.num_layers < 1 || c.mlp_hidden < 1 ||
      c.vocab < 3 || c.seq_len < 2 || c.seq_len % 2 || batch < 1 || warmup < 0 || steps <= warmup) {
    std::fprintf(stderr,
                 "gpt_step: need --heads dividing --dim, --seq even >= 2, --vocab >= 3, sizes "
                 ">= 1, --steps > --warmup >= 0\n");
    return 2;
  }
  c.head_dim = c.d_model / c.heads;
  // One thread: oneTBB's workers would run kernels outside this thread's CPU clock.
  tbb::global_control one_thread(tbb::global_control::max_allowed_parallelism, 1);
  GptModel model(c, 1);
  AdamConfig ac;
  ac.lr = 0.003f;
  Adam adam(ac, model.params().size());
  const ReverseTask task(c.seq_len / 2, c.vocab - 1, 7);
  std::vector<float> tokens(size_t(batch) * c.seq_len);
  std::vector<int32_t> labels(tokens.size());
  std::vector<double> wall, cpu;
  float first = 0, last = 0;
  for (int s = 0; s < steps; ++s) {
    task.batch(s, 0, batch, tokens, labels);
    const double w0 = seconds(CLOCK_MONOTONIC), c0 = seconds(CLOCK_THREAD_CPUTIME_ID);
    model.zero_grad();
    last = model.forward_backward(tokens, labels, batch, 1.0f / float(batch));
    adam.step(model.params(), model.grads());
    if (s >= warmup) {
      wall.push_back(seconds(CLOCK_MONOTONIC) - w0);
      cpu.push_back(seconds(CLOCK_THREAD_CPUTIME_ID) - c0);
    }
    if (s == 0) first = last;
  }
  std::vector<double> sorted = cpu;
  std::sort(sorted.begin(), sorted.end());
  std::printf(
      "dtsim_gpt params %zu wall_ms %.3f cpu_ms %.3f cpu_p10_ms %.3f loss_first %.4f loss_last "
      "%.4f\n",
      model.params().size(), median(wall) * 1e3, median(cpu) * 1e3,
      sorted[sorted.size() / 10] * 1e3, first, last);
  return 0;
}
