// Central finite differences for gradient tests: perturbs each parameter by +-eps, evaluates
// the loss (in double from float outputs), and compares with the analytic gradient under
// |analytic - numeric| <= atol + rtol * |numeric|.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "model/rng.h"

namespace dtsim::model::testing {

struct GradCheckResult {
  int checked = 0;
  int failed = 0;
  double max_abs_error = 0.0;
  std::string first_failure;
};

// Checks analytic[i] against (loss(v_i + eps) - loss(v_i - eps)) / 2 eps for every i in
// `values` (modified in place and restored). `unchanged()`, asked after each perturbed loss,
// may veto an index by returning false, e.g. when the perturbation changes a discrete routing
// decision; vetoed indices are not counted in `checked`.
inline GradCheckResult check_gradient(std::span<float> values, std::span<const float> analytic,
                                      const std::function<double()>& loss, float eps, double atol,
                                      double rtol,
                                      const std::function<bool()>& unchanged = nullptr) {
  GradCheckResult r;
  for (size_t i = 0; i < values.size(); ++i) {
    const float saved = values[i];
    values[i] = saved + eps;
    const double plus = loss();
    const bool ok_plus = !unchanged || unchanged();
    values[i] = saved - eps;
    const double minus = loss();
    const bool ok_minus = !unchanged || unchanged();
    values[i] = saved;
    if (!ok_plus || !ok_minus) continue;
    // The perturbation actually applied, after float rounding.
    const double h = (double(saved + eps) - double(saved - eps));
    const double numeric = (plus - minus) / h;
    const double err = std::abs(double(analytic[i]) - numeric);
    r.max_abs_error = std::max(r.max_abs_error, err);
    ++r.checked;
    if (err > atol + rtol * std::abs(numeric)) {
      if (r.failed++ == 0) {
        r.first_failure = "index " + std::to_string(i) + ": analytic " +
                          std::to_string(analytic[i]) + " numeric " + std::to_string(numeric);
      }
    }
  }
  return r;
}

inline std::vector<float> random_vector(size_t n, uint64_t seed, float scale = 1.0f) {
  SplitMix64 rng(seed);
  std::vector<float> v(n);
  for (float& x : v) x = rng.uniform(scale);
  return v;
}

// sum_i a_i * b_i in double: a linear probe loss whose gradient w.r.t. a is b.
inline double dot(std::span<const float> a, std::span<const float> b) {
  double s = 0.0;
  for (size_t i = 0; i < a.size(); ++i) s += double(a[i]) * b[i];
  return s;
}

}  // namespace dtsim::model::testing

#define EXPECT_GRAD_OK(result)                                                                    \
  do {                                                                                            \
    const auto& r_ = (result);                                                                    \
    EXPECT_GT(r_.checked, 0);                                                                     \
    EXPECT_EQ(r_.failed, 0) << r_.first_failure << " (max abs error " << r_.max_abs_error << ")"; \
  } while (0)
