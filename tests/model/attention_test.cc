// The tiled online-softmax attention kernel against a naive reference that builds the whole
// S x S matrix in double: forward, the merge of partial results over split key/value blocks
// (as ring attention merges them), the blockwise backward, and finite differences.
#include "model/attention.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "tests/model/grad_check.h"

namespace dtsim::model {
namespace {

using testing::check_gradient;
using testing::random_vector;

struct Case {
  int s, hd;
  bool causal;
};

// o (s, hd) and lse (s) of full attention in double, query i at position i.
void naive_forward(const Case& c, const std::vector<float>& q, const std::vector<float>& k,
                   const std::vector<float>& v, std::vector<double>& o, std::vector<double>& lse) {
  const double scale = 1.0 / std::sqrt(double(c.hd));
  o.assign(size_t(c.s) * c.hd, 0.0);
  lse.assign(c.s, 0.0);
  std::vector<double> w(c.s);  // one row of the S x S matrix
  for (int i = 0; i < c.s; ++i) {
    const int n = c.causal ? i + 1 : c.s;
    double mx = -1e300;
    for (int j = 0; j < n; ++j) {
      double dot = 0;
      for (int d = 0; d < c.hd; ++d) dot += double(q[i * c.hd + d]) * k[j * c.hd + d];
      w[j] = scale * dot;
      mx = std::max(mx, w[j]);
    }
    double sum = 0;
    for (int j = 0; j < n; ++j) sum += std::exp(w[j] - mx);
    lse[i] = mx + std::log(sum);
    for (int j = 0; j < n; ++j) {
      const double p = std::exp(w[j] - lse[i]);
      for (int d = 0; d < c.hd; ++d) o[i * c.hd + d] += p * v[j * c.hd + d];
    }
  }
}

AttentionShape shape_of(const Case& c) {
  return {.head_dim = c.hd, .scale = 1.0f / std::sqrt(float(c.hd)), .causal = c.causal};
}

class AttentionCases : public ::testing::TestWithParam<Case> {};

// Tiled forward == the naive S x S reference to float tolerance, at shapes on and off the
// tiles (32 query rows, 64 key rows), causal and not.
TEST_P(AttentionCases, TiledForwardEqualsNaiveReference) {
  const Case c = GetParam();
  const size_t n = size_t(c.s) * c.hd;
  const auto q = random_vector(n, 1, 2.0f), k = random_vector(n, 2, 2.0f), v = random_vector(n, 3);
  std::vector<float> o(n), lse(c.s);
  attention_forward(shape_of(c), {q.data(), c.hd, c.s, 0}, {k.data(), v.data(), c.hd, c.s, 0},
                    o.data(), c.hd, lse.data());
  std::vector<double> want_o, want_lse;
  naive_forward(c, q, k, v, want_o, want_lse);
  for (size_t i = 0; i < n; ++i) ASSERT_NEAR(o[i], want_o[i], 2e-5) << "o[" << i << "]";
  for (int i = 0; i < c.s; ++i) ASSERT_NEAR(lse[i], want_lse[i], 2e-5) << "lse[" << i << "]";
}

// The sequence cut into chunks: every query chunk against every key/value chunk, with global
// positions, merged by log-sum-exp, equals the unsplit forward (ring attention's result).
TEST_P(AttentionCases, MergeOfSplitKeyValueBlocksEqualsUnsplit) {
  const Case c = GetParam();
  const size_t n = size_t(c.s) * c.hd;
  const auto q = random_vector(n, 4, 2.0f), k = random_vector(n, 5, 2.0f), v = random_vector(n, 6);
  const AttentionShape a = shape_of(c);
  std::vector<float> o(n), lse(c.s);
  attention_forward(a, {q.data(), c.hd, c.s, 0}, {k.data(), v.data(), c.hd, c.s, 0}, o.data(), c.hd,
                    lse.data());
  const int cuts[] = {0, c.s / 3, c.s / 2 + 1, c.s};  // uneven chunks
  std::vector<float> got(n), got_lse(c.s), part(n), part_lse(c.s);
  for (int qi = 0; qi < 3; ++qi) {
    const int q0 = cuts[qi], qn = cuts[qi + 1] - q0;
    const QueryBlock qb{q.data() + q0 * c.hd, c.hd, qn, q0};
    std::fill_n(got_lse.begin() + q0, qn, -std::numeric_limits<float>::infinity());
    std::fill_n(got.begin() + q0 * c.hd, qn * c.hd, 0.0f);
    for (int ki : {2, 0, 1}) {  // any order
      const int k0 = cuts[ki], kn = cuts[ki + 1] - k0;
      const KvBlock kb{k.data() + k0 * c.hd, v.data() + k0 * c.hd, c.hd, kn, k0};
      attention_forward(a, qb, kb, part.data(), c.hd, part_lse.data());
      attention_merge(c.hd, qn, got.data() + q0 * c.hd, c.hd, got_lse.data() + q0, part.data(),
                      c.hd, part_lse.data());
    }
  }
  for (size_t i = 0; i < n; ++i) ASSERT_NEAR(got[i], o[i], 1e-5) << "o[" << i << "]";
  for (int i = 0; i < c.s; ++i) ASSERT_NEAR(got_lse[i], lse[i], 1e-5) << "lse[" << i << "]";
}

// Backward over split blocks (each pair given the final lse and delta) == unsplit backward.
TEST_P(AttentionCases, BlockwiseBackwardSumsToUnsplit) {
  const Case c = GetParam();
  const size_t n = size_t(c.s) * c.hd;
  const auto q = random_vector(n, 7, 2.0f), k = random_vector(n, 8, 2.0f), v = random_vector(n, 9),
             d_o = random_vector(n, 10);
  const AttentionShape a = shape_of(c);
  std::vector<float> o(n), lse(c.s), delta(c.s);
  attention_forward(a, {q.data(), c.hd, c.s, 0}, {k.data(), v.data(), c.hd, c.s, 0}, o.data(), c.hd,
                    lse.data());
  attention_backward_delta(c.hd, c.s, o.data(), c.hd, d_o.data(), c.hd, delta.data());
  std::vector<float> dq(n), dk(n), dv(n);
  attention_backward(a, {q.data(), c.hd, c.s, 0}, {k.data(), v.data(), c.hd, c.s, 0}, d_o.data(),
                     c.hd, lse.data(), delta.data(), dq.data(), c.hd, dk.data(), dv.data(), c.hd);
  std::vector<float> sq(n), sk(n), sv(n);
  const int cuts[] = {0, c.s / 2, c.s};
  for (int qi = 0; qi < 2; ++qi) {
    for (int ki = 0; ki < 2; ++ki) {
      const int q0 = cuts[qi], k0 = cuts[ki];
      attention_backward(a, {q.data() + q0 * c.hd, c.hd, cuts[qi + 1] - q0, q0},
                         {k.data() + k0 * c.hd, v.data() + k0 * c.hd, c.hd, cuts[ki + 1] - k0, k0},
                         d_o.data() + q0 * c.hd, c.hd, lse.data() + q0, delta.data() + q0,
                         sq.data() + q0 * c.hd, c.hd, sk.data() + k0 * c.hd, sv.data() + k0 * c.hd,
                         c.hd);
    }
  }
  for (size_t i = 0; i < n; ++i) {
    ASSERT_NEAR(sq[i], dq[i], 1e-5) << i;
    ASSERT_NEAR(sk[i], dk[i], 1e-5) << i;
    ASSERT_NEAR(sv[i], dv[i], 1e-5) << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, AttentionCases,
                         ::testing::Values(Case{7, 4, true}, Case{33, 8, true}, Case{70, 16, true},
                                           Case{70, 16, false}, Case{200, 64, true}),
                         [](const auto& info) {
                           return "s" + std::to_string(info.param.s) + "_hd" +
                                  std::to_string(info.param.hd) +
                                  (info.param.causal ? "_causal" : "_full");
                         });

// dq, dk, dv against central differences of the probe loss sum(o ⊙ w) (w = d_o).
// Shapes small enough for finite differences, on and off the tiles.
TEST(Attention, BackwardMatchesFiniteDifferences) {
  for (const Case c :
       {Case{7, 4, true}, Case{33, 8, true}, Case{70, 16, true}, Case{70, 16, false}}) {
    SCOPED_TRACE("s " + std::to_string(c.s) + " hd " + std::to_string(c.hd));
    const size_t n = size_t(c.s) * c.hd;
    auto q = random_vector(n, 11), k = random_vector(n, 12), v = random_vector(n, 13);
    const auto w = random_vector(n, 14);
    const AttentionShape a = shape_of(c);
    std::vector<float> o(n), lse(c.s), delta(c.s);
    auto loss = [&] {
      attention_forward(a, {q.data(), c.hd, c.s, 0}, {k.data(), v.data(), c.hd, c.s, 0}, o.data(),
                        c.hd, lse.data());
      return testing::dot(o, w);
    };
    loss();
    attention_backward_delta(c.hd, c.s, o.data(), c.hd, w.data(), c.hd, delta.data());
    std::vector<float> dq(n), dk(n), dv(n);
    attention_backward(a, {q.data(), c.hd, c.s, 0}, {k.data(), v.data(), c.hd, c.s, 0}, w.data(),
                       c.hd, lse.data(), delta.data(), dq.data(), c.hd, dk.data(), dv.data(), c.hd);
    EXPECT_GRAD_OK(check_gradient(q, dq, loss, 1e-2f, 2e-4, 2e-2));
    EXPECT_GRAD_OK(check_gradient(k, dk, loss, 1e-2f, 2e-4, 2e-2));
    EXPECT_GRAD_OK(check_gradient(v, dv, loss, 1e-2f, 2e-4, 2e-2));
  }
}

// A query block wholly before a key/value block sees nothing: output 0, lse -inf, and the
// merge leaves the other partial result unchanged.
TEST(Attention, MaskedBlockIsTheMergeIdentity) {
  const int hd = 8, rows = 5;
  const auto q = random_vector(rows * hd, 1), k = random_vector(rows * hd, 2),
             v = random_vector(rows * hd, 3);
  const AttentionShape a{hd, 0.5f, true};
  std::vector<float> o(rows * hd, 7.0f), lse(rows);
  attention_forward(a, {q.data(), hd, rows, 0}, {k.data(), v.data(), hd, rows, rows}, o.data(), hd,
                    lse.data());
  for (float x : o) EXPECT_EQ(x, 0.0f);
  for (float x : lse) EXPECT_EQ(x, -std::numeric_limits<float>::infinity());
  std::vector<float> self(rows * hd), self_lse(rows);
  attention_forward(a, {q.data(), hd, rows, 0}, {k.data(), v.data(), hd, rows, 0}, self.data(), hd,
                    self_lse.data());
  const std::vector<float> before = self, before_lse = self_lse;
  attention_merge(hd, rows, self.data(), hd, self_lse.data(), o.data(), hd, lse.data());
  EXPECT_EQ(self, before);
  EXPECT_EQ(self_lse, before_lse);
}

}  // namespace
}  // namespace dtsim::model
