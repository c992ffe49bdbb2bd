#include "train/accounting.h"

#include <algorithm>
#include <utility>

namespace dtsim::train {

void PeakMemory::observe(const model::MemoryLedger& state, const model::MemoryLedger& activations) {
  for (int c = 0; c < model::kNumMemoryCategories; ++c) {
    const auto cat = static_cast<model::MemoryCategory>(c);
    const auto& from = cat == model::MemoryCategory::kActivations ? activations : state;
    const bool activation = cat == model::MemoryCategory::kActivations;
    peak_[c] = std::max(peak_[c], activation ? from.peak_bytes(cat) : from.bytes(cat));
  }
}

void RankTimeline::open(const char* name) {
  if (events_ == nullptr) return;
  PhaseEvent e;
  e.name = name;
  e.start = std::chrono::steady_clock::now();
  open_.push_back(events_->size());
  events_->push_back(std::move(e));
}

void RankTimeline::close() {
  if (events_ == nullptr || open_.empty()) return;
  (*events_)[open_.back()].end = std::chrono::steady_clock::now();
  open_.pop_back();
}

double median_seconds(std::vector<double> seconds) {
  if (seconds.size() > 1) seconds.erase(seconds.begin());
  if (seconds.empty()) return 0.0;
  std::sort(seconds.begin(), seconds.end());
  return seconds[seconds.size() / 2];
}

}  // namespace dtsim::train
