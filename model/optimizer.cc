#include "model/optimizer.h"

#include <cmath>

#include "model/check.h"

namespace dtsim::model {
namespace {

TrackedBuffer<float> widen(std::span<const BFloat16> src, MemoryLedger* ledger,
                           MemoryCategory category) {
  TrackedBuffer<float> out(ledger, category, src.size());
  for (size_t i = 0; i < src.size(); ++i) out[i] = static_cast<float>(src[i]);
  return out;
}

float grad_at(const float* g32, const BFloat16* g16, size_t i) {
  return g32 != nullptr ? g32[i] : static_cast<float>(g16[i]);
}

void narrow_into(std::span<const float> src, std::span<BFloat16> dst) {
  DTSIM_CHECK(src.size() == dst.size());
  for (size_t i = 0; i < src.size(); ++i) dst[i] = BFloat16(src[i]);
}

}  // namespace

Sgd::Sgd(const SgdConfig& config, size_t n, MemoryLedger* ledger) : config_(config), n_(n) {
  if (config_.momentum != 0.0f) momentum_ = TrackedBuffer<float>(ledger, MemoryCategory::kAdamM, n);
}

Sgd::Sgd(const SgdConfig& config, std::span<const BFloat16> params, MemoryLedger* ledger)
    : Sgd(config, params.size(), ledger) {
  master_ = widen(params, ledger, MemoryCategory::kMasterWeights);
}

void Sgd::update(std::span<float> p, const float* g32, const BFloat16* g16) {
  DTSIM_CHECK(p.size() == n_);
  const float lr = config_.lr, mu = config_.momentum, wd = config_.weight_decay;
  if (g32 != nullptr && mu == 0.0f) {  // the same arithmetic without branches: vectorises
    const SgdUpdate u{lr, wd};
    float* w = p.data();
    for (size_t i = 0; i < n_; ++i) w[i] = u.apply(w[i], g32[i]);
    first_step_ = false;
    return;
  }
  for (size_t i = 0; i < n_; ++i) {
    float d = grad_at(g32, g16, i) + wd * p[i];
    if (mu != 0.0f) {
      momentum_[i] = first_step_ ? d : mu * momentum_[i] + d;
      d = momentum_[i];
    }
    p[i] -= lr * d;
  }
  first_step_ = false;
}

void Sgd::step(std::span<float> params, std::span<const float> grads) {
  DTSIM_CHECK(master_.size() == 0 && grads.size() == n_);
  update(params, grads.data(), nullptr);
}

void Sgd::step(std::span<BFloat16> params, std::span<const BFloat16> grads) {
  DTSIM_CHECK(master_.size() == n_ && params.size() == n_ && grads.size() == n_);
  update(master_.span(), nullptr, grads.data());
  narrow_into(master_.span(), params);
}

Adam::Adam(const AdamConfig& config, size_t n, MemoryLedger* ledger)
    : config_(config),
      n_(n),
      m_(ledger, MemoryCategory::kAdamM, n),
      v_(ledger, MemoryCategory::kAdamV, n) {}

Adam::Adam(const AdamConfig& config, std::span<const BFloat16> params, MemoryLedger* ledger)
    : Adam(config, params.size(), ledger) {
  master_ = widen(params, ledger, MemoryCategory::kMasterWeights);
}

void Adam::update(std::span<float> p, const float* g32, const BFloat16* g16) {
  DTSIM_CHECK(p.size() == n_);
  ++t_;
  const float b1 = config_.beta1, b2 = config_.beta2, eps = config_.eps;
  // Bias corrections in double from the step count only, so every shard computes the same.
  const float c1 = static_cast<float>(1.0 / (1.0 - std::pow(double(b1), double(t_))));
  const float c2 = static_cast<float>(1.0 / (1.0 - std::pow(double(b2), double(t_))));
  const float lr = config_.lr, decay = 1.0f - config_.lr * config_.weight_decay;
  for (size_t i = 0; i < n_; ++i) {
    const float g = grad_at(g32, g16, i);
    m_[i] = b1 * m_[i] + (1.0f - b1) * g;
    v_[i] = b2 * v_[i] + (1.0f - b2) * g * g;
    const float m_hat = m_[i] * c1;
    const float v_hat = v_[i] * c2;
    p[i] = p[i] * decay - lr * m_hat / (std::sqrt(v_hat) + eps);
  }
}

void Adam::step_sizes(std::span<float> out) const {
  DTSIM_CHECK(out.size() == n_ && t_ > 0);
  const double t = static_cast<double>(t_);
  const double c1 = 1.0 / (1.0 - std::pow(double(config_.beta1), t));
  const double c2 = 1.0 / (1.0 - std::pow(double(config_.beta2), t));
  const double gain = config_.lr * (1.0 - config_.beta1) * c1;
  for (size_t i = 0; i < n_; ++i) {
    out[i] = static_cast<float>(gain / (std::sqrt(v_[i] * c2) + config_.eps));
  }
}

void Adam::step(std::span<float> params, std::span<const float> grads) {
  DTSIM_CHECK(master_.size() == 0 && grads.size() == n_);
  update(params, grads.data(), nullptr);
}

void Adam::step(std::span<BFloat16> params, std::span<const BFloat16> grads) {
  DTSIM_CHECK(master_.size() == n_ && params.size() == n_ && grads.size() == n_);
  update(master_.span(), nullptr, grads.data());
  narrow_into(master_.span(), params);
}

}  // namespace dtsim::model
