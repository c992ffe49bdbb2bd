// Seeded synthetic tasks that a small model can actually learn: inputs are uniform in
// [-1, 1)^D and targets come from a fixed random two-layer "teacher" network,
// y = A2 tanh(A1 x + c1) + c2. Regression uses y itself, classification argmax(y).
//
// Sample i of step s depends only on (seed, s, i), so any rank can generate exactly its slice
// [first, first + count) of the global batch of step s, and the same seed gives the same bits.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace dtsim::model {

// A fixed random two-layer network (in -> hidden -> out), built from a seed.
class Teacher {
 public:
  Teacher(int in, int hidden, int out, uint64_t seed);
  // y (out) = A2 tanh(A1 x (in) + c1) + c2 for one sample; hid (hidden) is the caller's
  // workspace. Thread safety: const, any number of threads.
  void apply(std::span<const float> x, std::span<float> hid, std::span<float> y) const;
  // apply over `count` samples: x (count, in), hid (count, hidden), y (count, out). The
  // same bits as apply sample by sample only where gemm_bits_shape_independent(); the tasks
  // below use it there and loop over apply elsewhere.
  void apply_batch(std::span<const float> x, std::span<float> hid, std::span<float> y,
                   int count) const;
  int in() const { return in_; }
  int hidden() const { return hidden_; }
  int out() const { return out_; }

 private:
  int in_, hidden_, out_;
  std::vector<float> a1_;  // (hidden, in)
  std::vector<float> c1_;  // (hidden)
  std::vector<float> a2_;  // (out, hidden)
  std::vector<float> c2_;  // (out)
};

// Regression: x (D) -> teacher(x) (O).
class RegressionTask {
 public:
  RegressionTask(int input_dim, int output_dim, uint64_t seed, int teacher_hidden = 32);
  // Fills x (count, D) and y (count, O) with samples [first, first + count) of step `step`.
  void batch(int64_t step, int first, int count, std::span<float> x, std::span<float> y) const;

 private:
  uint64_t seed_;
  Teacher teacher_;
};

// Classification: x (D) -> argmax teacher(x) over C classes.
class ClassificationTask {
 public:
  ClassificationTask(int input_dim, int num_classes, uint64_t seed, int teacher_hidden = 32);
  // Fills x (count, D) and labels (count) with samples [first, first + count) of step `step`.
  void batch(int64_t step, int first, int count, std::span<float> x,
             std::span<int32_t> labels) const;

 private:
  uint64_t seed_;
  Teacher teacher_;
};

}  // namespace dtsim::model
