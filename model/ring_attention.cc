#include "model/ring_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "model/check.h"

namespace dtsim::model {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

}  // namespace

int64_t cp_position(int rank, int size, int seq, int row) {
  const int c = seq / (2 * size);
  const int half = row / c;
  return int64_t(cp_chunk(rank, size, half)) * c + row % c;
}

std::vector<RingBlock> ring_step_blocks(int rank, int size, int step) {
  const int owner = ((rank - step) % size + size) % size;
  std::vector<RingBlock> blocks;
  for (int qh = 0; qh < 2; ++qh) {
    for (int kh = 0; kh < 2; ++kh) {
      const int qc = cp_chunk(rank, size, qh), kc = cp_chunk(owner, size, kh);
      if (kc <= qc) blocks.push_back({qc, kc, kc == qc});
    }
  }
  return blocks;
}

RingAttention::RingAttention(ContextRing ring, int seq, int heads, int head_dim)
    : ring_(std::move(ring)),
      seq_(seq),
      heads_(heads),
      head_dim_(head_dim),
      chunk_(seq / (2 * std::max(1, ring_.size))),
      local_(seq / std::max(1, ring_.size)),
      shape_{head_dim, 1.0f / std::sqrt(float(head_dim)), true} {
  DTSIM_CHECK(ring_.size >= 1 && ring_.rank >= 0 && ring_.rank < ring_.size);
  DTSIM_CHECK(seq % (2 * ring_.size) == 0 && (ring_.size == 1 || ring_.shift));
  DTSIM_CHECK(head_dim > 0 && head_dim <= kMaxHeadDim && heads > 0);
}

void RingAttention::grow(TrackedBuffer<float>& v, size_t n) {
  if (v.size() >= n) return;
  v.release();  // before the larger one, as Workspace::take
  v = TrackedBuffer<float>(ledger_, MemoryCategory::kActivations, n);
}

void RingAttention::set_ledger(MemoryLedger* ledger) {
  if (ledger == ledger_) return;
  for (TrackedBuffer<float>* v : {&kv_, &kv_in_, &dkv_, &dkv_in_, &o_tmp_, &lse_tmp_, &delta_}) {
    v->release();
  }
  ledger_ = ledger;
}

template <class F>
void RingAttention::each_pair(const float* qkv, const float* kv, int owner, int batch, F f) const {
  const int E = heads_ * head_dim_, c = chunk_, N = ring_.size;
  for (const RingBlock& blk : ring_step_blocks(ring_.rank, N, (ring_.rank - owner + N) % N)) {
    const int qh = blk.q_chunk == ring_.rank ? 0 : 1;
    const int kh = blk.kv_chunk == owner ? 0 : 1;
    for (int b = 0; b < batch; ++b) {
      const size_t qr = size_t(b) * local_ + size_t(qh) * c;
      const size_t kr = size_t(b) * local_ + size_t(kh) * c;
      for (int h = 0; h < heads_; ++h) {
        const int col = h * head_dim_;
        const QueryBlock q{qkv + qr * 3 * E + col, 3 * E, c, int64_t(blk.q_chunk) * c};
        const KvBlock k{kv + kr * 2 * E + col, kv + kr * 2 * E + E + col, 2 * E, c,
                        int64_t(blk.kv_chunk) * c};
        f(Pair{q, k, qr, kr, (size_t(b) * heads_ + h) * local_ + size_t(qh) * c, col});
      }
    }
  }
}

void RingAttention::forward_pairs(const float* qkv, const float* kv, int owner, int batch,
                                  float* att, float* lse) {
  const int E = heads_ * head_dim_;
  each_pair(qkv, kv, owner, batch, [&](const Pair& p) {
    attention_forward(shape_, p.q, p.kv, o_tmp_.data(), head_dim_, lse_tmp_.data());
    attention_merge(head_dim_, chunk_, att + p.qr * E + p.col, E, lse + p.lr, o_tmp_.data(),
                    head_dim_, lse_tmp_.data());
  });
}

