#include "train/result.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace dtsim::train {

double RunResult::bytes_sent_per_step() const {
  if (steps <= 0) return 0;
  uint64_t most = 0;
  for (const RankReport& r : ranks) most = std::max(most, r.counters.total().bytes_sent);
  return static_cast<double>(most) / steps;
}

int RunResult::first_nonfinite_step() const {
  for (size_t s = 0; s < losses.size(); ++s) {
    if (!std::isfinite(losses[s])) return static_cast<int>(s);
  }
  return -1;
}

namespace {

// allclose for one value; NaN on either side never passes.
bool close(double a, double b, double rtol, double atol) {
  if (std::isnan(a) || std::isnan(b)) return false;
  return std::abs(a - b) <= atol + rtol * std::abs(b);
}

}  // namespace

Comparison compare(const RunResult& run, const RunResult& reference, double rtol, double atol) {
  Comparison c;
  const bool same_shape =
      run.params.size() == reference.params.size() && run.losses.size() == reference.losses.size();
  bool all_close = same_shape;
  c.bitwise_equal = same_shape;
  if (same_shape) {
    c.bitwise_equal =
        std::memcmp(run.params.data(), reference.params.data(), run.params.size() * 4) == 0 &&
        std::memcmp(run.losses.data(), reference.losses.data(), run.losses.size() * 8) == 0;
  }
  const size_t np = std::min(run.params.size(), reference.params.size());
  for (size_t i = 0; i < np; ++i) {
    const double a = run.params[i], b = reference.params[i];
    const double d = std::isnan(a) || std::isnan(b) ? INFINITY : std::abs(a - b);
    c.max_abs_diff = std::max(c.max_abs_diff, d);
    c.max_rel_diff = std::max(c.max_rel_diff, d / std::max(std::abs(b), 1e-6));
    all_close = all_close && close(a, b, rtol, atol);
  }
  const size_t nl = std::min(run.losses.size(), reference.losses.size());
  for (size_t i = 0; i < nl; ++i) {
    const double a = run.losses[i], b = reference.losses[i];
    const double d = std::isnan(a) || std::isnan(b) ? INFINITY : std::abs(a - b);
    c.max_loss_diff = std::max(c.max_loss_diff, d);
    all_close = all_close && close(a, b, rtol, atol);
  }
  c.passed = all_close;
  return c;
}

}  // namespace dtsim::train
