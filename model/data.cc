#include "model/data.h"

#include <algorithm>
#include <cmath>

#include "model/check.h"
#include "model/kernels.h"
#include "model/rng.h"

namespace dtsim::model {
namespace {

// Gain on the teacher's weights so its outputs vary by O(1) across inputs.
constexpr float kTeacherGain = 0.7f;

void fill_input(uint64_t seed, int64_t step, int index, std::span<float> x) {
  SplitMix64 rng(mix_seed(seed, static_cast<uint64_t>(step), static_cast<uint64_t>(index)));
  for (float& v : x) v = rng.uniform(1.0f);
}

}  // namespace

Teacher::Teacher(int in, int hidden, int out, uint64_t seed) : in_(in), hidden_(hidden), out_(out) {
  SplitMix64 rng(mix_seed(seed, 0x7eac4e7ull));
  auto fill = [&](std::vector<float>& v, size_t n, float bound) {
    v.resize(n);
    for (float& x : v) x = rng.uniform(bound);
  };
  fill(a1_, size_t(hidden) * in, kTeacherGain / std::sqrt(float(in)));
  fill(c1_, hidden, 0.2f);
  fill(a2_, size_t(out) * hidden, kTeacherGain / std::sqrt(float(hidden)));
  fill(c2_, out, 0.0f);
}

void Teacher::apply(std::span<const float> x, std::span<float> hid, std::span<float> y) const {
  DTSIM_CHECK(hid.size() == size_t(hidden_));
  linear_forward(x, a1_, c1_, hid, 1, in_, hidden_);
  for (float& v : hid) v = std::tanh(v);
  linear_forward(hid, a2_, c2_, y, 1, hidden_, out_);
}

RegressionTask::RegressionTask(int input_dim, int output_dim, uint64_t seed, int teacher_hidden)
    : seed_(seed), teacher_(input_dim, teacher_hidden, output_dim, seed) {}

void RegressionTask::batch(int64_t step, int first, int count, std::span<float> x,
                           std::span<float> y) const {
  const size_t D = teacher_.in(), O = teacher_.out();
  DTSIM_CHECK(x.size() >= count * D && y.size() >= count * O);
  std::vector<float> hid(teacher_.hidden());  // (hidden)
  for (int i = 0; i < count; ++i) {
    auto xi = x.subspan(i * D, D);
    fill_input(seed_, step, first + i, xi);
    teacher_.apply(xi, hid, y.subspan(i * O, O));
  }
}

ClassificationTask::ClassificationTask(int input_dim, int num_classes, uint64_t seed,
                                       int teacher_hidden)
    : seed_(seed), teacher_(input_dim, teacher_hidden, num_classes, seed) {}

void ClassificationTask::batch(int64_t step, int first, int count, std::span<float> x,
                               std::span<int32_t> labels) const {
  const size_t D = teacher_.in(), C = teacher_.out();
  DTSIM_CHECK(x.size() >= count * D && labels.size() >= size_t(count));
  std::vector<float> hid(teacher_.hidden());  // (hidden)
  std::vector<float> logits(C);               // (C)
  for (int i = 0; i < count; ++i) {
    auto xi = x.subspan(i * D, D);
    fill_input(seed_, step, first + i, xi);
    teacher_.apply(xi, hid, logits);
    labels[i] =
        static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  }
}

}  // namespace dtsim::model