void RingAttention::backward_pairs(const float* qkv, const float* kv, int owner, int batch,
                                   const float* d_att, const float* lse, float* dqkv, float* dk,
                                   float* dv, int ldkv) {
  const int E = heads_ * head_dim_;
  each_pair(qkv, kv, owner, batch, [&](const Pair& p) {
    attention_backward(shape_, p.q, p.kv, d_att + p.qr * E + p.col, E, lse + p.lr,
                       delta_.data() + p.lr, dqkv + p.qr * 3 * E + p.col, 3 * E,
                       dk + p.kr * ldkv + p.col, dv + p.kr * ldkv + p.col, ldkv);
  });
}

void RingAttention::forward(const float* qkv, int batch, float* att, float* lse) {
  const int E = heads_ * head_dim_, N = ring_.size;
  const size_t rows = size_t(batch) * local_, kvn = rows * 2 * E;
  grow(o_tmp_, size_t(chunk_) * head_dim_);
  grow(lse_tmp_, chunk_);
  grow(kv_, kvn);
  grow(kv_in_, kvn);
  std::fill_n(att, rows * E, 0.0f);  // the merge's identity: output 0, LSE -inf
  std::fill_n(lse, size_t(batch) * heads_ * local_, kNegInf);
  for (size_t r = 0; r < rows; ++r) std::copy_n(qkv + r * 3 * E + E, 2 * E, kv_.data() + r * 2 * E);
  for (int t = 0; t < N; ++t) {
    forward_pairs(qkv, kv_.data(), (ring_.rank - t + N) % N, batch, att, lse);
    if (t + 1 < N) {
      ring_.shift({kv_.data(), kvn}, {kv_in_.data(), kvn});
      std::swap(kv_, kv_in_);
    }
  }
}

void RingAttention::backward(const float* qkv, const float* att, const float* d_att,
                             const float* lse, int batch, float* dqkv) {
  const int E = heads_ * head_dim_, N = ring_.size;
  const size_t rows = size_t(batch) * local_, kvn = rows * 2 * E;
  grow(kv_, kvn);
  grow(kv_in_, kvn);
  grow(delta_, size_t(batch) * heads_ * local_);
  for (int b = 0; b < batch; ++b) {
    for (int h = 0; h < heads_; ++h) {
      const size_t r0 = size_t(b) * local_, col = size_t(h) * head_dim_;
      attention_backward_delta(head_dim_, local_, att + r0 * E + col, E, d_att + r0 * E + col, E,
                               delta_.data() + (size_t(b) * heads_ + h) * local_);
    }
  }
  for (size_t r = 0; r < rows; ++r) std::copy_n(qkv + r * 3 * E + E, 2 * E, kv_.data() + r * 2 * E);
  // Step 0: this rank's own K/V; its dK/dV go straight into dqkv.
  backward_pairs(qkv, kv_.data(), ring_.rank, batch, d_att, lse, dqkv, dqkv + E, dqkv + 2 * E,
                 3 * E);
  if (N == 1) return;
  grow(dkv_, kvn);
  grow(dkv_in_, kvn);
  for (int t = 1; t < N; ++t) {
    ring_.shift({kv_.data(), kvn}, {kv_in_.data(), kvn});
    std::swap(kv_, kv_in_);
    if (t == 1) std::fill_n(dkv_.data(), kvn, 0.0f);  // the partial starts on rank owner + 1
    backward_pairs(qkv, kv_.data(), (ring_.rank - t + N) % N, batch, d_att, lse, dqkv, dkv_.data(),
                   dkv_.data() + E, 2 * E);
    // The partial moves on with its K/V block; the last shift brings it to its owner.
    ring_.shift({dkv_.data(), kvn}, {dkv_in_.data(), kvn});
    std::swap(dkv_, dkv_in_);
  }
  for (size_t r = 0; r < rows; ++r) {
    float* d = dqkv + r * 3 * E + E;
    const float* s = dkv_.data() + r * 2 * E;
    for (int j = 0; j < 2 * E; ++j) d[j] += s[j];
  }
}

}  // namespace dtsim::model
