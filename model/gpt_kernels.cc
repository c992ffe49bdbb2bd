#include "model/gpt_kernels.h"

#include <cmath>

#include "model/check.h"

namespace dtsim::model {

namespace {

// Rows are handled kRows at a time: each row's sums are still one chain over d in order (the
// same bits as row by row), the chains of the group interleaved so that they overlap.
constexpr int kRows = 8;

template <int R>
void layernorm_rows(const float* x, const float* g, const float* b, float* y, float* mean,
                    float* rstd, int dim) {
  float sum[R] = {}, var[R] = {}, mu[R], rs[R];
  for (int d = 0; d < dim; ++d) {
    for (int j = 0; j < R; ++j) sum[j] += x[size_t(j) * dim + d];
  }
  for (int j = 0; j < R; ++j) mu[j] = sum[j] / float(dim);
  for (int d = 0; d < dim; ++d) {
    for (int j = 0; j < R; ++j) {
      const float v = x[size_t(j) * dim + d];
      var[j] += (v - mu[j]) * (v - mu[j]);
    }
  }
  for (int j = 0; j < R; ++j) {
    rs[j] = 1.0f / std::sqrt(var[j] / float(dim) + kLayerNormEps);
    const float* xr = x + size_t(j) * dim;
    float* yr = y + size_t(j) * dim;
    for (int d = 0; d < dim; ++d) yr[d] = (xr[d] - mu[j]) * rs[j] * (1.0f + g[d]) + b[d];
    mean[j] = mu[j];
    rstd[j] = rs[j];
  }
}

// dx, dg, db of rows [0, R) as layernorm_backward; dg and db still gather the rows in order.
template <int R>
void layernorm_backward_rows(const float* dy, const float* x, const float* g, const float* mean,
                             const float* rstd, float* dx, float* dg, float* db, int dim) {
  float s1[R] = {}, s2[R] = {};
  for (int d = 0; d < dim; ++d) {
    for (int j = 0; j < R; ++j) {
      const float xhat = (x[size_t(j) * dim + d] - mean[j]) * rstd[j];
      const float dxhat = dy[size_t(j) * dim + d] * (1.0f + g[d]);
      s1[j] += dxhat;
      s2[j] += dxhat * xhat;
    }
  }
  for (int j = 0; j < R; ++j) {
    const float* xr = x + size_t(j) * dim;
    const float* dyr = dy + size_t(j) * dim;
    const float mu = mean[j], rs = rstd[j];
    if (dg) {
      for (int d = 0; d < dim; ++d) dg[d] += dyr[d] * ((xr[d] - mu) * rs);
    }
    if (db) {
      for (int d = 0; d < dim; ++d) db[d] += dyr[d];
    }
    if (!dx) continue;
    const float m1 = s1[j] / float(dim), m2 = s2[j] / float(dim);
    float* dxr = dx + size_t(j) * dim;
    for (int d = 0; d < dim; ++d) {
      const float xhat = (xr[d] - mu) * rs;
      dxr[d] += rs * (dyr[d] * (1.0f + g[d]) - m1 - xhat * m2);
    }
  }
}

}  // namespace

void layernorm_forward(std::span<const float> x, std::span<const float> g, std::span<const float> b,
                       std::span<float> y, std::span<float> mean, std::span<float> rstd, int rows,
                       int dim) {
  DTSIM_CHECK(x.size() >= size_t(rows) * dim && y.size() >= size_t(rows) * dim);
  int r = 0;
  for (; r + kRows <= rows; r += kRows) {
    layernorm_rows<kRows>(x.data() + size_t(r) * dim, g.data(), b.data(),
                          y.data() + size_t(r) * dim, mean.data() + r, rstd.data() + r, dim);
  }
  for (; r < rows; ++r) {
    layernorm_rows<1>(x.data() + size_t(r) * dim, g.data(), b.data(), y.data() + size_t(r) * dim,
                      mean.data() + r, rstd.data() + r, dim);
  }
}

void layernorm_backward(std::span<const float> dy, std::span<const float> x,
                        std::span<const float> g, std::span<const float> mean,
                        std::span<const float> rstd, std::span<float> dx, std::span<float> dg,
                        std::span<float> db, int rows, int dim) {
  float* dgp = dg.empty() ? nullptr : dg.data();
  float* dbp = db.empty() ? nullptr : db.data();
  auto at = [&](int r) { return size_t(r) * dim; };
  int r = 0;
  for (; r + kRows <= rows; r += kRows) {
    layernorm_backward_rows<kRows>(dy.data() + at(r), x.data() + at(r), g.data(), mean.data() + r,
                                   rstd.data() + r, dx.empty() ? nullptr : dx.data() + at(r), dgp,
                                   dbp, dim);
  }
  for (; r < rows; ++r) {
    layernorm_backward_rows<1>(dy.data() + at(r), x.data() + at(r), g.data(), mean.data() + r,
                               rstd.data() + r, dx.empty() ? nullptr : dx.data() + at(r), dgp, dbp,
                               dim);
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
