// The layers a GPT is built from, as plain Layers over samples of S tokens (a sample's
// features are S * D floats, token after token; the embedding's input is S floats holding
// integer token ids). Each works on the B * S token rows of a micro-batch; every norm is a
// pre-norm with gain 1 + g (gpt_kernels.h).
//
//   TokenEmbedding  y = wte[id] + wpe[t]                       wte (V, D), wpe (S, D)
//   AttentionBlock  y = x + Wo attn(Wqkv LN(x) + bqkv) + bo     causal, H heads of size hs
//   GptMlpBlock     y = x + W2 gelu(W1 LN(x) + b1) + b2          W1 (F, D), W2 (D, F)
//   LayerNormLayer  y = LN(x)                                    the final norm
//   PerToken        any per-row layer (the LM head: Linear D -> V) applied to each token
//
// Parallel (Megatron-LM): each layer takes a SequenceSharding (sequence_sharding.h), the plain
// layer at size 1. Tensor parallelism (sharding.reduce set) gives a block 1/T of its heads
// (the QKV rows of each of q, k and v: column-parallel; the output projection's columns:
// row-parallel) or of its MLP hidden units, with one all-reduce after each block's core in
// forward and one of the norm's input gradient in backward (gpt_regions.h); the embedding,
// the norms, the biases after a reduce and the head are replicated. Sequence parallelism
// (sharding.all_gather and .reduce_scatter set too) keeps 1/T of each sample's tokens
// between the blocks' cores: the embedding makes this rank's tokens (its gradients summed
// over the ranks), each block gathers its normalised input and reduce-scatters its output,
// and the final norm gathers the whole sequence for the replicated head. Every sharded
// tensor is a TensorShard of the full model's, by name, so the full layout is the plain one.
//
// Thread safety: none, as every Layer (layer.h).
#pragma once

#include <memory>
#include <string>

#include "model/layer.h"
#include "model/sequence_sharding.h"

namespace dtsim::model {

// "<name>.wte" (V, D), "<name>.wpe" (S, D). The input gradient is not defined (ids):
// backward leaves dx as zeros if asked for one. Sequence parallel: the output is this
// rank's S/T tokens, and backward sums the parameters' gradients over the ranks (workspace
// slot 0, (V + S) D).
class TokenEmbedding : public Layer {
 public:
  TokenEmbedding(std::string name, int vocab, int seq, int dim, SequenceSharding sharding = {});
  void add_params(ParamLayout& layout) const override;
  int in_dim() const override { return seq_; }
  int out_dim() const override { return seq_local_ * dim_; }
  std::unique_ptr<LayerState> make_state(MemoryLedger* ledger) const override;
  void forward(std::span<const float> params, std::span<const float> x, int batch,
               std::span<float> y, LayerState& state, Workspace& ws) override;
  void backward(std::span<const float> params, std::span<const float> x, std::span<const float> dy,
                const BackwardScale& scale, std::span<float> grads, std::span<float> dx,
                LayerState& state, Workspace& ws) override;

 private:
  std::string name_;
  int vocab_, seq_, dim_, seq_local_;
  SequenceSharding sharding_;
};

// Pre-norm causal multi-head self-attention with its residual: "<name>.ln.g" (D),
// ".ln.b" (D), ".qkv.w" (3E, D), ".qkv.b" (3E), ".proj.w" (D, E), ".proj.b" (D), E = H hs;
// a qkv row is [q heads, k heads, v heads], head h at columns h hs. Saves LN(x) (BS, D), its
// mean and rstd (BS), qkv (BS, 3E), the attention output (BS, E) and each row's log-sum-exp
// (B H S) — no S x S matrix (attention.h). Backward uses workspace slots 0-3 (and 4-7,
// gpt_regions.h). Tensor parallel: heads [r H/T, (r + 1) H/T) of rank r, its qkv.w and
// qkv.b as three TensorShards each (its q, k and v rows, so that the local (3E/T, D) is
// laid out as the plain one), proj.w its E/T columns; E, H above become E/T, H/T.
// Selective recomputation (Korthikanti et al.'s: the core attention): a selective state
// keeps no attention output; forward puts it in workspace slot 0 and rebuild_state re-runs
// the attention kernel on the saved qkv, bitwise what forward saves otherwise.
class AttentionBlock : public Layer {
 public:
  // `heads` is the whole block's H; T = sharding.size must divide it.
  AttentionBlock(std::string name, int seq, int dim, int heads, int head_dim,
                 SequenceSharding sharding = {});
  void add_params(ParamLayout& layout) const override;
  int in_dim() const override { return seq_local_ * dim_; }
  int out_dim() const override { return seq_local_ * dim_; }
  std::unique_ptr<LayerState> make_state(MemoryLedger* ledger) const override;
  void forward(std::span<const float> params, std::span<const float> x, int batch,
               std::span<float> y, LayerState& state, Workspace& ws) override;
  void backward(std::span<const float> params, std::span<const float> x, std::span<const float> dy,
                const BackwardScale& scale, std::span<float> grads, std::span<float> dx,
                LayerState& state, Workspace& ws) override;
  bool recomputes_selectively() const override { return true; }
  void rebuild_state(std::span<const float> params, std::span<const float> x, int batch,
                     LayerState& state) override;
  void release_rebuilt(LayerState& state) override;

