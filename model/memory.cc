#include "model/memory.h"

#include <mutex>

namespace dtsim::model {

namespace {

struct HugeBlockCache {
  std::mutex mu;
  std::vector<std::pair<size_t, void*>> blocks;  // (bytes, block), oldest first
  size_t bytes = 0;
};

HugeBlockCache& huge_blocks() {
  static auto* cache = new HugeBlockCache;  // never destroyed: frees may come at exit
  return *cache;
}

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kKeepHugeBlocks = false;
#else
constexpr bool kKeepHugeBlocks = true;
#endif

}  // namespace

void* take_huge_block(size_t bytes) {
  if (!kKeepHugeBlocks) return nullptr;
  HugeBlockCache& c = huge_blocks();
  const std::lock_guard lock(c.mu);
  for (size_t i = c.blocks.size(); i-- > 0;) {  // the most recently kept: warm in cache
    if (c.blocks[i].first != bytes) continue;
    void* p = c.blocks[i].second;
    c.blocks.erase(c.blocks.begin() + static_cast<std::ptrdiff_t>(i));
    c.bytes -= bytes;
    return p;
  }
  return nullptr;
}

void keep_huge_block(void* p, size_t bytes) {
  if (!kKeepHugeBlocks || bytes > kHugeBlockCacheBytes) return std::free(p);
  std::vector<void*> evicted;  // the oldest blocks, to make room
  {
    HugeBlockCache& c = huge_blocks();
    const std::lock_guard lock(c.mu);
    size_t drop = 0;
    while (c.bytes + bytes > kHugeBlockCacheBytes) {
      evicted.push_back(c.blocks[drop].second);
      c.bytes -= c.blocks[drop++].first;
    }
    c.blocks.erase(c.blocks.begin(), c.blocks.begin() + static_cast<std::ptrdiff_t>(drop));
    c.blocks.emplace_back(bytes, p);
    c.bytes += bytes;
  }
  for (void* e : evicted) std::free(e);
}

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
