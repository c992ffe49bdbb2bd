#include "train/tensor_parallel/tp_mlp_block.h"

#include <memory>
#include <string>

#include "model/check.h"
#include "model/mlp_layers.h"

namespace dtsim::train {

model::Layers tp_mlp_layers(const model::MlpConfig& c, int tp_rank, int tp_size, TracedComm* tp) {
  DTSIM_CHECK(tp == nullptr || (tp->rank() == tp_rank && tp->size() == tp_size));
  const model::HiddenSharding sharding{
      .rank = tp_rank, .size = tp_size, .reduce = [tp](std::span<float> x) {
        if (tp != nullptr) tp->all_reduce(x);  // g forward, f's backward
      }};
  model::Layers layers;
  for (int l = 0; l < c.num_blocks; ++l) {
    layers.push_back(std::make_unique<model::MlpBlock>("block" + std::to_string(l), c.input_dim,
                                                       c.hidden_dim, sharding));
  }
  layers.push_back(std::make_unique<model::Linear>("head", c.input_dim, c.output_dim));
  return layers;
}

}  // namespace dtsim::train
