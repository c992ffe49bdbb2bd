// The synthetic tasks' targets are the teacher applied sample by sample, bitwise, however a
// batch is computed (model/data.h batches the teacher where the GEMM allows).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <ostream>
#include <string>
#include <vector>

#include "model/data.h"
#include "model/gemm.h"

namespace dtsim::model {
namespace {

struct TeacherCase {
  int in, hidden, out, count;
};

void PrintTo(const TeacherCase& c, std::ostream* os) {
  *os << "in " << c.in << " hidden " << c.hidden << " out " << c.out << " count " << c.count;
}

std::string case_name(const ::testing::TestParamInfo<TeacherCase>& info) {
  const TeacherCase& c = info.param;
  return "in" + std::to_string(c.in) + "_hidden" + std::to_string(c.hidden) + "_out" +
         std::to_string(c.out) + "_count" + std::to_string(c.count);
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// The teacher applied to each row of x (count, in), one sample at a time.
std::vector<float> sample_by_sample(const Teacher& t, const std::vector<float>& x, int count) {
  std::vector<float> y(size_t(count) * t.out()), hid(t.hidden());
  for (int i = 0; i < count; ++i) {
    t.apply(std::span(x).subspan(size_t(i) * t.in(), t.in()), hid,
            std::span(y).subspan(size_t(i) * t.out(), t.out()));
  }
  return y;
}

class TeacherBatchTest : public ::testing::TestWithParam<TeacherCase> {};

constexpr uint64_t kSeed = 9;

TEST_P(TeacherBatchTest, RegressionTargetsAreTheTeacherSampleBySample) {
  const TeacherCase c = GetParam();
  const RegressionTask task(c.in, c.out, kSeed, c.hidden);
  const Teacher teacher(c.in, c.hidden, c.out, kSeed);  // the task's own teacher
  std::vector<float> x(size_t(c.count) * c.in), y(size_t(c.count) * c.out);
  task.batch(/*step=*/3, /*first=*/5, c.count, x, y);
  EXPECT_TRUE(same_bits(y, sample_by_sample(teacher, x, c.count)));
}

TEST_P(TeacherBatchTest, ClassificationLabelsAreTheArgmaxSampleBySample) {
  const TeacherCase c = GetParam();
  const ClassificationTask task(c.in, c.out, kSeed, c.hidden);
  const Teacher teacher(c.in, c.hidden, c.out, kSeed);
  std::vector<float> x(size_t(c.count) * c.in);
  std::vector<int32_t> labels(c.count);
  task.batch(/*step=*/4, /*first=*/0, c.count, x, labels);
  const std::vector<float> logits = sample_by_sample(teacher, x, c.count);
  for (int i = 0; i < c.count; ++i) {
    const float* row = logits.data() + size_t(i) * c.out;
    EXPECT_EQ(labels[i], std::max_element(row, row + c.out) - row) << "sample " << i;
  }
}

TEST_P(TeacherBatchTest, ApplyBatchIsApplySampleBySample) {
  if (!gemm_bits_shape_independent()) GTEST_SKIP() << "this build's GEMM depends on the shape";
  const TeacherCase c = GetParam();
  const Teacher teacher(c.in, c.hidden, c.out, kSeed);
  std::vector<float> x(size_t(c.count) * c.in);
  for (size_t i = 0; i < x.size(); ++i) x[i] = float(int(i % 23) - 11) / 7.0f;
  std::vector<float> hid(size_t(c.count) * c.hidden), y(size_t(c.count) * c.out);
  teacher.apply_batch(x, hid, y, c.count);
  EXPECT_TRUE(same_bits(y, sample_by_sample(teacher, x, c.count)));
}

INSTANTIATE_TEST_SUITE_P(Shapes, TeacherBatchTest,
                         ::testing::Values(TeacherCase{256, 32, 4, 64}, TeacherCase{10, 32, 5, 16},
                                           TeacherCase{7, 13, 3, 5}, TeacherCase{33, 17, 1, 1},
                                           TeacherCase{64, 32, 8, 97}),
                         case_name);

}  // namespace
}  // namespace dtsim::model
