// Memory accounting for model state: every allocation of parameters, gradients, optimizer
// state and activations is tagged by category, so measured bytes can be set beside the
// formula (mixed-precision Adam: 2 + 2 + 4 + 4 + 4 = 16 bytes per parameter).
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <new>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "common/huge_pages.h"

namespace dtsim::model {

enum class MemoryCategory : int {
  kWeights = 0,    // the weights forward/backward read (fp32, or bf16 under mixed precision)
  kGradients,      // gradients backward writes (fp32, or bf16 under mixed precision)
  kMasterWeights,  // fp32 master copy kept by the optimizer under mixed precision only
  kAdamM,          // Adam first moment (also SGD momentum), always fp32
  kAdamV,          // Adam second moment, always fp32
  kActivations,    // activations saved for backward and per-layer compute workspace
};
inline constexpr int kNumMemoryCategories = 6;

// Human-readable name of a category ("weights", "adam_m", ...).
std::string_view memory_category_name(MemoryCategory c);

enum class Precision { kFp32, kMixedBf16 };
enum class OptimizerKind { kSgd, kSgdMomentum, kAdam };

// Static bytes per parameter (weights + grads + master + optimizer state) by the formula:
// fp32 Adam 4+4+4+4 = 16 (no master copy), mixed Adam 2+2+4+4+4 = 16, fp32 SGD-momentum 12.
int static_bytes_per_param(Precision precision, OptimizerKind optimizer);

// Running byte counts per category. A strategy may keep its own ledger to account only its
// shard (ZeRO-1 on N ranks: 12 * Psi / N of optimizer state under mixed-precision Adam).
// Thread safety: counters are atomic, so one ledger may be shared by threads; it owns no memory.
class MemoryLedger {
 public:
  MemoryLedger() = default;
  MemoryLedger(const MemoryLedger&) = delete;
  MemoryLedger& operator=(const MemoryLedger&) = delete;

  // Records that `bytes` more (negative: fewer) bytes of category `c` are live.
  void add(MemoryCategory c, int64_t bytes);
  // Live bytes of one category.
  int64_t bytes(MemoryCategory c) const;
  // The most live bytes of one category at any moment since construction or reset_peaks().
  int64_t peak_bytes(MemoryCategory c) const;
  // Restarts every category's peak from its live bytes.
  void reset_peaks();
  // Live bytes of every category but activations: the static cost of the model state.
  int64_t static_bytes() const;
  // Live bytes of all categories.
  int64_t total_bytes() const;

 private:
  std::array<std::atomic<int64_t>, kNumMemoryCategories> bytes_{};
  std::array<std::atomic<int64_t>, kNumMemoryCategories> peaks_{};
};

// Freed blocks of 2 MiB and more, kept for reuse up to kHugeBlockCacheBytes in all: a buffer
// made and freed every layer (ZeRO-3's gathered parameters and staged gradients, a step's
// activations) would otherwise map fresh pages, have the kernel zero them and unmap them,
// interrupting every core that runs a thread of the process, each time. Not under
// AddressSanitizer, which should see every use after free. Thread-safe: one mutex, taken
// once per large allocation or free (never per message).
inline constexpr size_t kHugeBlockCacheBytes = size_t{256} << 20;
// A kept block of exactly `bytes` (a multiple of 2 MiB), or nullptr.
void* take_huge_block(size_t bytes);
// Keeps `p` (from std::aligned_alloc, `bytes` long) for reuse, freeing the oldest kept
// blocks to make room (or `p` itself when it alone is larger than the cache).
void keep_huge_block(void* p, size_t bytes);

// std::allocator, except that blocks of 2 MiB and more are 2 MiB aligned and advised as
// transparent huge pages (madvise: a hint the kernel may ignore), so a step that streams
// the weights and gradients walks a few TLB entries instead of one per 4 KiB; freed, they
// are kept for reuse (take_huge_block).
template <class T>
struct LargePageAllocator {
  using value_type = T;
  LargePageAllocator() = default;
  template <class U>
  LargePageAllocator(const LargePageAllocator<U>&) {}
  T* allocate(size_t n) {
    const size_t bytes = n * sizeof(T);
    if (bytes < kHugePage) return std::allocator<T>().allocate(n);
    const size_t rounded = huge_page_bytes(bytes);
    if (void* kept = take_huge_block(rounded)) return static_cast<T*>(kept);
    return static_cast<T*>(allocate_huge_pages(rounded));
  }
  void deallocate(T* p, size_t n) {
    const size_t bytes = n * sizeof(T);
    if (bytes < kHugePage) return std::allocator<T>().deallocate(p, n);
    keep_huge_block(p, huge_page_bytes(bytes));
  }
  template <class U>
  bool operator==(const LargePageAllocator<U>&) const {
    return true;
  }
};

// A std::vector<T> whose size is recorded in a ledger under one category for its lifetime.
// Move-only; a null ledger records nothing.
template <class T>
class TrackedBuffer {
 public:
  TrackedBuffer() = default;
  TrackedBuffer(MemoryLedger* ledger, MemoryCategory category, size_t n, T value = T())
      : ledger_(ledger), category_(category), data_(n, value) {
    record(+1);
  }
  TrackedBuffer(TrackedBuffer&& o) noexcept
      : ledger_(std::exchange(o.ledger_, nullptr)),
        category_(o.category_),
        data_(std::move(o.data_)) {}
  TrackedBuffer& operator=(TrackedBuffer&& o) noexcept {
    if (this != &o) {
      record(-1);
      ledger_ = std::exchange(o.ledger_, nullptr);
      category_ = o.category_;
      data_ = std::move(o.data_);
    }
    return *this;
  }
  TrackedBuffer(const TrackedBuffer&) = delete;
  TrackedBuffer& operator=(const TrackedBuffer&) = delete;
  ~TrackedBuffer() { record(-1); }

  // Frees the elements (size 0), updating the ledger.
  void release() { *this = TrackedBuffer(); }
  // Resizes to n elements (new ones value-initialised), updating the ledger.
  void resize(size_t n) {
    record(-1);
    data_.resize(n);
    record(+1);
  }
  size_t size() const { return data_.size(); }
  T* data() { return data_.data(); }
  const T* data() const { return data_.data(); }
  T& operator[](size_t i) { return data_[i]; }
  const T& operator[](size_t i) const { return data_[i]; }
  std::span<T> span() { return data_; }
  std::span<const T> span() const { return data_; }

 private:
  void record(int sign) {
    if (ledger_ != nullptr) {
      ledger_->add(category_, sign * static_cast<int64_t>(data_.size() * sizeof(T)));
    }
  }

  MemoryLedger* ledger_ = nullptr;
  MemoryCategory category_ = MemoryCategory::kActivations;
  std::vector<T, LargePageAllocator<T>> data_;
};

}  // namespace dtsim::model
