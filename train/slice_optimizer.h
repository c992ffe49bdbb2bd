// SliceOptimizer: the optimizer a config names (SGD, SGD with momentum, Adam), built over one
// contiguous slice in fp32 or in mixed precision (then it keeps the slice's fp32 master
// weights). DDP builds one over all parameters, ZeRO rank r over its shard only.
//
// Thread safety: none; one optimizer per slice per rank thread.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "common/bf16.h"
#include "model/memory.h"
#include "model/optimizer.h"
#include "train/config.h"

namespace dtsim::train {

class SliceOptimizer {
 public:
  // fp32: state for n elements, recorded in `ledger` (may be null).
  SliceOptimizer(const TrainConfig& config, size_t n, model::MemoryLedger* ledger);
  // Mixed precision: also fp32 master weights initialised from the bf16 slice.
  SliceOptimizer(const TrainConfig& config, std::span<const BFloat16> params,
                 model::MemoryLedger* ledger);

  void step(std::span<float> params, std::span<const float> grads);
  void step(std::span<BFloat16> params, std::span<const BFloat16> grads);
  // Per element, how far the last step moved it per unit of its gradient: lr for SGD (with
  // momentum too), lr / (sqrt(v_hat) + eps) for Adam. How a gradient's round-off shows in
  // the parameters (check.h scales its floor by it).
  std::vector<float> step_sizes() const;
  // The optimizer when step() on fp32 spans is plain SGD (model::Sgd::is_plain), else null.
  const model::Sgd* plain_sgd() const { return sgd_ && sgd_->is_plain() ? sgd_.get() : nullptr; }

  // Checkpoints (train/checkpoint/): the slice's per-element fp32 state by name, each of the
  // slice's size, in a fixed order ("master" under mixed precision, then "adam_m" and
  // "adam_v", or "momentum"); and the steps taken, restored by set_steps().
  struct NamedState {
    const char* name;
    std::span<float> data;
  };
  std::vector<NamedState> state();
  void set_steps(int64_t steps);

 private:
  size_t n_;
  float lr_;
  std::unique_ptr<model::Sgd> sgd_;
  std::unique_ptr<model::Adam> adam_;
};

}  // namespace dtsim::train

namespace dtsim::train {

// The optimizer for a slice in its storage type: fp32 state for float slices, fp32 master
// plus state for bf16 slices.
inline std::unique_ptr<SliceOptimizer> make_slice_optimizer(const TrainConfig& config,
                                                            std::span<float> params,
                                                            model::MemoryLedger* ledger) {
  return std::make_unique<SliceOptimizer>(config, params.size(), ledger);
}
inline std::unique_ptr<SliceOptimizer> make_slice_optimizer(const TrainConfig& config,
                                                            std::span<BFloat16> params,
                                                            model::MemoryLedger* ledger) {
  return std::make_unique<SliceOptimizer>(config, std::span<const BFloat16>(params), ledger);
}

}  // namespace dtsim::train
