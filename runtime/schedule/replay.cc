// Replaying a recorded schedule, exactly (Replay) or with preemptions taken out (Shrink).
#include <algorithm>

#include "runtime/schedule/strategy.h"

namespace dtsim::schedule {
namespace {

class Replay final : public Strategy {
 public:
  explicit Replay(Record record) : record_(std::move(record)) {}
  void begin(int /*ranks*/, uint64_t /*run_seed*/) override { divergence_.clear(); }
  std::string name() const override { return "replay"; }

  int choose(const std::vector<int>& runnable, int current, uint64_t step) override {
    if (step >= record_.choices.size()) {
      if (divergence_.empty()) {
        divergence_ =
            "the replay ran past the " + std::to_string(record_.choices.size()) + " recorded steps";
      }
      return current >= 0 ? current : runnable.front();
    }
    if (divergence_.empty() && hash_runnable(runnable) != record_.runnable_hash[step]) {
      divergence_ = "the runnable ranks differ from the recording at step " + std::to_string(step) +
                    ": something outside the scheduler is not deterministic";
    }
    return record_.choices[step];
  }

  std::string divergence() const override { return divergence_; }

 private:
  Record record_;
  std::string divergence_;
};

class Shrink final : public Strategy {
 public:
  Shrink(Record record, std::vector<uint64_t> skip)
      : record_(std::move(record)), skip_(std::move(skip)) {}
  void begin(int /*ranks*/, uint64_t /*run_seed*/) override {}
  std::string name() const override { return "shrink"; }

  int choose(const std::vector<int>& runnable, int current, uint64_t step) override {
    const bool recorded = step < record_.choices.size();
    const bool fits =
        recorded && std::binary_search(runnable.begin(), runnable.end(), record_.choices[step]);
    if (current >= 0) {  // preempt only where the record did, and not where skipped
      const bool preempt = recorded && record_.preempted[step] &&
                           !std::binary_search(skip_.begin(), skip_.end(), step);
      return preempt && fits ? record_.choices[step] : current;
    }
    return fits ? record_.choices[step] : runnable.front();
  }

 private:
  Record record_;
  std::vector<uint64_t> skip_;
};

}  // namespace

int Record::preemptions() const {
  return static_cast<int>(std::count(preempted.begin(), preempted.end(), 1));
}

uint64_t hash_runnable(const std::vector<int>& runnable) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (int r : runnable) h = (h ^ static_cast<uint64_t>(r)) * 0x100000001b3ull;
  return h;
}

std::unique_ptr<Strategy> make_replay(Record record) {
  return std::make_unique<Replay>(std::move(record));
}

std::unique_ptr<Strategy> make_shrink(Record record, std::vector<uint64_t> skip) {
  std::sort(skip.begin(), skip.end());
  return std::make_unique<Shrink>(std::move(record), std::move(skip));
}

}  // namespace dtsim::schedule
