// Free-function kernels over flat row-major buffers: Linear, GELU, ReLU, MSE, softmax
// cross-entropy, forward and backward side by side. They know nothing of models or ranks,
// so a tensor-parallel strategy can run a column-parallel Linear on a slice of W's rows
// (and b) and a row-parallel Linear on a slice of W's columns (with an empty bias).
//
// Conventions: shapes in comments are row-major (rows, cols). Forward kernels overwrite
// their outputs. Backward kernels ACCUMULATE (+=) into every gradient output, activation
// gradients included; an empty span skips that output. Results are bitwise deterministic
// for a given shape whatever the number of TBB threads; no kernel holds global state.
#pragma once

#include <cstdint>
#include <span>

#include "common/bf16.h"
#include "model/sgd_update.h"

namespace dtsim::model {

// y (B, out) = x (B, in) * w^T + b, with w (out, in) and b (out) or empty for no bias.
void linear_forward(std::span<const float> x, std::span<const float> w, std::span<const float> b,
                    std::span<float> y, int batch, int in, int out);
// Given dy (B, out): dx (B, in) += dy * w; dw (out, in) += dy^T * x; db (out) += sum_rows dy.
// w is read only for dx (it may be empty when dx is).
void linear_backward(std::span<const float> dy, std::span<const float> x, std::span<const float> w,
                     std::span<float> dx, std::span<float> dw, std::span<float> db, int batch,
                     int in, int out);

// dx (B, in) = dy (B, out) * w (out, in): linear_backward's input gradient WRITTEN, not
// added. Bitwise what linear_backward adds into a zero-filled dx, without the fill.
void linear_input_grad(std::span<const float> dy, std::span<const float> w, std::span<float> dx,
                       int batch, int in, int out);

// dx (B, in) = (dy * w) ⊙ s elementwise, s (B, in), WRITTEN: bitwise linear_input_grad then
// gelu_grad_from_kept(s, dx, dx), the product never stored on its own (the MLP block's
// gradient through W2 and GELU, s the derivative its forward kept).
void linear_input_grad_scaled(std::span<const float> dy, std::span<const float> w,
                              std::span<const float> s, std::span<float> dx, int batch, int in,
                              int out);

// dw (out, in) = dy^T * x and db (out) = sum_rows dy: linear_backward's weight gradients
// WRITTEN, not added (db empty: none). Bitwise what linear_backward adds into zeros.
void linear_weight_grad(std::span<const float> dy, std::span<const float> x, std::span<float> dw,
                        std::span<float> db, int batch, int in, int out);
// The same weight gradients written when `write` (linear_weight_grad), else added into (dw, db)
// (linear_backward's): a layer's backward under BackwardScale::write_grads or not.
void linear_weight_grads(bool write, std::span<const float> dy, std::span<const float> x,
                         std::span<float> dw, std::span<float> db, int batch, int in, int out);

// SGD of w (out, in) and b (out) by the weight gradients linear_weight_grad would write,
// which are never stored: w = u.apply(w, dw), b = u.apply(b, db) per element, bitwise
// linear_weight_grad then Sgd::step (momentum 0) on w and b (b empty: none).
void linear_weight_sgd(std::span<const float> dy, std::span<const float> x, std::span<float> w,
                       std::span<float> b, int batch, int in, int out, const SgdUpdate& u);

// y = gelu(x) elementwise, tanh approximation (as GPT-2 / torch approximate="tanh").
void gelu_forward(std::span<const float> x, std::span<float> y);
// dx += dy * gelu'(x) elementwise.
void gelu_backward(std::span<const float> x, std::span<const float> dy, std::span<float> dx);
// dx = dy * gelu'(x) elementwise, WRITTEN: bitwise gelu_backward into a zero-filled dx.
void gelu_grad(std::span<const float> x, std::span<const float> dy, std::span<float> dx);
// y = gelu(x) and d = gelu'(x) elementwise from one exp per element: y bitwise
// gelu_forward's, d bitwise the factor gelu_grad multiplies dy by. d may be x itself (the
// pre-activations replaced by the derivative, which is all a backward needs of them).
void gelu_forward_keep_grad(std::span<const float> x, std::span<float> y, std::span<float> d);
// dx = dy * d elementwise, WRITTEN, d from gelu_forward_keep_grad: bitwise gelu_grad(x, dy, dx).
void gelu_grad_from_kept(std::span<const float> d, std::span<const float> dy, std::span<float> dx);

// y = max(x, 0) elementwise.
void relu_forward(std::span<const float> x, std::span<float> y);
// dx += dy * [x > 0] elementwise.
void relu_backward(std::span<const float> x, std::span<const float> dy, std::span<float> dx);

// Mean over the B rows of the per-row loss mean_j (y_ij - t_ij)^2; y, t are (B, C).
float mse_loss_forward(std::span<const float> y, std::span<const float> t, int batch, int cols);
// dy (B, C) += grad_scale * d(per-row loss)/dy: grad_scale multiplies the SUM over rows, so
// pass 1/B for the gradient of the mean.
void mse_loss_backward(std::span<const float> y, std::span<const float> t, int batch, int cols,
                       float grad_scale, std::span<float> dy);

// probs (B, C) = softmax(logits (B, C)); returns the mean over rows of -log probs[label].
float softmax_cross_entropy_forward(std::span<const float> logits, std::span<const int32_t> labels,
                                    std::span<float> probs, int batch, int classes);
// dlogits (B, C) += grad_scale * (probs - onehot(label)); grad_scale multiplies the SUM over
// rows (1/B for the mean).
void softmax_cross_entropy_backward(std::span<const float> probs, std::span<const int32_t> labels,
                                    int batch, int classes, float grad_scale,
                                    std::span<float> dlogits);

// probs (B, C) = row-wise softmax of logits (B, C) (max-subtracted).
void softmax_forward(std::span<const float> logits, std::span<float> probs, int batch, int classes);
// x[i] = e^(scale * x[i] - shift) for the n floats at x, through the same vectorised exp as
// softmax_forward (no libm call; x[i] depends on x[i] alone); returns their sum, added in a
// fixed order for a given n. Runs on the calling thread.
float exp_scaled_shifted(float* x, int n, float scale, float shift);
// The largest of the n >= 1 floats at x (vectorised; no NaN expected).
float max_of(const float* x, int n);
// dlogits (B, C) += probs * (dprobs - sum_j probs_j * dprobs_j), row-wise.
void softmax_backward(std::span<const float> probs, std::span<const float> dprobs,
                      std::span<float> dlogits, int batch, int classes);

// Mixed precision: out[i] = float(in[i]) (exact). Vectorised, no rounding involved.
void bf16_widen(std::span<const BFloat16> in, std::span<float> out);
// Mixed precision: acc[i] = bf16(float(acc[i]) + add[i]), the sum rounded to nearest even
// exactly as BFloat16(float) does (NaN stays NaN). Vectorised, bitwise equal to the scalar.
void bf16_accumulate(std::span<BFloat16> acc, std::span<const float> add);

}  // namespace dtsim::model
