// MeshRank: one rank of a dp x tp x ep mesh without pipeline stages (ddp, zero1-3, tp, ep,
// dp-tp and every --dp --tp --ep --zero mesh): its model-parallel layers (parallelize.h) fed
// its replica's micro-batches, wrapped in the one data-parallel wrapper (DataParallel).
// Every rank of a tensor-parallel group computes the same loss: its rank 0 reports it.
// Context-parallel ranks take the same samples and different tokens: the wrapper syncs over
// dp x cp (Mesh::dp_cp) and each reports its tokens' mean loss / cp.
//
// Thread safety: one per rank, used only by that rank's thread.
#pragma once

#include <span>
#include <vector>

#include "train/accounting.h"
#include "train/config.h"
#include "train/data_parallel/data_parallel.h"
#include "train/expert_parallel/ep_moe_layer.h"
#include "train/mesh.h"
#include "train/parallelize.h"
#include "train/step_runner.h"
#include "train/trainee.h"

namespace dtsim::train {

template <class T>
class MeshRank : public RankStrategy {
 public:
  // parts: the placement's data-parallel parts of the trainee's buffer (ModelPlacement::dp_parts).
  MeshRank(const TrainConfig& config, Mesh& mesh, Trainee& trainee, StepRunner& runner,
           const DpParts& parts, std::span<T> params, std::span<T> grads)
      : trainee_(trainee),
        peak_(runner.peak()),
        cp_(mesh.shape().cp),
        dp_(DpContext{.config = &config,
                      .zero = zero_stage(config),
                      .dp = mesh.dp_cp(),
                      .expert_dp = mesh.shape().ep > 1 ? mesh.expert_dp() : nullptr,
                      .replicas = mesh.shape().dp_cp(),
                      .timeline = &runner.timeline(),
                      .observe = [this] { observe_memory(peak_); }},
            trainee.store().layout(), parts, params, grads) {
    micro_ = data_parallel_micro_batches(config, mesh.shape().dp, mesh.coord().dp);
    for (MicroBatch& mb : micro_) mb.reports_loss = mesh.coord().tp == 0;
  }

  std::vector<MicroBatch> micro_batches() const override { return micro_; }
  void before_micro_batch(int index) override {
    dp_.before_micro_batch(index, static_cast<int>(micro_.size()));
  }
  float forward_backward(int step, const MicroBatch& mb) override {
    return run_micro_batch(trainee_, step, mb, dp_.hooks()) / static_cast<float>(cp_);
  }
  void sync_gradients() override {
    finish_expert_gradients(trainee_.stack());  // expert parallelism's per-source partials
    dp_.sync_gradients();
  }
  void optimizer_step() override { dp_.optimizer_step(); }
  void sync_params() override { dp_.sync_params(); }
  void observe_memory(PeakMemory& peak) override {
    model::MemoryLedger state;
    for (int c = 0; c < model::kNumMemoryCategories; ++c) {
      const auto cat = static_cast<model::MemoryCategory>(c);
      state.add(cat, trainee_.memory().bytes(cat));
    }
    dp_.add_model_state(state, expert_partial_bytes(trainee_.stack()));
    peak.observe(state, trainee_.memory());
  }
  std::vector<float> final_params() override { return dp_.final_params(); }
  checkpoint::RankState checkpoint_state() override {
    return {.parts = {{&trainee_.store().layout(), &dp_}}};
  }

 private:
  Trainee& trainee_;
  PeakMemory& peak_;
  int cp_;  // each cp rank's loss is its tokens' mean over cp
  DataParallel<T> dp_;
  std::vector<MicroBatch> micro_;
};

}  // namespace dtsim::train
