// Small models and helpers shared by the train tests: configs that train in milliseconds,
// the tolerances every comparison states, and the static memory of a rank.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <ostream>
#include <string>
#include <vector>

#include "model/memory.h"
#include "train/check.h"
#include "train/checkpoint/tools.h"
#include "train/config.h"
#include "train/data_parallel/data_parallel.h"
#include "train/mesh_shape.h"
#include "train/result.h"
#include "train/strategies.h"

namespace dtsim::train {

// ZeRO-3's shard sizes of a whole-replica layout over n ranks (DataParallel's segments: one
// per layer, padded to a multiple of n), for the tests' expected memory and traffic.
class Zero3Layout {
 public:
  Zero3Layout(const model::ParamLayout& layout, int n) : n_(n) {
    const int sizes[2] = {n, 1};
    segments_ = zero3_segments(layout, DpParts::whole(layout), sizes);
  }
  int num_layers() const { return static_cast<int>(segments_.size()); }
  size_t padded(int l) const { return segments_[l].shard * n_; }
  size_t shard_size() const {
    size_t n = 0;
    for (const Zero3Segment& s : segments_) n += s.shard;
    return n;
  }
  const std::vector<Zero3Segment>& segments() const { return segments_; }

 private:
  int n_;
  std::vector<Zero3Segment> segments_;
};

// The stated tolerances, from train/check.h (the one place that decides them): fp32 rtol
// 1e-5 atol 1e-6; bf16 two rounding steps, rtol 2/256 atol 2e-3.
inline const double kFp32Rtol = stated_tolerance(model::Precision::kFp32).rtol;
inline const double kFp32Atol = stated_tolerance(model::Precision::kFp32).atol;
inline const double kBf16Rtol = stated_tolerance(model::Precision::kMixedBf16).rtol;
inline const double kBf16Atol = stated_tolerance(model::Precision::kMixedBf16).atol;

// Every train test builds its configuration through make_config: the small shapes that
// train in milliseconds, and what a case varies, by name. Defaults give mlp_config().
struct ConfigSpec {
  Strategy strategy = Strategy::kSingle;
  ModelKind model = ModelKind::kMlp;
  int ranks = 1;
  int tp = 0;  // dp-tp's tensor-parallel width (tp: every rank; 0 leaves the default)
  int steps = 4;
  int batch = 48;
  int micro_batches = 1;
  model::OptimizerKind opt = model::OptimizerKind::kSgd;
  float lr = 0;  // 0: 0.05 for SGD, 0.01 for Adam
  model::Precision precision = model::Precision::kFp32;
  Algo algo = Algo::kAuto;
  int dim = 8;
  int hidden = 0;  // 0: 24 (mlp), 16 (moe d_ff)
  int layers = 2;
  int experts = 4;
  float capacity = 1.25f;
};

inline TrainConfig make_config(const ConfigSpec& s) {
  TrainConfig c;
  c.strategy = s.strategy;
  c.model = s.model;
  c.ranks = s.ranks;
  if (s.strategy == Strategy::kTp) c.widths.tp = s.ranks;
  if (s.tp > 0) c.widths.tp = s.tp;
  c.steps = s.steps;
  c.global_batch = s.batch;
  c.micro_batches = s.micro_batches;
  c.optimizer = s.opt;
  c.lr = s.lr != 0 ? s.lr : s.opt == model::OptimizerKind::kAdam ? 0.01f : 0.05f;
  c.precision = s.precision;
  c.algo = s.algo;
  c.mlp = {.input_dim = s.dim,
           .hidden_dim = s.hidden ? s.hidden : 24,
           .num_blocks = s.layers,
           .output_dim = 4};
  if (s.model == ModelKind::kMoe) {
    c.moe.input_dim = s.dim;
    c.moe.num_classes = 4;
    c.moe.moe = {.d_model = s.dim,
                 .d_ff = s.hidden ? s.hidden : 16,
                 .num_experts = s.experts,
                 .top_k = 2,
                 .capacity_factor = s.capacity,
                 .aux_alpha = 0.01f};
  }
  return c;
}

// The small GPT of the gpt_* tests (V 7, D 16, 4 heads of 4, 2 layers, F 32) with `seq`
// tokens per sample, global batch 8, `steps` SGD steps on the mesh `widths` (all its ranks).
inline TrainConfig small_gpt(int seq, const MeshShape& widths, int steps) {
  TrainConfig c = make_config({.strategy = Strategy::kMesh, .steps = steps});
  c.model = ModelKind::kGpt;
  c.gpt = {.vocab = 7,
           .seq_len = seq,
           .d_model = 16,
           .heads = 4,
           .head_dim = 4,
           .num_layers = 2,
           .mlp_hidden = 32};
  c.global_batch = 8;
  c.widths = widths;
  c.ranks = widths.world();
  return c;
}

inline TrainConfig mlp_config(Strategy s, int ranks) {
  return make_config({.strategy = s, .ranks = ranks});
}

inline TrainConfig moe_config(Strategy s, int ranks) {
  return make_config({.strategy = s, .model = ModelKind::kMoe, .ranks = ranks});
}

// Readable parts of parameterised test names: "adam", "bf16".
inline std::string opt_name(model::OptimizerKind k) {
  return k == model::OptimizerKind::kAdam ? "adam" : "sgd";
}
inline std::string precision_name(model::Precision p) {
  return p == model::Precision::kMixedBf16 ? "bf16" : "fp32";
}

inline TrainConfig with_adam(TrainConfig c) {
  c.optimizer = model::OptimizerKind::kAdam;
  c.lr = 0.01f;
  return c;
}

inline TrainConfig with_bf16(TrainConfig c) {
  c.precision = model::Precision::kMixedBf16;
  return c;
}

// Model-state bytes of one rank (every category but activations).
inline int64_t static_bytes(const RankReport& r) {
  int64_t sum = 0;
  for (int c = 0; c < model::kNumMemoryCategories; ++c) {
    if (c != static_cast<int>(model::MemoryCategory::kActivations)) sum += r.memory[c];
  }
  return sum;
}

inline int64_t category(const RankReport& r, model::MemoryCategory c) {
  return r.memory[static_cast<int>(c)];
}

inline std::ostream& operator<<(std::ostream& os, const Comparison& c) {
  return os << "bitwise " << c.bitwise_equal << ", max |dparam| " << c.max_abs_diff << ", max rel "
            << c.max_rel_diff << ", max |dloss| " << c.max_loss_diff;
}

inline std::ostream& operator<<(std::ostream& os, const CheckResult& r) {
  os << r.verdict_text << " (" << r.criterion << " vs " << r.reference_name << "; " << r.comparison;
  if (r.floor_measured) os << "; floor " << r.floor << ", loss floor " << r.loss_floor;
  return os << ")";
}

// Runs `config` and judges it as `dtsim train --check` does (train/check.h).
// The run records its parameters after every step, so the check runs in lockstep.
inline CheckResult run_and_check(TrainConfig config, RunResult* run_out = nullptr) {
  config.record_history = true;
  RunResult run = run_training(config);
  CheckResult r = check(config, run);
  if (run_out != nullptr) *run_out = std::move(run);
  return r;
}

// Calls of one collective kind per step on rank `rank`.
inline double calls_per_step(const RunResult& r, OpKind op, int rank = 0) {
  return static_cast<double>(r.ranks[rank].counters[op].calls) / r.steps;
}

// Runs `c` saving its checkpoint into `dir`, after the CLI's checks of --save.
inline RunResult save_run(TrainConfig c, const std::string& dir) {
  c.checkpoint.save_dir = dir;
  checkpoint::validate_save(c);
  return run_training(c);
}

// Runs `c` resumed from `dir`, which holds step `saved`: the CLI's checks of --resume first,
// unless the resume runs no step (a test's own way to load the saved parameters).
inline RunResult resume_run(TrainConfig c, const std::string& dir, int saved) {
  c.checkpoint.resume_dir = dir;
  if (c.steps > saved) checkpoint::validate_resume(c);
  return run_training(c);
}

inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace dtsim::train
