// What a rank of a (dp, tp) or (dp, ep) mesh strategy holds whatever its model parallelism:
// its config, mesh, Trainee, timeline, phase hooks and parameter/gradient views, and the
// data-parallel parts of a step (its replica's micro-batches, fed with gradients that carry
// 1/B so that sums over dp are global means, the first writing the gradients; forward and
// backward with the phase hooks). TpRank (tensor_parallel.cc) and EpRank (expert_parallel.cc)
// derive from it. Thread safety: one per rank, used only by that rank's thread.
#pragma once

#include <span>
#include <vector>

#include "train/accounting.h"
#include "train/config.h"
#include "train/mesh.h"
#include "train/step_runner.h"
#include "train/trainee.h"

namespace dtsim::train {

template <class T>
class MeshRank : public RankStrategy {
 public:
  MeshRank(const TrainConfig& config, Mesh& mesh, Trainee& trainee, StepRunner& runner,
           std::span<T> params, std::span<T> grads)
      : config_(config),
        mesh_(mesh),
        trainee_(trainee),
        timeline_(runner.timeline()),
        hooks_(&runner.timeline()),
        params_(params),
        grads_(grads) {}

  // Replica d takes data-parallel rank d's samples; gradients carry 1/B (the global mean);
  // micro-batch 0 writes them.
  std::vector<MicroBatch> micro_batches() const override {
    return data_parallel_micro_batches(config_, mesh_.shape().dp, mesh_.coord().dp,
                                       1.0f / static_cast<float>(config_.global_batch));
  }
  float forward_backward(int step, const MicroBatch& mb) override {
    return run_micro_batch(trainee_, step, mb, hooks_);
  }
  std::vector<float> final_params() override { return trainee_.store().params_as_float(); }

 protected:
  const TrainConfig& config_;
  Mesh& mesh_;
  Trainee& trainee_;
  RankTimeline& timeline_;
  PhaseHooks hooks_;
  std::span<T> params_, grads_;
};

}  // namespace dtsim::train
