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
#include "model/sequence_task.h"

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

// ReverseTask: each sample is its symbols, the separator, the symbols reversed; labels are
// the next tokens; a rank's slice is the slice of the whole batch; held-out samples differ.
TEST(ReverseTask, SamplesAreReversalsAndSlicesOfTheBatch) {
  const ReverseTask task(4, 6, 3);
  const int S = task.seq_len(), B = 16;
  ASSERT_EQ(S, 8);
  ASSERT_EQ(task.vocab(), 7);
  std::vector<float> x(B * S), part(5 * S), hx(B * S);
  std::vector<int32_t> y(B * S), part_y(5 * S), hy(B * S);
  task.batch(2, 0, B, x, y);
  for (int b = 0; b < B; ++b) {
    const float* t = x.data() + b * S;
    const int32_t* l = y.data() + b * S;
    EXPECT_EQ(t[4], 0.0f);  // the separator
    for (int i = 0; i < 4; ++i) {
      EXPECT_GE(t[i], 1.0f);
      EXPECT_LE(t[i], 6.0f);
      if (i < 3) {
        EXPECT_EQ(t[5 + i], t[3 - i]);  // reversed (the last one is only a label)
      }
    }
    for (int i = 0; i + 1 < S; ++i) EXPECT_EQ(l[i], int32_t(t[i + 1]));
    EXPECT_EQ(l[S - 1], int32_t(t[0]));  // the sequence's final token: the first symbol
  }
  task.batch(2, 7, 5, part, part_y);
  EXPECT_TRUE(std::equal(part.begin(), part.end(), x.begin() + 7 * S));
  EXPECT_TRUE(std::equal(part_y.begin(), part_y.end(), y.begin() + 7 * S));
  task.heldout(0, B, hx, hy);
  EXPECT_NE(hx, x);
}

}  // namespace
}  // namespace dtsim::model
