#include "model/gpt_model.h"

#include <memory>
#include <string>
#include <vector>

#include "model/check.h"
#include "model/gpt_layers.h"
#include "model/mlp_layers.h"

namespace dtsim::model {

Layers gpt_layers(const GptConfig& c, const SequenceSharding& sharding) {
  DTSIM_CHECK(c.vocab > 1 && c.seq_len > 0 && c.d_model > 0 && c.heads > 0 && c.head_dim > 0 &&
              c.num_layers > 0 && c.mlp_hidden > 0);
  // Tensor parallelism alone leaves the embedding and the final norm replicated (plain).
  const SequenceSharding outer = sharding.sequence_parallel() ? sharding : SequenceSharding{};
  Layers layers;
  layers.push_back(std::make_unique<TokenEmbedding>("embed", c.vocab, c.seq_len, c.d_model, outer));
  for (int l = 0; l < c.num_layers; ++l) {
    const std::string block = "block" + std::to_string(l);
    layers.push_back(std::make_unique<AttentionBlock>(block + ".attn", c.seq_len, c.d_model,
                                                      c.heads, c.head_dim, sharding));
    layers.push_back(std::make_unique<GptMlpBlock>(block + ".mlp", c.seq_len, c.d_model,
                                                   c.mlp_hidden, sharding));
  }
  layers.push_back(std::make_unique<LayerNormLayer>("lnf", c.seq_len, c.d_model, outer));
  layers.push_back(
      std::make_unique<PerToken>(std::make_unique<Linear>("head", c.d_model, c.vocab), c.seq_len));
  return layers;
}

ParamLayout gpt_layout(const GptConfig& c) { return layout_of(gpt_layers(c)); }

float heldout_accuracy(LayerStack& stack, const ReverseTask& task, int count, int pass) {
  const int S = task.seq_len();
  DTSIM_CHECK(count > 0 && stack.in_dim() == S && stack.out_dim() == S * task.vocab());
  std::vector<float> tokens(size_t(count) * S);
  std::vector<int32_t> labels(size_t(count) * S);
  task.heldout(0, count, tokens, labels);
  return token_accuracy(stack.forward(pass, tokens, count), labels, count, S, task.vocab(),
                        task.answer_begin(), S);
}

GptModel::GptModel(const GptConfig& config, uint64_t seed, Precision precision)
    : config_(config),
      stack_(gpt_layers(config), precision),
      loss_(config.vocab, &stack_.memory(), config.seq_len) {
  store().set_params(init_params(layout(), seed));
}

std::span<const float> GptModel::forward(std::span<const float> tokens, int batch) {
  return stack_.forward(0, tokens, batch);
}

float GptModel::forward_backward(std::span<const float> tokens, std::span<const int32_t> labels,
                                 int batch, float grad_scale) {
  std::span<const float> y = stack_.forward(0, tokens, batch);
  std::span<float> dy = stack_.loss_grad(batch);
  const float loss =
      loss_.forward_backward(y, {.values = {}, .labels = labels}, batch, grad_scale, dy);
  stack_.backward(0, dy, {grad_scale, batch});
  return loss;
}

}  // namespace dtsim::model
