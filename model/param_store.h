// The flat parameter and gradient buffers of one model, in fp32 or in bf16 (mixed precision).
//
// fp32: params (Psi) and grads (Psi) are float; the optimizer updates them in place.
// Mixed bf16: params and grads are stored as 2-byte bf16 (round-to-nearest-even); compute
// widens one layer's bf16 weights into an fp32 workspace, and a layer's fp32 gradient is
// added into the bf16 gradients with one rounding per element per backward. The fp32 master
// weights live in the optimizer (see optimizer.h), which writes rounded bf16 weights back.
#pragma once

#include <span>

#include "common/bf16.h"
#include "model/memory.h"
#include "model/param_layout.h"

namespace dtsim::model {

// Thread safety: none; one store belongs to one model used by one thread at a time.
class ParamStore {
 public:
  // Allocates zeroed params and grads for `layout`, recorded in `ledger` (may be null).
  ParamStore(ParamLayout layout, Precision precision, MemoryLedger* ledger);

  const ParamLayout& layout() const { return layout_; }
  Precision precision() const { return precision_; }
  size_t size() const { return layout_.size(); }

  // fp32 params (Psi); only under Precision::kFp32.
  std::span<float> params();
  std::span<const float> params() const;
  // fp32 grads (Psi); only under Precision::kFp32.
  std::span<float> grads();
  std::span<const float> grads() const;
  // bf16 params (Psi); only under Precision::kMixedBf16.
  std::span<BFloat16> params_bf16() { return params_bf16_.span(); }
  // bf16 grads (Psi); only under Precision::kMixedBf16.
  std::span<BFloat16> grads_bf16() { return grads_bf16_.span(); }

  // Copies (fp32) or rounds to bf16 (mixed) the given full parameter vector into the store.
  void set_params(std::span<const float> values);
  // The parameters widened to fp32, whatever the precision.
  std::vector<float> params_as_float() const;
  // The gradients widened to fp32, whatever the precision.
  std::vector<float> grads_as_float() const;
  // Sets every gradient to zero.
  void zero_grad();

  // fp32 view of layer `layer`'s parameters for compute: the buffer itself (fp32) or the
  // widened bf16 weights in a workspace valid until the next call (mixed).
  std::span<const float> layer_params(int layer);
  // fp32 gradient target for layer `layer`: the buffer itself (fp32) or a workspace (mixed)
  // that end_layer_grads() adds into the bf16 grads, zeroed here unless `write`. `write`: the
  // caller overwrites every element of the target (the bf16 grads of the layer are zeroed
  // here instead; fp32 are left as they are).
  std::span<float> begin_layer_grads(int layer, bool write = false);
  // Finishes layer `layer`'s backward (mixed: bf16_grad = rne(bf16_grad + workspace)).
  void end_layer_grads(int layer);

 private:
  ParamLayout layout_;
  Precision precision_;
  TrackedBuffer<float> params_;          // (Psi) fp32 weights, empty under mixed
  TrackedBuffer<float> grads_;           // (Psi) fp32 grads, empty under mixed
  TrackedBuffer<BFloat16> params_bf16_;  // (Psi) bf16 weights, empty under fp32
  TrackedBuffer<BFloat16> grads_bf16_;   // (Psi) bf16 grads, empty under fp32
  TrackedBuffer<float> work_params_;     // (max layer) widened weights of one layer (mixed)
  TrackedBuffer<float> work_grads_;      // (max layer) fp32 grads of one layer (mixed)
};

}  // namespace dtsim::model
