// The tiny GPT (model/gpt_model.h): token + position embedding, L pre-norm blocks of causal
// self-attention and a GELU MLP, a final norm and an LM head, next-token cross-entropy on
// the reversal task (model/sequence_task.h). The data axis (ddp, ZeRO), tensor-parallel
// heads, sequence parallelism, pipeline stages and context parallelism (ring attention).
#include <algorithm>
#include <cstdio>
#include <string>

#include "model/attention.h"
#include "model/gpt_memory.h"
#include "model/gpt_model.h"
#include "model/sequence_task.h"
#include "train/models/model_spec.h"

namespace dtsim::train {
namespace {

std::string str(int v) { return std::to_string(v); }

// Context parallel (cp > 1): the input stays whole samples (the embedding picks this rank's
// tokens), the labels and the loss are this rank's S / cp tokens, whose mean is its loss:
// averaged over dp x cp by the data-parallel sync, the gradient is the single rank's.
class ReverseObjective : public Objective {
 public:
  ReverseObjective(const TrainConfig& c, model::MemoryLedger* ledger, int cp_rank = 0, int cp = 1)
      : seq_(c.gpt.seq_len),
        cp_rank_(cp_rank),
        cp_(cp),
        loss_(c.gpt.vocab, ledger, c.gpt.seq_len / cp),
        task_(c.gpt.seq_len / 2, c.gpt.vocab - 1, task_seed(c)) {}

  std::span<const float> load_batch(int64_t step, int first, int count) override {
    tokens_.resize(static_cast<size_t>(count) * seq_);
    labels_.resize(static_cast<size_t>(count) * seq_);
    task_.batch(step, first, count, tokens_, labels_);
    if (cp_ > 1) {  // this rank's labels, in its rows' order (both chunks ascend)
      const int local = seq_ / cp_;
      for (int b = 0; b < count; ++b) {
        for (int i = 0; i < local; ++i) {
          labels_[size_t(b) * local + i] =
              labels_[size_t(b) * seq_ + model::cp_position(cp_rank_, cp_, seq_, i)];
        }
      }
      labels_.resize(static_cast<size_t>(count) * local);
    }
    return tokens_;
  }
  model::Targets targets() const override { return {.values = {}, .labels = labels_}; }
  model::Loss& loss() override { return loss_; }

 private:
  int seq_, cp_rank_, cp_;
  model::CrossEntropyLoss loss_;
  model::ReverseTask task_;
  std::vector<float> tokens_;    // (count, S) token ids as floats
  std::vector<int32_t> labels_;  // (count, S) next tokens
};

class GptSpec : public ModelSpec {
 public:
  ModelKind kind() const override { return ModelKind::kGpt; }
  bool has_sequence() const override { return true; }
  const char* name() const override { return "gpt"; }
  std::vector<std::string> own_flags() const override {
    return {"--heads", "--head-dim", "--seq", "--vocab"};
  }

  void configure(const ModelFlags& f, TrainConfig& c) const override {
    const int heads = f.heads;
    c.gpt = {.vocab = f.vocab,
             .seq_len = f.seq,
             .d_model = f.dim,
             .heads = heads,
             .head_dim = f.head_dim.value_or(std::max(1, f.dim / std::max(1, heads))),
             .num_layers = f.layers.value_or(2),
             .mlp_hidden = f.hidden.value_or(4 * f.dim)};
  }
  std::string describe(const TrainConfig& c) const override {
    const model::GptConfig& g = c.gpt;
    return "gpt D " + str(g.d_model) + " H " + str(g.heads) + "x" + str(g.head_dim) + " F " +
           str(g.mlp_hidden) + " L " + str(g.num_layers) + " S " + str(g.seq_len) + " V " +
           str(g.vocab) + (c.sequence_parallel ? ", sequence parallel" : "");
  }
  std::vector<std::pair<std::string, double>> shape_fields(const TrainConfig& c) const override {
    const model::GptConfig& g = c.gpt;
    return {{"dim", g.d_model},       {"heads", g.heads},       {"head_dim", g.head_dim},
            {"hidden", g.mlp_hidden}, {"layers", g.num_layers}, {"seq", g.seq_len},
            {"vocab", g.vocab}};
  }

