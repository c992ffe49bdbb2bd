// Published large-scale runs to check the projection against: Narayanan et al. 2021,
// "Efficient Large-Scale Language Model Training on GPU Clusters Using Megatron-LM"
// (arXiv 2104.04473), Table 1: GPT models of 1.7B to 1T parameters on 32 to 3072 A100 80 GB
// GPUs (Selene), vocabulary 51,200, sequence 2048, with their tensor- and pipeline-parallel
// sizes, batch and achieved TFLOP/s per GPU. The paper counts FLOPs with activation
// recomputation (its equation 3: 96 B s l h^2 (1 + s / 6h + V / 16 l h)), which is what
// Projection::tflops_per_device counts under Recompute::kFull.
#pragma once

#include <vector>

#include "train/estimate/hardware.h"
#include "train/estimate/projection.h"

namespace dtsim::train::estimator {

struct PublishedRun {
  double billions;  // the paper's parameter count
  int heads, hidden, layers, tp, pp, gpus, batch;
  double tflops_per_gpu;  // published
};

const std::vector<PublishedRun>& narayanan_2021_table1();

// The projection's input for one published run on `hw`: 1F1B, full recomputation,
// micro-batch 1, dp = GPUs / (tp pp), the paper's shape (GPT-3 conventions).
ProjectionInput published_input(const PublishedRun& run, const Hardware& hw);

}  // namespace dtsim::train::estimator
