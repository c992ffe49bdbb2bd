// SGD (with momentum) and Adam/AdamW over any contiguous slice of a flat parameter buffer.
// An optimizer is built for a slice of n elements and holds state for that slice only, so
// ZeRO rank r builds one for its shard and holds only the shard's m and v. Updates are
// elementwise, so updating two halves gives the same bits as updating the whole.
//
// Mixed precision: construct from the slice's bf16 weights; the optimizer then keeps the
// fp32 master weights of the slice, and step() on bf16 spans updates the master from the
// widened bf16 gradients and writes the bf16 weights back rounded to nearest even.
#pragma once

#include <span>

#include "common/bf16.h"
#include "model/memory.h"
#include "model/sgd_update.h"

namespace dtsim::model {

struct SgdConfig {
  float lr = 0.01f;
  float momentum = 0.0f;      // 0 disables the momentum buffer
  float weight_decay = 0.0f;  // L2 added to the gradient (torch SGD semantics)
};

struct AdamConfig {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;  // decoupled (AdamW): p -= lr * wd * p
};

// Thread safety: none; one optimizer per slice per thread.
class Sgd {
 public:
  // fp32: state for a slice of n elements (momentum buffer under kAdamM when momentum > 0).
  Sgd(const SgdConfig& config, size_t n, MemoryLedger* ledger = nullptr);
  // Mixed precision: also keeps fp32 master weights initialised from the bf16 slice.
  Sgd(const SgdConfig& config, std::span<const BFloat16> params, MemoryLedger* ledger = nullptr);

  // params (n) -= lr * (momentum-filtered) grads (n).
  void step(std::span<float> params, std::span<const float> grads);
  // Mixed precision: master -= ..., params = bf16(master).
  void step(std::span<BFloat16> params, std::span<const BFloat16> grads);
  // The fp32 master weights (mixed precision only).
  std::span<const float> master() const { return master_.span(); }
  void set_lr(float lr) { config_.lr = lr; }
  // Whether step() on fp32 spans is one SgdUpdate per element (no momentum, no master
  // weights), which a backward may then apply itself (Layer::backward_sgd); its lr and decay.
  bool is_plain() const { return config_.momentum == 0.0f && master_.size() == 0; }
  SgdUpdate plain_update() const { return {config_.lr, config_.weight_decay}; }
  // Checkpoints: the per-element state to save and restore (master and momentum, each n or
  // empty), and the number of steps taken (0 makes the next step start the momentum).
  std::span<float> mutable_master() { return master_.span(); }
  std::span<float> mutable_momentum() { return momentum_.span(); }
  void set_steps(int64_t steps) { first_step_ = steps == 0; }

 private:
  // Updates p from fp32 grads g32 or, when g32 is null, bf16 grads g16 widened per element.
  void update(std::span<float> p, const float* g32, const BFloat16* g16);
  SgdConfig config_;
  size_t n_;
  TrackedBuffer<float> master_;    // (n) fp32 master weights (mixed only)
  TrackedBuffer<float> momentum_;  // (n) momentum buffer (momentum > 0 only)
  bool first_step_ = true;
};

class Adam {
 public:
  // fp32: m and v for a slice of n elements.
  Adam(const AdamConfig& config, size_t n, MemoryLedger* ledger = nullptr);
  // Mixed precision: also keeps fp32 master weights initialised from the bf16 slice.
  Adam(const AdamConfig& config, std::span<const BFloat16> params, MemoryLedger* ledger = nullptr);

  // One Adam(W) step with bias correction; the step count t starts at 1.
  void step(std::span<float> params, std::span<const float> grads);
  // Mixed precision: updates the fp32 master from bf16 grads, params = bf16(master).
  void step(std::span<BFloat16> params, std::span<const BFloat16> grads);
  std::span<const float> master() const { return master_.span(); }
  std::span<const float> m() const { return m_.span(); }
  std::span<const float> v() const { return v_.span(); }
  int64_t steps() const { return t_; }
  // Checkpoints: the per-element state to save and restore (master n or empty, m and v n),
  // and the step count t that the bias correction uses.
  std::span<float> mutable_master() { return master_.span(); }
  std::span<float> mutable_m() { return m_.span(); }
  std::span<float> mutable_v() { return v_.span(); }
  void set_steps(int64_t steps) { t_ = steps; }
  void set_lr(float lr) { config_.lr = lr; }
  // Per element, the last step's derivative of the update by the gradient through m (v's
  // dependence left out): lr (1 - beta1) / (1 - beta1^t) / (sqrt(v_hat) + eps). How a
  // gradient's round-off shows in the parameters (train/check.h); `out` has n elements.
  void step_sizes(std::span<float> out) const;

 private:
  // Updates p from fp32 grads g32 or, when g32 is null, bf16 grads g16 widened per element.
  void update(std::span<float> p, const float* g32, const BFloat16* g16);
  AdamConfig config_;
  size_t n_;
  int64_t t_ = 0;
  TrackedBuffer<float> master_;  // (n) fp32 master weights (mixed only)
  TrackedBuffer<float> m_;       // (n) first moment
  TrackedBuffer<float> v_;       // (n) second moment
};

}  // namespace dtsim::model