  std::string validate(const TrainConfig& c) const override {
    const model::GptConfig& g = c.gpt;
    if (g.seq_len < 2 || g.seq_len % 2 != 0) {
      return "--seq " + str(g.seq_len) +
             " must be even and at least 2: the reversal task reads n symbols, a separator "
             "and n - 1 reversed ones (2n tokens)";
    }
    if (g.vocab < 3) {
      return "--vocab " + str(g.vocab) + " must be at least 3 (a separator and 2 symbols)";
    }
    if (g.heads < 1) return "--heads " + str(g.heads) + " must be at least 1";
    if (g.head_dim < 1 || g.head_dim > model::kMaxHeadDim) {
      return "--head-dim " + str(g.head_dim) + " must be in [1, " + str(model::kMaxHeadDim) + "]";
    }
    if (g.mlp_hidden < 1) return "--hidden " + str(g.mlp_hidden) + " must be at least 1";
    if (g.num_layers < 1) return "--layers " + str(g.num_layers) + " must be at least 1";
    if (c.sequence_parallel && c.mesh().tp < 2) {
      return "--sequence-parallel shards the sequence over the tensor-parallel ranks: it needs "
             "--tp 2 or more";
    }
    return "";
  }
  std::string validate_mesh(const TrainConfig& c, const MeshShape& m) const override {
    const model::GptConfig& g = c.gpt;
    if (m.ep > 1) return "--ep " + str(m.ep) + " shards the MoE's experts: it needs --model moe";
    if (g.heads % m.tp != 0) {
      return "--heads " + str(g.heads) + " is not divisible by --tp " + str(m.tp) +
             ": each tensor-parallel rank holds whole heads; change --heads or --tp";
    }
    if (g.mlp_hidden % m.tp != 0) {
      return "--hidden " + str(g.mlp_hidden) + " is not divisible by --tp " + str(m.tp) +
             "; change --hidden or --tp";
    }
    if (c.sequence_parallel && m.tp < 2) {
      return "--sequence-parallel shards the sequence over the tensor-parallel ranks: it needs "
             "--tp 2 or more";
    }
    if (c.sequence_parallel && g.seq_len % m.tp != 0) {
      return "--seq " + str(g.seq_len) + " is not divisible by --tp " + str(m.tp) +
             " under --sequence-parallel; change --seq or --tp";
    }
    if (m.cp > 1 && g.seq_len % (2 * m.cp) != 0) {
      return "--seq " + str(g.seq_len) + " is not divisible by 2 x --cp " + str(m.cp) + " = " +
             str(2 * m.cp) +
             ": each context-parallel rank holds 2 equal chunks; change --seq or "
             "--cp";
    }
    // Sequence parallelism splits each cp rank's S / cp tokens over tp.
    if (m.cp > 1 && c.sequence_parallel && g.seq_len / m.cp % m.tp != 0) {
      return "--seq " + str(g.seq_len) + " / --cp " + str(m.cp) + " is not divisible by --tp " +
             str(m.tp) + " under --sequence-parallel; change --seq, --cp or --tp";
    }
    return "";
  }