 private:
  // The attention kernel on the saved qkv: att (B S, E) and the state's LSE.
  void run_attention(LayerState& state, int batch, std::span<float> att) const;

  std::string name_;
  int seq_, dim_, heads_, head_dim_;  // heads_: this rank's H / T
  int full_heads_, seq_local_;
  SequenceSharding sharding_;
};

// Pre-norm GELU MLP with its residual: "<name>.ln.g" (D), ".ln.b" (D), then the MLP's
// ".w1" (F, D), ".b1" (F), ".w2" (D, F), ".b2" (D) (add_sharded_ffn_params). Saves LN(x)
// (BS, D), its mean and rstd, and gelu(pre), gelu'(pre) (BS, F each). Backward uses
// workspace slots 0 and 1 (and 4-7, gpt_regions.h). Tensor parallel: F/T hidden units, as
// MlpBlock splits them. Selective recomputation: a selective state keeps the pre-activation
// (BS, F) only (forward puts gelu(pre) in workspace slot 0); rebuild_state recomputes
// gelu(pre) and gelu'(pre) from it, as MlpBlock does.
class GptMlpBlock : public Layer {
 public:
  // `hidden` is the whole block's F; T = sharding.size must divide it.
  GptMlpBlock(std::string name, int seq, int dim, int hidden, SequenceSharding sharding = {});
  void add_params(ParamLayout& layout) const override;
  int in_dim() const override { return seq_local_ * dim_; }
  int out_dim() const override { return seq_local_ * dim_; }
  std::unique_ptr<LayerState> make_state(MemoryLedger* ledger) const override;
  void forward(std::span<const float> params, std::span<const float> x, int batch,
               std::span<float> y, LayerState& state, Workspace& ws) override;
  void backward(std::span<const float> params, std::span<const float> x, std::span<const float> dy,
                const BackwardScale& scale, std::span<float> grads, std::span<float> dx,
                LayerState& state, Workspace& ws) override;
  bool recomputes_selectively() const override { return true; }
  void rebuild_state(std::span<const float> params, std::span<const float> x, int batch,
                     LayerState& state) override;
  void release_rebuilt(LayerState& state) override;

 private:
  std::string name_;
  int seq_, dim_, hidden_;  // hidden_: this rank's F / T
  int full_hidden_, seq_local_;
  SequenceSharding sharding_;
};

// LayerNorm of each token: "<name>.g" (D), "<name>.b" (D). Saves mean and rstd (BS).
// Sequence parallel: the input is this rank's S/T tokens, all-gathered (and saved, BS D)
// before the norm; backward keeps this rank's rows of the input gradient (workspace slot
// 4, BS D), no collective (what follows is replicated).
class LayerNormLayer : public Layer {
 public:
  LayerNormLayer(std::string name, int seq, int dim, SequenceSharding sharding = {});
  void add_params(ParamLayout& layout) const override;
  int in_dim() const override { return seq_local_ * dim_; }
  int out_dim() const override { return seq_ * dim_; }
  std::unique_ptr<LayerState> make_state(MemoryLedger* ledger) const override;
  void forward(std::span<const float> params, std::span<const float> x, int batch,
               std::span<float> y, LayerState& state, Workspace& ws) override;
  void backward(std::span<const float> params, std::span<const float> x, std::span<const float> dy,
                const BackwardScale& scale, std::span<float> grads, std::span<float> dx,
                LayerState& state, Workspace& ws) override;

 private:
  std::string name_;
  int seq_, dim_, seq_local_;
  SequenceSharding sharding_;
};

// A layer over rows (in -> out) applied to each of a sample's S tokens: in_dim S * in,
// out_dim S * out; it is the inner layer run on B * S rows (same tensors, names, state).
class PerToken : public Layer {
 public:
  PerToken(std::unique_ptr<Layer> inner, int seq) : inner_(std::move(inner)), seq_(seq) {}
  void add_params(ParamLayout& layout) const override { inner_->add_params(layout); }
  int in_dim() const override { return seq_ * inner_->in_dim(); }
  int out_dim() const override { return seq_ * inner_->out_dim(); }
  bool writes_grads() const override { return inner_->writes_grads(); }
  std::unique_ptr<LayerState> make_state(MemoryLedger* ledger) const override {
    return inner_->make_state(ledger);
  }
  void forward(std::span<const float> params, std::span<const float> x, int batch,
               std::span<float> y, LayerState& state, Workspace& ws) override {
    inner_->forward(params, x, batch * seq_, y, state, ws);
  }
  void backward(std::span<const float> params, std::span<const float> x, std::span<const float> dy,
                const BackwardScale& scale, std::span<float> grads, std::span<float> dx,
                LayerState& state, Workspace& ws) override {
    BackwardScale rows = scale;
    rows.batch = scale.batch * seq_;
    inner_->backward(params, x, dy, rows, grads, dx, state, ws);
  }

 private:
  std::unique_ptr<Layer> inner_;
  int seq_;
};

}  // namespace dtsim::model
