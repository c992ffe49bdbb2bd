// Causal scaled-dot-product attention of one head, tiled with an online softmax (Milakov &
// Gimelshein 2018; FlashAttention 2, Dao 2023): no S x S matrix is ever stored. Forward keeps
// per query row a running max and sum over key tiles and returns the row's log-sum-exp
// (LSE); backward recomputes each tile's probabilities from that LSE.
//
// The unit of work is one (query block, key/value block) pair with the blocks' global
// positions in the sequence, so that ring attention (context parallelism) can run the same
// kernel on chunks held by different ranks:
//
//   attention_forward(q, kv)            -> a partial output O_j and LSE_j over kv's keys only
//   attention_merge(O, LSE, O_j, LSE_j) -> the output over the union of the key sets
//   attention_backward_delta(O, dO)     -> delta_i = dO_i . O_i (once per query block, from the
//                                          FINAL output)
//   attention_backward(q, kv, dO, LSE, delta) -> dq, dk, dv += that pair's share
//
// Causal masking compares global positions: key position p_k is visible to query position
// p_q iff p_k <= p_q. Key tiles wholly after a query tile's last position are skipped.
// A query row that sees no key of a block gets output 0 and LSE -inf (the merge's identity).
//
// Conventions: rows are head_dim floats at `ld`-float strides (so Q, K, V can be one
// head's columns of a fused QKV matrix). Forward and merge OVERWRITE their outputs; backward
// ACCUMULATES (+=) into dq, dk, dv. Thread safety: pure functions without global state; any
// number of threads may call concurrently on disjoint outputs. The tile products run on the
// AVX2 GEMM's register tiles (gemm_avx2_tile.h; else on sgemm) with the same bits as sgemm,
// their operands packed once per call into per-thread buffers (grown once and kept); tiles
// live on the stack (head_dim is at most kMaxHeadDim), so nothing is allocated per call.
#pragma once

#include <cstdint>

namespace dtsim::model {

inline constexpr int kMaxHeadDim = 256;

// `rows` query rows: row r at q + r * ld, global position pos0 + r.
struct QueryBlock {
  const float* q;
  int ld;
  int rows;
  int64_t pos0;
};

// `rows` key and value rows: row r at k + r * ld and v + r * ld, global position pos0 + r.
struct KvBlock {
  const float* k;
  const float* v;
  int ld;
  int rows;
  int64_t pos0;
};

struct AttentionShape {
  int head_dim;  // floats per row of q, k, v, o
  float scale;   // > 0: the logits are scale * q . k (usually 1 / sqrt(head_dim))
  bool causal;
};

// o (q.rows, head_dim; row stride ldo) = softmax(scale q k^T, masked) v over kv's keys only;
// lse (q.rows) = log sum_j exp(scale q_i . k_j) over the visible keys (-inf if none).
void attention_forward(const AttentionShape& a, const QueryBlock& q, const KvBlock& kv, float* o,
                       int ldo, float* lse);

// Merges partial result b into a, both over the same query rows and disjoint key sets:
// lse = log(exp(lse_a) + exp(lse_b)), o_a = o_a exp(lse_a - lse) + o_b exp(lse_b - lse).
void attention_merge(int head_dim, int rows, float* o_a, int ld_a, float* lse_a, const float* o_b,
                     int ld_b, const float* lse_b);

// delta (rows) = rowsum(d_o ⊙ o), o the FINAL output over all keys and d_o its gradient.
void attention_backward_delta(int head_dim, int rows, const float* o, int ldo, const float* d_o,
                              int ld_do, float* delta);

// The gradients one (query block, kv block) pair contributes, given the FINAL lse (q.rows)
// and delta (q.rows) of the query rows: dq (q.rows; ld_dq) += sum_j dS_ij scale k_j,
// dk (kv.rows; ld_dkv) += sum_i dS_ij scale q_i, dv (kv.rows; ld_dkv) += sum_i P_ij dO_i,
// with P_ij = exp(scale q_i . k_j - lse_i) (0 when masked) and dS = P ⊙ (dO v^T - delta).
// Summed over every kv block of the sequence this is the gradient of the full attention.
// Any of dq, dk, dv may be null (not needed).
void attention_backward(const AttentionShape& a, const QueryBlock& q, const KvBlock& kv,
                        const float* d_o, int ld_do, const float* lse, const float* delta,
                        float* dq, int ld_dq, float* dk, float* dv, int ld_dkv);

}  // namespace dtsim::model
