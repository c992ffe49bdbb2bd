// The flags of dtsim estimate, shared by its modes: the parameter-count estimate and its
// mesh (estimate.cc), and the architecture's projection, the published table and the
// calibration (estimate_model.cc).
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "train/estimate/hardware.h"

namespace dtsim::cli {

struct EstimateFlags {
  double params = 0;
  int ranks = 8, stage = -1;
  std::string precision = "bf16", optimizer = "adam";
  // The mesh (any of these given: estimate_mesh).
  int dp = 1, tp = 1, pp = 1, zero = 0, micro_batches = 1, virtual_stages = 1;
  std::string schedule = "1f1b";
  double activations = 0;
  // The architecture (--model or --preset given: the projection).
  std::string model, preset;
  int layers = 0, hidden = 0, heads = 0, kv_heads = 0, ffn = 0, vocab = 0, seq = 0;
  int dim = 16, experts = 4, top_k = 2;
  int micro_batch = 1, global_batch = 0, ep = 1, cp = 1;
  bool sequence_parallel = false, no_dropout = false;
  std::string recompute = "none", memory, hardware = "a100", algo = "ring";
  double peak_tflops = 0, efficiency = 0, intra_gbps = 0, inter_gbps = 0;
  double intra_latency_us = 0, inter_latency_us = 0;
  int devices_per_node = 0;
  bool published = false;
  std::string calibrate;
};

// The hardware --hardware names (a100, h100 or a hardware file), with the override flags
// applied; fail()s naming the flag or the file's field (estimate_hardware.cc).
train::estimator::Hardware hardware_from_flags(const CLI::App& app, const EstimateFlags& f);

// The architecture's projection (--model or --preset).
int run_model_estimate(const CLI::App& app, const EstimateFlags& f);
// Narayanan et al. 2021's Table 1 beside the projection (--published).
int run_published(const CLI::App& app, const EstimateFlags& f);
// Measures this machine and writes a hardware file (--calibrate FILE).
int run_calibrate(const CLI::App& app, const EstimateFlags& f);

}  // namespace dtsim::cli
