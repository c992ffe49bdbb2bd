// dtsim train's flags: declared on the command, then turned into the TrainConfig they
// describe (the mesh, the model's own flags through its ModelSpec, presets resolved).
//
// Thread safety: none; called once on the main thread.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "train/checkpoint/options.h"
#include "train/config.h"

namespace dtsim::cli {

// What the command line sets; parse_train_config() turns it into a TrainConfig.
struct TrainFlags {
  std::string strategy = "ddp", model = "mlp", optimizer = "sgd", precision = "fp32";
  std::string algo = "auto", pitfall, report, trace, html;
  int ranks = 4, steps = 20, batch = 32, micro_batches = 1, dim = 16, hidden = 64, layers = 2;
  int experts = 4, top_k = 2, tp = 2, threads_per_process = 1;
  int heads = 2, head_dim = 0, seq = 12, vocab = 9;  // gpt
  int dp = 1, pp = 1, ep = 1, zero = 0, virtual_stages = 1;
  std::vector<int> stage_layers;
  std::string schedule = "1f1b", recompute = "none";
  double lr = 0.05;
  int64_t seed = 1;
  bool check = false, quiet = false, sequence_parallel = false;
  train::checkpoint::Options checkpoint;  // cli/checkpoint.cc
};

// Adds every flag of `dtsim train` to `app`, bound to `f`.
void declare_train_flags(CLI::App* app, TrainFlags& f);
// The configuration the parsed flags describe; exits 2 (fail()) on flags that contradict
// each other or the MPI job.
train::TrainConfig parse_train_config(const CLI::App& a, const TrainFlags& f);

}  // namespace dtsim::cli
