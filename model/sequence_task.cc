#include "model/sequence_task.h"

#include <vector>

#include "model/check.h"
#include "model/rng.h"

namespace dtsim::model {
namespace {
constexpr uint64_t kHeldOutSalt = 0x6865'6c64'6f75'7421ull;  // "heldout!"
}

ReverseTask::ReverseTask(int length, int symbols, uint64_t seed)
    : length_(length), symbols_(symbols), seed_(seed) {
  DTSIM_CHECK(length >= 1 && symbols >= 2);
}

void ReverseTask::batch(int64_t step, int first, int count, std::span<float> tokens,
                        std::span<int32_t> labels) const {
  fill(seed_, step, first, count, tokens, labels);
}

void ReverseTask::heldout(int first, int count, std::span<float> tokens,
                          std::span<int32_t> labels) const {
  fill(seed_ ^ kHeldOutSalt, 0, first, count, tokens, labels);
}

void ReverseTask::fill(uint64_t seed, int64_t step, int first, int count, std::span<float> tokens,
                       std::span<int32_t> labels) const {
  const int n = length_, s = 2 * n;
  DTSIM_CHECK(tokens.size() >= size_t(count) * s && labels.size() >= size_t(count) * s);
  std::vector<int32_t> z(s + 1);
  for (int i = 0; i < count; ++i) {
    SplitMix64 rng(mix_seed(seed, uint64_t(step), uint64_t(first + i)));
    for (int t = 0; t < n; ++t) z[t] = 1 + int32_t(rng.next() % uint64_t(symbols_));
    z[n] = 0;
    for (int t = 0; t < n; ++t) z[n + 1 + t] = z[n - 1 - t];
    for (int t = 0; t < s; ++t) {
      tokens[size_t(i) * s + t] = float(z[t]);
      labels[size_t(i) * s + t] = z[t + 1];
    }
  }
}

float token_accuracy(std::span<const float> logits, std::span<const int32_t> labels, int batch,
                     int seq, int vocab, int begin, int end) {
  DTSIM_CHECK(0 <= begin && begin < end && end <= seq);
  int right = 0;
  for (int b = 0; b < batch; ++b) {
    for (int t = begin; t < end; ++t) {
      const float* row = logits.data() + (size_t(b) * seq + t) * vocab;
      int best = 0;
      for (int v = 1; v < vocab; ++v) {
        if (row[v] > row[best]) best = v;
      }
      right += best == labels[size_t(b) * seq + t];
    }
  }
  return float(right) / float(batch * (end - begin));
}

}  // namespace dtsim::model
