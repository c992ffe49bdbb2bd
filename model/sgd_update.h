// Plain SGD's elementwise update, p = p - lr * (g + weight_decay * p), written once for
// everything that applies it: Sgd::step with momentum 0 (optimizer.h) and a backward that
// applies it as each weight gradient is computed, without storing the gradient
// (sgemm_sgd in gemm.h, Layer::backward_sgd in layer.h). The build compiles with
// -ffp-contract=off, so each of the four operations rounds once, in this order, in scalar
// and in vector code alike: the same bits wherever it runs.
#pragma once

namespace dtsim::model {

struct SgdUpdate {
  float lr = 0;
  float weight_decay = 0;

  float apply(float p, float g) const { return p - lr * (g + weight_decay * p); }
};

}  // namespace dtsim::model
