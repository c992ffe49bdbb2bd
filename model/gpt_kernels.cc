#include "model/gpt_kernels.h"

#include <cmath>

#include "model/check.h"

namespace dtsim::model {

void layernorm_forward(std::span<const float> x, std::span<const float> g, std::span<const float> b,
                       std::span<float> y, std::span<float> mean, std::span<float> rstd, int rows,
                       int dim) {
  DTSIM_CHECK(x.size() >= size_t(rows) * dim && y.size() >= size_t(rows) * dim);
  for (int r = 0; r < rows; ++r) {
    const float* xr = x.data() + size_t(r) * dim;
    float* yr = y.data() + size_t(r) * dim;
    float sum = 0.0f;
    for (int d = 0; d < dim; ++d) sum += xr[d];
    const float mu = sum / float(dim);
    float var = 0.0f;
    for (int d = 0; d < dim; ++d) var += (xr[d] - mu) * (xr[d] - mu);
    const float rs = 1.0f / std::sqrt(var / float(dim) + kLayerNormEps);
    for (int d = 0; d < dim; ++d) yr[d] = (xr[d] - mu) * rs * (1.0f + g[d]) + b[d];
    mean[r] = mu;
    rstd[r] = rs;
  }
}

void layernorm_backward(std::span<const float> dy, std::span<const float> x,
                        std::span<const float> g, std::span<const float> mean,
                        std::span<const float> rstd, std::span<float> dx, std::span<float> dg,
                        std::span<float> db, int rows, int dim) {
  for (int r = 0; r < rows; ++r) {
    const float* xr = x.data() + size_t(r) * dim;
    const float* dyr = dy.data() + size_t(r) * dim;
    const float mu = mean[r], rs = rstd[r];
    float sum_dxhat = 0.0f, sum_dxhat_xhat = 0.0f;
    for (int d = 0; d < dim; ++d) {
      const float xhat = (xr[d] - mu) * rs;
      const float dxhat = dyr[d] * (1.0f + g[d]);
      sum_dxhat += dxhat;
      sum_dxhat_xhat += dxhat * xhat;
      if (!dg.empty()) dg[d] += dyr[d] * xhat;
      if (!db.empty()) db[d] += dyr[d];
    }
    if (dx.empty()) continue;
    const float m1 = sum_dxhat / float(dim), m2 = sum_dxhat_xhat / float(dim);
    float* dxr = dx.data() + size_t(r) * dim;
    for (int d = 0; d < dim; ++d) {
      const float xhat = (xr[d] - mu) * rs;
      dxr[d] += rs * (dyr[d] * (1.0f + g[d]) - m1 - xhat * m2);
    }
  }
}

namespace {
int token_id(float f, int vocab) {
  const int id = static_cast<int>(f);
  DTSIM_CHECK(float(id) == f && id >= 0 && id < vocab);
  return id;
}
}  // namespace

void embedding_forward(std::span<const float> ids, std::span<const float> wte,
                       std::span<const float> wpe, std::span<float> y, int batch, int seq, int dim,
                       int vocab) {
  DTSIM_CHECK(ids.size() >= size_t(batch) * seq && y.size() >= size_t(batch) * seq * dim);
  for (int b = 0; b < batch; ++b) {
    for (int t = 0; t < seq; ++t) {
      const int id = token_id(ids[size_t(b) * seq + t], vocab);
      const float* e = wte.data() + size_t(id) * dim;
      const float* p = wpe.data() + size_t(t) * dim;
      float* yr = y.data() + (size_t(b) * seq + t) * dim;
      for (int d = 0; d < dim; ++d) yr[d] = e[d] + p[d];
    }
  }
}

void embedding_backward(std::span<const float> ids, std::span<const float> dy,
                        std::span<float> dwte, std::span<float> dwpe, int batch, int seq, int dim) {
  for (int b = 0; b < batch; ++b) {
    for (int t = 0; t < seq; ++t) {
      const float* dyr = dy.data() + (size_t(b) * seq + t) * dim;
      if (!dwte.empty()) {
        float* e = dwte.data() + size_t(ids[size_t(b) * seq + t]) * dim;
        for (int d = 0; d < dim; ++d) e[d] += dyr[d];
      }
      if (!dwpe.empty()) {
        float* p = dwpe.data() + size_t(t) * dim;
        for (int d = 0; d < dim; ++d) p[d] += dyr[d];
      }
    }
  }
}

}  // namespace dtsim::model
