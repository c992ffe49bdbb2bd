// PCT, probabilistic concurrency testing (Burckhardt, Kothari, Musuvathi, Nagarakatte,
// ASPLOS 2010). Each run gives the n ranks distinct random priorities d, ..., d + n - 1
// and picks d - 1 change points among the k steps of a run; the highest-priority runnable
// rank always runs, and at the i-th change point the rank about to run drops to priority
// d - 1 - i, below every initial one. A bug that needs d ordering constraints is hit with
// probability at least 1/(n k^(d-1)). k is not known before a run: it is the longest run
// seen so far (a guess of 1000 before the first), as Coyote does with its step bound.
#include <algorithm>
#include <string>

#include "common/splitmix.h"
#include "runtime/schedule/strategy.h"

namespace dtsim::schedule {
namespace {

class Pct final : public Strategy {
 public:
  explicit Pct(int depth) : depth_(depth) {}

  void begin(int ranks, uint64_t run_seed) override {
    k_ = std::max(k_, last_steps_);
    last_steps_ = 0;
    const uint64_t k = k_ ? k_ : kFirstGuess;
    rng_ = run_seed;
    priority_.resize(ranks);
    for (int r = 0; r < ranks; ++r) priority_[r] = depth_ + r;
    for (int r = ranks - 1; r > 0; --r) {  // Fisher-Yates
      std::swap(priority_[r], priority_[splitmix64_next(rng_) % (r + 1)]);
    }
    change_.clear();
    for (int i = 0; i < depth_ - 1; ++i) change_.push_back(splitmix64_next(rng_) % k);
  }

  std::string name() const override { return "pct depth " + std::to_string(depth_); }

  int choose(const std::vector<int>& runnable, int /*current*/, uint64_t step) override {
    last_steps_ = step + 1;
    int best = highest(runnable);
    for (size_t i = 0; i < change_.size(); ++i) {
      if (change_[i] != step) continue;
      priority_[best] = depth_ - 2 - static_cast<int>(i);
      best = highest(runnable);
    }
    return best;
  }

 private:
  int highest(const std::vector<int>& runnable) const {
    int best = runnable.front();
    for (int r : runnable) {
      if (priority_[r] > priority_[best]) best = r;
    }
    return best;
  }

  static constexpr uint64_t kFirstGuess = 1000;
  const int depth_;
  uint64_t k_ = 0;  // the longest run so far
  uint64_t last_steps_ = 0;
  uint64_t rng_ = 0;
  std::vector<int> priority_;
  std::vector<uint64_t> change_;
};

}  // namespace

std::unique_ptr<Strategy> make_pct(int depth) { return std::make_unique<Pct>(depth); }

}  // namespace dtsim::schedule
