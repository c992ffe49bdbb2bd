// Random walk: every scheduling point picks a runnable rank uniformly at random.
#include "common/splitmix.h"
#include "runtime/schedule/strategy.h"

namespace dtsim::schedule {
namespace {

class RandomWalk final : public Strategy {
 public:
  void begin(int /*ranks*/, uint64_t run_seed) override { rng_ = run_seed; }
  std::string name() const override { return "random walk"; }
  int choose(const std::vector<int>& runnable, int /*current*/, uint64_t /*step*/) override {
    return runnable[splitmix64_next(rng_) % runnable.size()];
  }

 private:
  uint64_t rng_ = 0;
};

}  // namespace

std::unique_ptr<Strategy> make_random_walk() { return std::make_unique<RandomWalk>(); }

}  // namespace dtsim::schedule
