#include "model/memory.h"

namespace dtsim::model {

std::string_view memory_category_name(MemoryCategory c) {
  switch (c) {
    case MemoryCategory::kWeights:
      return "weights";
    case MemoryCategory::kGradients:
      return "gradients";
    case MemoryCategory::kMasterWeights:
      return "master_weights";
    case MemoryCategory::kAdamM:
      return "adam_m";
    case MemoryCategory::kAdamV:
      return "adam_v";
    case MemoryCategory::kActivations:
      return "activations";
  }
  return "unknown";
}

int static_bytes_per_param(Precision precision, OptimizerKind optimizer) {
  const int weights_and_grads = precision == Precision::kFp32 ? 4 + 4 : 2 + 2;
  const int master = precision == Precision::kFp32 ? 0 : 4;
  int state = 0;
  if (optimizer == OptimizerKind::kSgdMomentum) state = 4;
  if (optimizer == OptimizerKind::kAdam) state = 4 + 4;
  return weights_and_grads + master + state;
}

void MemoryLedger::add(MemoryCategory c, int64_t bytes) {
  const int i = static_cast<int>(c);
  const int64_t now = bytes_[i].fetch_add(bytes, std::memory_order_relaxed) + bytes;
  int64_t peak = peaks_[i].load(std::memory_order_relaxed);
  while (now > peak && !peaks_[i].compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
}

int64_t MemoryLedger::peak_bytes(MemoryCategory c) const {
  return peaks_[static_cast<int>(c)].load(std::memory_order_relaxed);
}

void MemoryLedger::reset_peaks() {
  for (int i = 0; i < kNumMemoryCategories; ++i) {
    peaks_[i].store(bytes_[i].load(std::memory_order_relaxed), std::memory_order_relaxed);
  }
}

int64_t MemoryLedger::bytes(MemoryCategory c) const {
  return bytes_[static_cast<int>(c)].load(std::memory_order_relaxed);
}

int64_t MemoryLedger::static_bytes() const {
  return total_bytes() - bytes(MemoryCategory::kActivations);
}

int64_t MemoryLedger::total_bytes() const {
  int64_t sum = 0;
  for (const auto& b : bytes_) sum += b.load(std::memory_order_relaxed);
  return sum;
}

}  // namespace dtsim::model
