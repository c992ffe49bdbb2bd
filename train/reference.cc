// The references every strategy is checked against, on one rank and without communication.
//
// run_single: plain training on the whole global batch B per step: forward and backward
// with grad_scale 1/B (the gradient of the mean loss), writing the gradients (bitwise
// zero_grad then backward), one optimizer step.
//
// run_accum: single-rank gradient accumulation arranged exactly as data-parallel training
// with R = config.ranks ranks and M = config.micro_batches micro-batches per rank would
// arrange it. The global batch is cut into R groups of M micro-batches of B/(R*M) samples;
// group g's micro-batches are accumulated with grad_scale 1/(B/R) (the mean over the group,
// as a DDP rank computes it; the first writes the gradients, bitwise accumulating into
// zeroed ones), the group gradients are summed in group
// order (fp32, or bf16 rounded after each add, as the runtime's deterministic reduction
// does), then divided by R. With R = 1 this is textbook accumulation over M micro-batches.
// DDP under Algo::kDeterministic does the same float operations in the same order, so the
// two are bitwise equal. For MoE this is also the exact reference for every data-parallel
// run: the aux loss and expert capacity depend on which tokens are batched together, so only
// a reference with the same per-rank micro-batches sees the same routing. With
// config.reverse_accumulation the groups (and each group's micro-batches) are visited last
// to first: the same micro-batches and routing, only the order of the sums differs.
#include <memory>
#include <type_traits>
#include <vector>

#include "model/check.h"
#include "train/accounting.h"
#include "train/checkpoint/rank_state.h"
#include "train/grad_ops.h"
#include "train/launch.h"
#include "train/slice_optimizer.h"
#include "train/strategies.h"
#include "train/trainee.h"

namespace dtsim::train {
namespace {

// What both references share: one model, its optimizer over everything, phase hooks; for
// --save and --resume, the whole model as one part whose optimizer runs over all of it.
template <class T>
class SoloRank : public RankStrategy, public checkpoint::StateAccess {
 public:
  // `sgd_in_backward`: with plain SGD on a stack that fuses it, the update runs inside each
  // backward (which must then write, not accumulate, the gradients) and optimizer_step
  // does nothing.
  SoloRank(const TrainConfig& config, Trainee& trainee, StepRunner& runner, std::span<T> params,
           std::span<T> grads, bool sgd_in_backward = false)
      : trainee_(trainee),
        params_(params),
        grads_(grads),
        opt_(make_slice_optimizer(config, params, &trainee.memory())),
        hooks_(&runner.timeline()),
        lockstep_(config.precision == model::Precision::kFp32 ? config.lockstep : nullptr),
        steps_(config.steps) {
    if (sgd_in_backward && opt_->plain_sgd() != nullptr && trainee.stack().fuses_sgd()) {
      fused_sgd_ = opt_->plain_sgd();
    }
  }

  float forward_backward(int step, const MicroBatch& mb) override {
    if (fused_sgd_ == nullptr) return run_micro_batch(trainee_, step, mb, hooks_);
    DTSIM_CHECK(mb.write_grads);
    const float loss = trainee_.forward_backward_sgd(step, mb.first, mb.size, mb.grad_scale,
                                                     &hooks_, fused_sgd_->plain_update());
    hooks_.finish();
    return loss;
  }
  void optimizer_step() override {
    if (fused_sgd_ == nullptr) opt_->step(params_, grads_);
  }
  void observe_memory(PeakMemory& peak) override { peak.observe(trainee_.memory()); }
  std::vector<float> final_params() override { return trainee_.store().params_as_float(); }
  std::vector<float> step_sizes() override { return opt_->step_sizes(); }
  // Lockstep: step s starts from the parameters the checked run had after step s - 1. The
  // run's history holds its last steps (a resumed run's from its first, which starts, like
  // this reference, from the checkpoint's parameters): after step s - 1 is at index
  // size - (steps - s) - 1.
  void before_step(int step) override {
    if (lockstep_ == nullptr) return;
    const int64_t at = static_cast<int64_t>(lockstep_->size()) - (steps_ - step) - 1;
    if (at < 0) return;
    const std::vector<float>& from = lockstep_->at(static_cast<size_t>(at));
    DTSIM_CHECK(from.size() == params_.size());
    for (size_t i = 0; i < from.size(); ++i) params_[i] = narrow<T>(from[i]);
  }
  checkpoint::RankState checkpoint_state() override {
    return {.parts = {{&trainee_.store().layout(), this}}};
  }
  std::vector<checkpoint::OptimizerRun> optimizer_runs() override {
    return {{.opt = opt_.get(), .at = 0, .local = 0, .count = params_.size(), .writer = true}};
  }
  std::vector<float> params() const override {
    std::vector<float> out(params_.size());
    for (size_t i = 0; i < out.size(); ++i) out[i] = widen(params_[i]);
    return out;
  }
  void load_params(std::span<const float> local) override {
    DTSIM_CHECK(local.size() == params_.size());
    for (size_t i = 0; i < local.size(); ++i) params_[i] = narrow<T>(local[i]);
  }
  bool keeps_all_params() const override { return true; }
  std::span<float> fp32_params(size_t begin, size_t count) override {
    if constexpr (std::is_same_v<T, float>) return params_.subspan(begin, count);
    return {};
  }