  model::ParamLayout layout(const TrainConfig& c) const override {
    return model::gpt_layout(c.gpt);
  }
  // Tensor parallel: the plain layers given this rank's heads and hidden units and f and g
  // on the tp group (model/gpt_layers.h), plus the sequence's all-gather and reduce-scatter
  // under --sequence-parallel. tp null: for the layout only.
  model::Layers layers(const TrainConfig& c, const MeshShape& shape, const MeshCoord& at,
                       RankComms comms) const override {
    model::ContextRing cp;
    if (shape.cp > 1) {
      cp.rank = at.cp;
      cp.size = shape.cp;
      TracedComm* ring = comms.cp;
      cp.shift = [ring](std::span<const float> out, std::span<float> in) {
        if (ring != nullptr) ring->shift(out, in);
      };
    }
    if (shape.tp == 1) return model::gpt_layers(c.gpt, {}, cp);
    TracedComm* tp = comms.tp;
    model::SequenceSharding sharding;
    sharding.rank = at.tp;
    sharding.size = shape.tp;
    sharding.reduce = [tp](std::span<float> x) {
      if (tp != nullptr) tp->all_reduce(x);
    };
    if (c.sequence_parallel) {
      sharding.all_gather = [tp](std::span<const float> in, std::span<float> out) {
        if (tp != nullptr) tp->all_gather(in, out);
      };
      sharding.reduce_scatter = [tp](std::span<const float> in, std::span<float> out) {
        if (tp != nullptr) tp->reduce_scatter(in, out);
      };
    }
    return model::gpt_layers(c.gpt, sharding, cp);
  }

  // A pipeline chunk takes whole transformer layers (an attention and an MLP block); the
  // first keeps the embedding, the last the final norm and the head.
  int pipeline_blocks(const TrainConfig& c) const override { return c.gpt.num_layers; }
  int lead_layers() const override { return 1; }
  int layers_per_block() const override { return 2; }
  int tail_layers() const override { return 2; }

  // What a rank's stack keeps, tensor by tensor (model/gpt_memory.h; docs/gpt.md compares it
  // with Korthikanti et al.'s count and with the measured peak).
  int64_t activation_floats(const TrainConfig& c, int64_t rows, int tp,
                            int layers_share) const override {
    const int layers = std::max(1, c.gpt.num_layers / std::max(1, layers_share));
    return model::gpt_activation_floats(c.gpt, {.batch = rows,
                                                .tp = tp,
                                                .sequence_parallel = c.sequence_parallel,
                                                .recompute = c.recompute,
                                                .layers = layers,
                                                .cp = c.mesh().cp})
        .total();
  }

  // The answer positions' held-out accuracy (model/sequence_task.h) at the initial and the
  // trained parameters, on one rank's stack.
  std::string evaluate(const TrainConfig& c, std::span<const float> params) const override {
    const model::GptConfig& g = c.gpt;
    const model::ReverseTask task(g.seq_len / 2, g.vocab - 1, task_seed(c));
    model::LayerStack stack(model::gpt_layers(g), model::Precision::kFp32);
    if (params.size() != stack.layout().size()) return "";
    constexpr int kHeldOut = 256;
    stack.store().set_params(model::init_params(stack.layout(), c.seed));
    const float before = model::heldout_accuracy(stack, task, kHeldOut);
    stack.store().set_params(params);
    const float after = model::heldout_accuracy(stack, task, kHeldOut);
    char line[160];
    std::snprintf(line, sizeof line,
                  "held-out accuracy %.3f -> %.3f on the reversed symbols (%d samples; chance "
                  "%.3f)",
                  before, after, kHeldOut, 1.0 / (g.vocab - 1));
    return line;
  }

  std::unique_ptr<Objective> objective(const TrainConfig& c,
                                       model::MemoryLedger* ledger) const override {
    return std::make_unique<ReverseObjective>(c, ledger);
  }
  std::unique_ptr<Objective> rank_objective(const TrainConfig& c, model::MemoryLedger* ledger,
                                            const MeshShape& shape,
                                            const MeshCoord& at) const override {
    return std::make_unique<ReverseObjective>(c, ledger, at.cp, shape.cp);
  }
};

}  // namespace

const ModelSpec& gpt_model_spec() {
  static const GptSpec spec;
  return spec;
}

}  // namespace dtsim::train
