// Ring attention (context parallelism; Liu et al. 2023, Megatron-LM's CP, torch's
// context_parallel): the sequence of S tokens is cut into 2N chunks of c = S / (2N) and cp
// rank r holds chunks r and 2N-1-r (the head-tail order that balances causal work). Its
// local rows are [chunk r, chunk 2N-1-r], each token at its global position.
//
// Forward: N steps; at step t rank r holds the K/V of rank (r - t) mod N, runs the tiled
// kernel (attention.h) on each (its query chunk, the held kv chunk) pair that the causal mask
// does not wholly hide, and merges the partial results by log-sum-exp (attention_merge).
// Between steps every rank sends its held K/V to rank r + 1 and receives rank r - 1's at
// once (ContextRing::shift): N - 1 shifts, each 2 chunks. Backward: the same N steps with
// K/V shifted again (N - 1 shifts) and the dK/dV partial of each K/V block travelling with
// it: it starts at zero on rank o + 1, gathers each rank's share, and the last shift brings
// it home to its owner o (N - 1 shifts, 2 chunks each). So per attention a rank sends
// 2 (N - 1) chunks of K/V forward, and 2 (N - 1) of K/V plus 2 (N - 1) of dK/dV backward.
// Balance: every step after the first each rank computes exactly 2 full c x c blocks; step 0
// computes 1 full block and the 2 diagonal (causal) ones.
//
// Layout (as AttentionBlock's): qkv (B Sl, 3E) with Sl = S / N local rows per sample, E =
// H hs, row [q heads, k heads, v heads]; the output (B Sl, E); lse (B, H, Sl).
//
// Scratch (held from the first call on, recorded as activations in the ledger given by
// set_ledger; model/gpt_memory.h counts it): the held and the incoming K/V, (B Sl, 2E) each;
// backward's travelling dK/dV partial and its incoming copy (N > 1), the same size; one
// block's output (c, hs) and LSE (c); delta (B, H, Sl).
//
// Thread safety: none; one RingAttention per layer on one rank thread. Its scratch grows
// once to the largest batch and is reused (no allocation per shift).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "model/attention.h"
#include "model/memory.h"

namespace dtsim::model {

// A rank's place on the context-parallel ring.
struct ContextRing {
  int rank = 0;
  int size = 1;  // N; 1: no ring (plain attention)
  // Collective over the ring: sends `out` to rank (rank + 1) mod N and receives rank
  // (rank - 1) mod N's into `in` (the same size), the sends simultaneous. Required at N > 1.
  std::function<void(std::span<const float> out, std::span<float> in)> shift;
  bool active() const { return size > 1; }
};

// Global position of local row `row` (0 <= row < S / N) of cp rank `rank` of `size`.
int64_t cp_position(int rank, int size, int seq, int row);
// The global chunk index (0 .. 2N-1) of local half `half` (0 or 1) of cp rank `rank`.
inline int cp_chunk(int rank, int size, int half) { return half == 0 ? rank : 2 * size - 1 - rank; }

// Which causal blocks ring step `step` computes on rank `rank` of `size`: for each (query
// half, kv half) pair of the held block (owner (rank - step) mod N), whether any key is
// visible (the kernel's work) and whether all are (a full block, not a diagonal).
struct RingBlock {
  int q_chunk, kv_chunk;
  bool diagonal;  // q_chunk == kv_chunk: the causal triangle
};
std::vector<RingBlock> ring_step_blocks(int rank, int size, int step);

class RingAttention {
 public:
  // seq: the full S (2N divides it); heads: this rank's heads H.
  RingAttention(ContextRing ring, int seq, int heads, int head_dim);

  // att (B Sl, E) and lse (B, H, Sl) of the causal attention of this rank's queries over the
  // whole sequence's keys. Collective over the ring.
  void forward(const float* qkv, int batch, float* att, float* lse);
  // dqkv (B Sl, 3E) += the gradient of the attention given its output att, lse (forward's)
  // and d_att (B Sl, E). Collective over the ring.
  void backward(const float* qkv, const float* att, const float* d_att, const float* lse, int batch,
                float* dqkv);
  // Records the scratch in `ledger` (null: nowhere) from now on; scratch recorded in another
  // ledger is freed first.
  void set_ledger(MemoryLedger* ledger);

 private:
  // One (query chunk, K/V chunk) pair of one batch row and head: its blocks, the rows of
  // its queries (qr, in att and qkv) and keys (kr, in kv), its lse/delta offset (lr) and its
  // head's first column (col).
  struct Pair {
    QueryBlock q;
    KvBlock kv;
    size_t qr, kr, lr;
    int col;
  };
  // Calls f(Pair) for every pair of this rank's query halves, samples and heads with the
  // K/V block kv (ld 2E) of rank `owner` (defined in ring_attention.cc, used only there).
  template <class F>
  void each_pair(const float* qkv, const float* kv, int owner, int batch, F f) const;
  // The kernel on held block `kv` (ld 2E, owner `owner`) for every query half, sample, head:
  // forward merges into att/lse; backward adds into dq (ld 3E) and dkv (ld ldkv).
  void forward_pairs(const float* qkv, const float* kv, int owner, int batch, float* att,
                     float* lse);
  void backward_pairs(const float* qkv, const float* kv, int owner, int batch, const float* d_att,
                      const float* lse, float* dqkv, float* dk, float* dv, int ldkv);

  // v holds at least n floats (contents unspecified once it grows), recorded in ledger_.
  void grow(TrackedBuffer<float>& v, size_t n);

  ContextRing ring_;
  int seq_, heads_, head_dim_, chunk_, local_;
  AttentionShape shape_;
  MemoryLedger* ledger_ = nullptr;
  TrackedBuffer<float> kv_, kv_in_, dkv_, dkv_in_, o_tmp_, lse_tmp_, delta_;
};

}  // namespace dtsim::model