 protected:
  Trainee& trainee_;
  std::span<T> params_, grads_;

 private:
  std::unique_ptr<SliceOptimizer> opt_;
  PhaseHooks hooks_;
  const model::Sgd* fused_sgd_ = nullptr;  // SGD applied inside backward
  const std::vector<std::vector<float>>* lockstep_;
  int steps_;
};

// run_single: the whole global batch as one micro-batch.
template <class T>
class SingleRank : public SoloRank<T> {
 public:
  SingleRank(const TrainConfig& config, Trainee& trainee, StepRunner& runner, std::span<T> params,
             std::span<T> grads)
      : SoloRank<T>(config, trainee, runner, params, grads, config.sgd_in_backward),
        batch_(config.global_batch) {}
  std::vector<MicroBatch> micro_batches() const override {
    return {{.first = 0,
             .size = batch_,
             .grad_scale = 1.0f / static_cast<float>(batch_),
             .write_grads = true}};
  }

 private:
  int batch_;
};

// run_accum: groups x micro-batches; each group's first micro-batch writes the gradients and
// the rest accumulate, the group gradients are summed in group order into `sum_`, then
// divided by the number of groups.
template <class T>
class AccumRank : public SoloRank<T> {
 public:
  AccumRank(const TrainConfig& config, Trainee& trainee, StepRunner& runner, std::span<T> params,
            std::span<T> grads)
      : SoloRank<T>(config, trainee, runner, params, grads),
        groups_(config.ranks),
        micro_(config.micro_batches),
        sum_(grads.size()) {
    const int size = config.global_batch / (groups_ * micro_);
    const float scale = 1.0f / static_cast<float>(micro_ * size);
    for (int i = 0; i < groups_; ++i) {
      const int g = config.reverse_accumulation ? groups_ - 1 - i : i;
      for (int j = 0; j < micro_; ++j) {
        const int m = config.reverse_accumulation ? micro_ - 1 - j : j;
        batches_.push_back({.first = (g * micro_ + m) * size,
                            .size = size,
                            .grad_scale = scale,
                            .loss_slot = g,
                            .write_grads = j == 0});  // a group starts
      }
    }
  }

  std::vector<MicroBatch> micro_batches() const override { return batches_; }
  void after_micro_batch(int index) override {
    if (index % micro_ != micro_ - 1) return;  // the group's last micro-batch
    if (index / micro_ == 0) {
      std::copy(this->grads_.begin(), this->grads_.end(), sum_.begin());
    } else {
      add_into(std::span<T>(sum_), std::span<const T>(this->grads_));
    }
  }
  void sync_gradients() override {
    std::copy(sum_.begin(), sum_.end(), this->grads_.begin());
    divide(this->grads_, groups_);
  }

 private:
  int groups_, micro_;
  std::vector<T> sum_;
  std::vector<MicroBatch> batches_;
};

template <template <class> class Rank>
RunResult run_solo(const TrainConfig& config, int loss_slots) {
  StepRunner runner(config, nullptr, loss_slots);
  Trainee trainee(config);
  run_rank<Rank>(runner, trainee, config, trainee, runner);
  return solo_result(config, runner.take_outcome());
}

}  // namespace

RunResult run_single(const TrainConfig& config) { return run_solo<SingleRank>(config, 1); }

RunResult run_accum(const TrainConfig& config) { return run_solo<AccumRank>(config, config.ranks); }

}  // namespace dtsim::train
