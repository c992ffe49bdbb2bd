#include "model/data.h"

#include <algorithm>
#include <cmath>

#include "model/check.h"
#include "model/gemm.h"
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
  apply_batch(x, hid, y, 1);
}

void Teacher::apply_batch(std::span<const float> x, std::span<float> hid, std::span<float> y,
                          int count) const {
  DTSIM_CHECK(x.size() == size_t(count) * in_ && hid.size() == size_t(count) * hidden_ &&
              y.size() == size_t(count) * out_);
  linear_forward(x, a1_, c1_, hid, count, in_, hidden_);
  for (float& v : hid) v = std::tanh(v);
  linear_forward(hid, a2_, c2_, y, count, hidden_, out_);
}

namespace {

// y (count, O) = teacher(x (count, D)): one batched pass where the GEMM's bits do not depend
// on its shape (the same bits as sample by sample, without packing A1 per sample), else
// sample by sample. hid is (count, hidden) or, sample by sample, at least (hidden).
void apply_teacher(const Teacher& t, std::span<const float> x, std::span<float> hid,
                   std::span<float> y, int count) {
  const size_t D = t.in(), H = t.hidden(), O = t.out();
  if (gemm_bits_shape_independent()) {
    t.apply_batch(x.first(count * D), hid.first(count * H), y.first(count * O), count);
    return;
  }
  for (int i = 0; i < count; ++i) {
    t.apply(x.subspan(i * D, D), hid.first(H), y.subspan(i * O, O));
  }
}

}  // namespace

RegressionTask::RegressionTask(int input_dim, int output_dim, uint64_t seed, int teacher_hidden)
    : seed_(seed), teacher_(input_dim, teacher_hidden, output_dim, seed) {}

void RegressionTask::batch(int64_t step, int first, int count, std::span<float> x,
                           std::span<float> y) const {
  const size_t D = teacher_.in(), O = teacher_.out();
  DTSIM_CHECK(x.size() >= count * D && y.size() >= count * O);
  std::vector<float> hid(size_t(count) * teacher_.hidden());  // (count, hidden)
  for (int i = 0; i < count; ++i) fill_input(seed_, step, first + i, x.subspan(i * D, D));
  apply_teacher(teacher_, x, hid, y, count);
}

ClassificationTask::ClassificationTask(int input_dim, int num_classes, uint64_t seed,
                                       int teacher_hidden)
    : seed_(seed), teacher_(input_dim, teacher_hidden, num_classes, seed) {}

void ClassificationTask::batch(int64_t step, int first, int count, std::span<float> x,
                               std::span<int32_t> labels) const {
  const size_t D = teacher_.in(), C = teacher_.out();
  DTSIM_CHECK(x.size() >= count * D && labels.size() >= size_t(count));
  std::vector<float> hid(size_t(count) * teacher_.hidden());  // (count, hidden)
  std::vector<float> logits(size_t(count) * C);               // (count, C)
  for (int i = 0; i < count; ++i) fill_input(seed_, step, first + i, x.subspan(i * D, D));
  apply_teacher(teacher_, x, hid, logits, count);
  for (int i = 0; i < count; ++i) {
    const float* row = logits.data() + i * C;
    labels[i] = static_cast<int32_t>(std::max_element(row, row + C) - row);
  }
}

}  // namespace dtsim::model
