// Ring attention (context parallelism) on N threads against the single-rank attention kernel
// over the whole sequence: outputs, LSE and dQ, dK, dV equal to float tolerance at N = 2, 3,
// 4, the shifts counted, and the head-tail balance of the causal blocks.
#include "model/ring_attention.h"

#include <gtest/gtest.h>

#include <barrier>
#include <cmath>
#include <thread>
#include <vector>

#include "tests/model/grad_check.h"

namespace dtsim::model {
namespace {

struct Ring {
  explicit Ring(int n) : boxes(n), sync(n) {}
  std::vector<std::vector<float>> boxes;
  std::barrier<> sync;
  std::vector<int> shifts = std::vector<int>(8, 0);
};

ContextRing ring_of(Ring& ring, int rank, int n) {
  return {.rank = rank,
          .size = n,
          .shift = [&ring, rank, n](std::span<const float> out, std::span<float> in) {
            ring.boxes[rank].assign(out.begin(), out.end());
            ring.sync.arrive_and_wait();
            const std::vector<float>& from = ring.boxes[(rank + n - 1) % n];
            ASSERT_EQ(from.size(), in.size());
            std::copy(from.begin(), from.end(), in.begin());
            ring.shifts[rank] += 1;
            ring.sync.arrive_and_wait();
          }};
}

struct RingCase {
  int n, seq, heads, hd, batch;
};

class RingCases : public ::testing::TestWithParam<RingCase> {};

TEST_P(RingCases, EqualsSingleRankAttentionForwardAndBackward) {
  const RingCase c = GetParam();
  const int E = c.heads * c.hd, S = c.seq, B = c.batch, Sl = S / c.n;
  const AttentionShape a{c.hd, 1.0f / std::sqrt(float(c.hd)), true};
  const std::vector<float> qkv = testing::random_vector(size_t(B) * S * 3 * E, 11);
  const std::vector<float> d_att = testing::random_vector(size_t(B) * S * E, 12);
  // The single-rank reference: the kernel over the whole sequence.
  std::vector<float> att(size_t(B) * S * E), lse(size_t(B) * c.heads * S), delta(S);
  std::vector<float> dqkv(qkv.size(), 0.0f);
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < c.heads; ++h) {
      const float* x = qkv.data() + size_t(b) * S * 3 * E + h * c.hd;
      float* o = att.data() + size_t(b) * S * E + h * c.hd;
      float* l = lse.data() + (size_t(b) * c.heads + h) * S;
      const float* d_o = d_att.data() + size_t(b) * S * E + h * c.hd;
      float* dx = dqkv.data() + size_t(b) * S * 3 * E + h * c.hd;
      attention_forward(a, {x, 3 * E, S, 0}, {x + E, x + 2 * E, 3 * E, S, 0}, o, E, l);
      attention_backward_delta(c.hd, S, o, E, d_o, E, delta.data());
      attention_backward(a, {x, 3 * E, S, 0}, {x + E, x + 2 * E, 3 * E, S, 0}, d_o, E, l,
                         delta.data(), dx, 3 * E, dx + E, dx + 2 * E, 3 * E);
    }
  }
  Ring ring(c.n);
  std::vector<std::vector<float>> r_att(c.n), r_lse(c.n), r_dqkv(c.n);
  std::vector<std::thread> threads;
  for (int r = 0; r < c.n; ++r) {
    threads.emplace_back([&, r] {
      // This rank's rows: chunks r and 2N-1-r of every sample, at their global positions.
      std::vector<float> x(size_t(B) * Sl * 3 * E), d_o(size_t(B) * Sl * E);
      for (int b = 0; b < B; ++b) {
        for (int i = 0; i < Sl; ++i) {
          const int64_t p = cp_position(r, c.n, S, i);
          std::copy_n(qkv.data() + (size_t(b) * S + p) * 3 * E, 3 * E,
                      x.data() + (size_t(b) * Sl + i) * 3 * E);
          std::copy_n(d_att.data() + (size_t(b) * S + p) * E, E,
                      d_o.data() + (size_t(b) * Sl + i) * E);
        }
      }
      RingAttention ra(ring_of(ring, r, c.n), S, c.heads, c.hd);
      r_att[r].resize(size_t(B) * Sl * E);
      r_lse[r].resize(size_t(B) * c.heads * Sl);
      r_dqkv[r].assign(x.size(), 0.0f);
      ra.forward(x.data(), B, r_att[r].data(), r_lse[r].data());
      ra.backward(x.data(), r_att[r].data(), d_o.data(), r_lse[r].data(), B, r_dqkv[r].data());
    });
  }
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < c.n; ++r) {
    // N - 1 shifts of K/V forward; N - 1 of K/V and N - 1 of dK/dV backward.
    EXPECT_EQ(ring.shifts[r], 3 * (c.n - 1)) << "rank " << r;
    for (int b = 0; b < B; ++b) {
      for (int i = 0; i < Sl; ++i) {
        const int64_t p = cp_position(r, c.n, S, i);
        for (int j = 0; j < E; ++j) {
          ASSERT_NEAR(r_att[r][(size_t(b) * Sl + i) * E + j], att[(size_t(b) * S + p) * E + j],
                      1e-5f)
              << "rank " << r << " row " << i << " col " << j;
        }
        for (int h = 0; h < c.heads; ++h) {
          ASSERT_NEAR(r_lse[r][(size_t(b) * c.heads + h) * Sl + i],
                      lse[(size_t(b) * c.heads + h) * S + p], 1e-5f);
        }
        for (int j = 0; j < 3 * E; ++j) {
          ASSERT_NEAR(r_dqkv[r][(size_t(b) * Sl + i) * 3 * E + j],
                      dqkv[(size_t(b) * S + p) * 3 * E + j], 2e-5f)
              << "rank " << r << " sample " << b << " position " << p << " column " << j;
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Ring, RingCases,
                         ::testing::Values(RingCase{2, 8, 2, 4, 2}, RingCase{3, 12, 1, 8, 1},
                                           RingCase{4, 16, 2, 4, 2}, RingCase{2, 72, 1, 16, 1},
                                           RingCase{4, 80, 2, 8, 1}));

// Head-tail balance: each ring step after the first computes 2 full blocks on every rank,
// and over the N steps a rank computes the causal blocks of its 2 query chunks exactly once.
TEST(RingBlocks, HeadTailBalancesTheCausalBlocks) {
  for (int n : {2, 3, 4, 8}) {
    for (int r = 0; r < n; ++r) {
      std::vector<int> seen(4 * n * n, 0);
      for (int t = 0; t < n; ++t) {
        const std::vector<RingBlock> blocks = ring_step_blocks(r, n, t);
        int full = 0, diag = 0;
        for (const RingBlock& b : blocks) {
          (b.diagonal ? diag : full) += 1;
          seen[b.q_chunk * 2 * n + b.kv_chunk] += 1;
        }
        EXPECT_EQ(full, t == 0 ? 1 : 2) << "n " << n << " rank " << r << " step " << t;
        EXPECT_EQ(diag, t == 0 ? 2 : 0);
      }
      for (int qh = 0; qh < 2; ++qh) {
        const int q = cp_chunk(r, n, qh);
        for (int k = 0; k < 2 * n; ++k) EXPECT_EQ(seen[q * 2 * n + k], k <= q ? 1 : 0);
      }
    }
  }
}

}  // namespace
}  // namespace dtsim::model
