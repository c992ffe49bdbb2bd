#include "model/param_store.h"

#include <algorithm>

#include "model/check.h"
#include "model/kernels.h"

namespace dtsim::model {

ParamStore::ParamStore(ParamLayout layout, Precision precision, MemoryLedger* ledger)
    : layout_(std::move(layout)), precision_(precision) {
  const size_t n = layout_.size();
  if (precision_ == Precision::kFp32) {
    params_ = TrackedBuffer<float>(ledger, MemoryCategory::kWeights, n);
    grads_ = TrackedBuffer<float>(ledger, MemoryCategory::kGradients, n);
  } else {
    params_bf16_ = TrackedBuffer<BFloat16>(ledger, MemoryCategory::kWeights, n);
    grads_bf16_ = TrackedBuffer<BFloat16>(ledger, MemoryCategory::kGradients, n);
    const size_t m = layout_.max_layer_size();
    work_params_ = TrackedBuffer<float>(ledger, MemoryCategory::kActivations, m);
    work_grads_ = TrackedBuffer<float>(ledger, MemoryCategory::kActivations, m);
  }
}

std::span<float> ParamStore::params() {
  DTSIM_CHECK(precision_ == Precision::kFp32);
  return params_.span();
}
std::span<const float> ParamStore::params() const {
  DTSIM_CHECK(precision_ == Precision::kFp32);
  return params_.span();
}
std::span<float> ParamStore::grads() {
  DTSIM_CHECK(precision_ == Precision::kFp32);
  return grads_.span();
}
std::span<const float> ParamStore::grads() const {
  DTSIM_CHECK(precision_ == Precision::kFp32);
  return grads_.span();
}

void ParamStore::set_params(std::span<const float> values) {
  DTSIM_CHECK(values.size() == size());
  if (precision_ == Precision::kFp32) {
    std::copy(values.begin(), values.end(), params_.data());
  } else {
    for (size_t i = 0; i < values.size(); ++i) params_bf16_[i] = BFloat16(values[i]);
  }
}

std::vector<float> ParamStore::params_as_float() const {
  if (precision_ == Precision::kFp32) return {params_.data(), params_.data() + size()};
  std::vector<float> out(size());
  for (size_t i = 0; i < size(); ++i) out[i] = static_cast<float>(params_bf16_[i]);
  return out;
}

std::vector<float> ParamStore::grads_as_float() const {
  if (precision_ == Precision::kFp32) return {grads_.data(), grads_.data() + size()};
  std::vector<float> out(size());
  for (size_t i = 0; i < size(); ++i) out[i] = static_cast<float>(grads_bf16_[i]);
  return out;
}

void ParamStore::zero_grad() {
  if (precision_ == Precision::kFp32) {
    std::fill(grads_.data(), grads_.data() + grads_.size(), 0.0f);
  } else {
    std::fill(grads_bf16_.data(), grads_bf16_.data() + grads_bf16_.size(), BFloat16());
  }
}

std::span<const float> ParamStore::layer_params(int layer) {
  const ParamRange r = layout_.layer_range(layer);
  if (precision_ == Precision::kFp32) return params_.span().subspan(r.begin, r.size());
  bf16_widen(params_bf16_.span().subspan(r.begin, r.size()), work_params_.span());
  return work_params_.span().first(r.size());
}

std::span<float> ParamStore::begin_layer_grads(int layer, bool write) {
  const ParamRange r = layout_.layer_range(layer);
  if (precision_ == Precision::kFp32) return grads_.span().subspan(r.begin, r.size());
  // Writing: the layer writes the fp32 staging (or LayerStack zero-fills it for a layer that
  // cannot write), so only the bf16 sums it is added into start from zero.
  if (write) {
    std::fill(grads_bf16_.data() + r.begin, grads_bf16_.data() + r.end, BFloat16());
  } else {
    std::fill(work_grads_.data(), work_grads_.data() + r.size(), 0.0f);
  }
  return work_grads_.span().first(r.size());
}

void ParamStore::end_layer_grads(int layer) {
  if (precision_ == Precision::kFp32) return;
  const ParamRange r = layout_.layer_range(layer);
  bf16_accumulate(grads_bf16_.span().subspan(r.begin, r.size()), work_grads_.span());
}

}  // namespace dtsim::model
