// The linear layer's kernels of model/kernels.h (linear_*): each a GEMM (model/gemm.h), or
// one per column slice of the output, the slices run by the thread pool
// (model/parallel.h), with the bias fused or summed beside it.
#include <oneapi/tbb/global_control.h>

#include <algorithm>
#include <vector>

#include "model/check.h"
#include "model/gemm.h"
#include "model/kernels.h"
#include "model/parallel.h"

namespace dtsim::model {
namespace {

// The width of a GEMM's slices along `dim` (each slice one sgemm): gemm_slice_width's,
// fixed by the shape, for the threads that may run them; one slice when oneTBB may run
// nothing beside this thread (IntraOpLimit with as many rank threads as cores, or a
// one-thread bench) and the kernel's bits do not depend on the cut, since a slice repacks
// the small operand for nothing. With OpenBLAS the cut stays fixed: there it has a say in
// the bits.
int slice_width(int dim, int64_t work) {
  if (gemm_bits_shape_independent() &&
      tbb::global_control::active_value(tbb::global_control::max_allowed_parallelism) == 1) {
    return dim;
  }
  return gemm_slice_width(dim, work);
}

}  // namespace

void linear_forward(std::span<const float> x, std::span<const float> w, std::span<const float> b,
                    std::span<float> y, int batch, int in, int out) {
  DTSIM_CHECK(x.size() >= size_t(batch) * in && w.size() == size_t(out) * in);
  DTSIM_CHECK(y.size() >= size_t(batch) * out && (b.empty() || b.size() == size_t(out)));
  // Bias fused: added to each product as it is stored (bitwise the bias then beta 1).
  const int64_t work = int64_t{batch} * in * out;
  for_blocks(out, slice_width(out, work), int64_t{batch} * in, [&](int c0, int c1) {
    // y[:, c0:c1] (B, c) = b[c0:c1] + x (B, in) * w[c0:c1, :]^T
    if (b.empty()) {
      sgemm(false, true, batch, c1 - c0, in, x.data(), in, w.data() + size_t(c0) * in, in, 0.0f,
            y.data() + c0, out);
    } else {
      sgemm_bias(true, batch, c1 - c0, in, x.data(), in, w.data() + size_t(c0) * in, in,
                 b.data() + c0, y.data() + c0, out);
    }
  });
}

namespace {

// dx (B, in) = beta dx + dy * w, or (dy * w) ⊙ s with s (B, in) given, in slice_width
// slices of in.
void input_grad(std::span<const float> dy, std::span<const float> w, std::span<float> dx, int batch,
                int in, int out, float beta, const float* s = nullptr) {
  DTSIM_CHECK(dy.size() >= size_t(batch) * out);
  DTSIM_CHECK(dx.size() >= size_t(batch) * in && w.size() == size_t(out) * in);
  const int64_t work = int64_t{batch} * in * out;
  // dx[:, c0:c1] (B, c) = beta dx[:, c0:c1] + dy (B, out) * w[:, c0:c1] (out, c)
  for_blocks(in, slice_width(in, work), int64_t{batch} * out, [&](int c0, int c1) {
    if (s != nullptr) {
      sgemm_scaled(batch, c1 - c0, out, dy.data(), out, w.data() + c0, in, s + c0, dx.data() + c0,
                   in);
    } else {
      sgemm(false, false, batch, c1 - c0, out, dy.data(), out, w.data() + c0, in, beta,
            dx.data() + c0, in);
    }
  });
}

// Calls fn(o0, o1, c0, c1) for the slices of a weight gradient dw (out, in) = dy^T x: cut
// along its larger side into slice_width slices (the reduction over the batch stays inside
// one call), rows [o0, o1) by columns [c0, c1).
template <class Fn>
void for_weight_slices(int batch, int in, int out, Fn&& fn) {
  const int64_t work = int64_t{batch} * in * out;
  if (out >= in) {
    for_blocks(out, slice_width(out, work), int64_t{batch} * in,
               [&](int o0, int o1) { fn(o0, o1, 0, in); });
  } else {
    for_blocks(in, slice_width(in, work), int64_t{batch} * out,
               [&](int c0, int c1) { fn(0, out, c0, c1); });
  }
}

// db (out) += the rows of dy (B, out), in row order.
void add_rows(std::span<const float> dy, int batch, int out, float* db) {
  for (int r = 0; r < batch; ++r) {
    const float* row = dy.data() + size_t(r) * out;
    for (int o = 0; o < out; ++o) db[o] += row[o];
  }
}

// dw (out, in) = beta dw + dy^T (out, B) * x (B, in), in for_weight_slices' slices. db (out)
// = beta db + sum_rows dy, in row order from beta db (0 * db is not 0 for a NaN, so beta 0
// writes a zero first).
void weight_grad(std::span<const float> dy, std::span<const float> x, std::span<float> dw,
                 std::span<float> db, int batch, int in, int out, float beta) {
  DTSIM_CHECK(dy.size() >= size_t(batch) * out && x.size() >= size_t(batch) * in);
  if (!dw.empty()) {
    DTSIM_CHECK(dw.size() == size_t(out) * in);
    for_weight_slices(batch, in, out, [&](int o0, int o1, int c0, int c1) {
      sgemm(true, false, o1 - o0, c1 - c0, batch, dy.data() + o0, out, x.data() + c0, in, beta,
            dw.data() + size_t(o0) * in + c0, in);
    });
  }
  if (!db.empty()) {
    DTSIM_CHECK(db.size() == size_t(out));
    if (beta == 0.0f) std::fill(db.begin(), db.end(), 0.0f);
    add_rows(dy, batch, out, db.data());
  }
}

}  // namespace

void linear_weight_sgd(std::span<const float> dy, std::span<const float> x, std::span<float> w,
                       std::span<float> b, int batch, int in, int out, const SgdUpdate& u) {
  DTSIM_CHECK(dy.size() >= size_t(batch) * out && x.size() >= size_t(batch) * in);
  DTSIM_CHECK(w.size() == size_t(out) * in && (b.empty() || b.size() == size_t(out)));
  // weight_grad's slices, each one sgemm_sgd: the same chains as its sgemm calls.
  for_weight_slices(batch, in, out, [&](int o0, int o1, int c0, int c1) {
    sgemm_sgd(true, false, o1 - o0, c1 - c0, batch, dy.data() + o0, out, x.data() + c0, in, u,
              w.data() + size_t(o0) * in + c0, in);
  });
  if (b.empty()) return;
  // db as weight_grad sums it, in a per-thread buffer (grown once, kept).
  thread_local std::vector<float> db;
  db.assign(size_t(out), 0.0f);
  add_rows(dy, batch, out, db.data());
  for (int o = 0; o < out; ++o) b[o] = u.apply(b[o], db[o]);
}

// beta = 0 instead of a fill and beta = 1: each element's chain starts from +0 and so is
// never -0 (x + (-0) = x, and an exact cancellation rounds to +0), hence 0 + chain == chain.
void linear_input_grad(std::span<const float> dy, std::span<const float> w, std::span<float> dx,
                       int batch, int in, int out) {
  input_grad(dy, w, dx, batch, in, out, 0.0f);
}

void linear_input_grad_scaled(std::span<const float> dy, std::span<const float> w,
                              std::span<const float> s, std::span<float> dx, int batch, int in,
                              int out) {
  DTSIM_CHECK(s.size() >= size_t(batch) * in);
  input_grad(dy, w, dx, batch, in, out, 0.0f, s.data());
}

void linear_backward(std::span<const float> dy, std::span<const float> x, std::span<const float> w,
                     std::span<float> dx, std::span<float> dw, std::span<float> db, int batch,
                     int in, int out) {
  DTSIM_CHECK(dy.size() >= size_t(batch) * out && x.size() >= size_t(batch) * in);
  if (!dx.empty()) input_grad(dy, w, dx, batch, in, out, 1.0f);
  weight_grad(dy, x, dw, db, batch, in, out, 1.0f);
}

void linear_weight_grad(std::span<const float> dy, std::span<const float> x, std::span<float> dw,
                        std::span<float> db, int batch, int in, int out) {
  weight_grad(dy, x, dw, db, batch, in, out, 0.0f);
}

void linear_weight_grads(bool write, std::span<const float> dy, std::span<const float> x,
                         std::span<float> dw, std::span<float> db, int batch, int in, int out) {
  weight_grad(dy, x, dw, db, batch, in, out, write ? 0.0f : 1.0f);
}

}  // namespace dtsim::model
