// Expert parallelism for the MoE classifier (GShard, Lepikhin et al. 2020; Switch
// Transformer, Fedus et al. 2021).
//
// The E experts are sharded over the N ranks (rank r owns experts [r E/N, (r+1) E/N)); the
// embedding, the router and the head are replicated. Each rank takes its own B/N samples
// (data parallel over the token batch), embeds them and routes its own tokens with its copy of
// the router (top-k, then capacity ceil(factor * T_local * k / E) over the tokens routed
// together on that rank). Forward: an all_to_all of the per-expert row counts gives every rank
// the split sizes, one all_to_all_single sends each token to the rank of its expert, the
// experts run where they live, a second all_to_all_single brings the outputs back, the token
// order is restored and the gate-weighted sum (plus the residual) is taken. Backward mirrors
// it with two all_to_all_singles (output gradients out, input gradients back); the router,
// gate and aux-loss backward stay local. Each expert's gradient is complete on its owner (it
// saw every rank's tokens); the replicated embed, head and router gradients differ per rank
// and are summed by one all_reduce over the contiguous replicated prefix of the local flat
// buffer. Every gradient carries 1/B, so the sums are the global mean and nothing is divided.
// A step costs 5 all_to_alls (counts, 2 forward, 2 backward) per micro-batch and 1 all_reduce.
//
// Routing (which tokens share a capacity budget and an aux loss) depends on the batch a rank
// routes, so the single-rank reference is run_accum with the same ranks and micro-batches:
// it routes exactly the same per-rank micro-batches, one at a time.
#include <memory>
#include <string>
#include <vector>

#include "model/data.h"
#include "model/kernels.h"
#include "train/ep_moe.h"
#include "train/grad_ops.h"
#include "train/launch.h"
#include "train/slice_optimizer.h"
#include "train/strategies.h"
#include "train/trainee.h"

namespace dtsim::train {
namespace {

using model::MemoryCategory;
using model::TrackedBuffer;

// Local layout: layer 0 embed, layer 1 head, layer 2 router then this rank's experts, so the
// replicated tensors (embed, head, router) form one prefix [0, replicated_size()).
model::ParamLayout ep_layout(const model::MoeModelConfig& c, int first, int count) {
  const model::MoeConfig& m = c.moe;
  model::ParamLayout layout;
  layout.begin_layer("embed");
  layout.add("embed.w", m.d_model, c.input_dim);
  layout.add("embed.b", m.d_model, 1);
  layout.begin_layer("head");
  layout.add("head.w", c.num_classes, m.d_model);
  layout.add("head.b", c.num_classes, 1);
  layout.begin_layer("moe");
  layout.add("moe.router", m.num_experts, m.d_model);
  for (int e = first; e < first + count; ++e) {
    const std::string p = "moe.expert" + std::to_string(e);
    layout.add(p + ".w1", m.d_ff, m.d_model);
    layout.add(p + ".b1", m.d_ff, 1);
    layout.add(p + ".w2", m.d_model, m.d_ff);
    layout.add(p + ".b2", m.d_model, 1);
  }
  return layout;
}

// One rank's MoE classifier: replicated embed/router/head around an EpMoeLayer.
class EpMoeModel {
 public:
  static constexpr int kEmbed = 0, kHead = 1, kMoe = 2;

  EpMoeModel(const model::MoeModelConfig& c, int rank, int ranks, model::Precision precision)
      : config_(c),
        layer_(c.moe, rank, ranks),
        store_(ep_layout(c, layer_.first_expert(), layer_.local_experts()), precision, &ledger_) {}

  model::ParamStore& store() { return store_; }
  model::MemoryLedger& memory() { return ledger_; }

  // Loads this rank's tensors of a full moe_model_layout() parameter vector, by name.
  void load_full(std::span<const float> full) {
    const model::ParamLayout full_layout = model::moe_model_layout(config_);
    std::vector<float> mine(store_.size());
    for (const model::ParamView& v : store_.layout().views()) {
      std::copy_n(full.begin() + full_layout.view(v.name).offset, v.size(),
                  mine.begin() + v.offset);
    }
    store_.set_params(mine);
  }

  size_t replicated_size() const {
    return store_.layout().layer_range(kMoe).begin + model::moe_router_size(config_.moe);
  }

  // Gradients accumulate grad_scale * d(sum CE + B * aux), as MoeModel's.
  float forward_backward(std::span<const float> x, std::span<const int32_t> labels, int batch,
                         float grad_scale, TracedComm& ep) {
    const int Din = config_.input_dim, D = config_.moe.d_model, C = config_.num_classes;
    const size_t rs = model::moe_router_size(config_.moe);
    ensure_batch(batch);
    ep.timeline().open("forward");
    std::span<const float> pe = store_.layer_params(kEmbed);
    model::linear_forward(x, pe.first(size_t(D) * Din), pe.subspan(size_t(D) * Din, D), z_.span(),
                          batch, Din, D);
    std::span<const float> pm = store_.layer_params(kMoe);
    layer_.forward(pm.first(rs), pm.subspan(rs), z_.span(), batch, h_.span(), ep);
    ledger_.add(MemoryCategory::kActivations, int64_t(layer_.activation_bytes()) - layer_bytes_);
    layer_bytes_ = int64_t(layer_.activation_bytes());
    std::span<const float> ph = store_.layer_params(kHead);
    model::linear_forward(h_.span(), ph.first(size_t(C) * D), ph.subspan(size_t(C) * D, C),
                          logits_.span(), batch, D, C);
    const float loss =
        model::softmax_cross_entropy_forward(logits_.span(), labels, probs_.span(), batch, C);
    ep.timeline().close();

    ep.timeline().open("backward");
    std::fill(dlogits_.data(), dlogits_.data() + dlogits_.size(), 0.0f);
    model::softmax_cross_entropy_backward(probs_.span(), labels, batch, C, grad_scale,
                                          dlogits_.span());
    {
      std::span<const float> p = store_.layer_params(kHead);
      std::span<float> g = store_.begin_layer_grads(kHead);
      std::fill(dh_.data(), dh_.data() + dh_.size(), 0.0f);
      model::linear_backward(dlogits_.span(), h_.span(), p.first(size_t(C) * D), dh_.span(),
                             g.first(size_t(C) * D), g.subspan(size_t(C) * D, C), batch, D, C);
      store_.end_layer_grads(kHead);
    }
    {
      std::span<const float> p = store_.layer_params(kMoe);
      std::span<float> g = store_.begin_layer_grads(kMoe);
      std::fill(dz_.data(), dz_.data() + dz_.size(), 0.0f);
      layer_.backward(p.first(rs), p.subspan(rs), dh_.span(), grad_scale * float(batch),
                      g.first(rs), g.subspan(rs), dz_.span(), ep);
      store_.end_layer_grads(kMoe);
    }
    {
      std::span<const float> p = store_.layer_params(kEmbed);
      std::span<float> g = store_.begin_layer_grads(kEmbed);
      model::linear_backward(dz_.span(), x, p.first(size_t(D) * Din), {}, g.first(size_t(D) * Din),
                             g.subspan(size_t(D) * Din, D), batch, Din, D);
      store_.end_layer_grads(kEmbed);
    }
    ep.timeline().close();
    return loss;
  }

 private:
  void ensure_batch(int batch) {
    if (batch == batch_) return;
    batch_ = batch;
    const size_t b = batch, D = config_.moe.d_model, C = config_.num_classes;
    auto make = [&](size_t n) {
      return TrackedBuffer<float>(&ledger_, MemoryCategory::kActivations, n);
    };
    z_ = make(b * D);
    h_ = make(b * D);
    logits_ = make(b * C);
    probs_ = make(b * C);
    dlogits_ = make(b * C);
    dh_ = make(b * D);
    dz_ = make(b * D);
  }

  model::MoeModelConfig config_;
  EpMoeLayer layer_;
  model::MemoryLedger ledger_;
  model::ParamStore store_;
  int batch_ = 0;
  int64_t layer_bytes_ = 0;
  TrackedBuffer<float> z_, h_;           // (B, D) embedding, MoE output
  TrackedBuffer<float> logits_, probs_;  // (B, C)
  TrackedBuffer<float> dlogits_;         // (B, C)
  TrackedBuffer<float> dh_, dz_;         // (B, D)
};

// Full moe_model_layout() params from every rank's local vector; replicated tensors must be
// bitwise identical on every rank.
std::vector<float> gather_params(const TrainConfig& config,
                                 const std::vector<std::vector<float>>& local) {
  const model::ParamLayout full = model::moe_model_layout(config.moe);
  const int n = static_cast<int>(local.size());
  const int per_rank = config.moe.moe.num_experts / n;
  std::vector<float> out(full.size());
  std::vector<bool> written(full.size(), false);
  for (int r = 0; r < n; ++r) {
    const model::ParamLayout mine = ep_layout(config.moe, r * per_rank, per_rank);
    for (const model::ParamView& v : mine.views()) {
      const model::ParamView& f = full.view(v.name);
      auto src = local[r].begin() + v.offset;
      if (written[f.offset] && !std::equal(src, src + v.size(), out.begin() + f.offset)) {
        throw Error("expert parallel: rank " + std::to_string(r) + "'s copy of " + v.name +
                    " diverged from rank 0's; replicated gradients must be all-reduced");
      }
      std::copy_n(src, v.size(), out.begin() + f.offset);
      written[f.offset] = true;
    }
  }
  return out;
}

// One expert-parallel rank: its experts and the replicated rest, fed its B/N samples.
template <class T>
class EpRank : public RankStrategy {
 public:
  EpRank(const TrainConfig& config, Communicator& comm, EpMoeModel& model, StepRunner& runner,
         std::span<T> params, std::span<T> grads)
      : config_(config),
        comm_(comm),
        model_(model),
        ep_(comm, runner.timeline(), config.algo),
        task_(config.moe.input_dim, config.moe.num_classes, task_seed(config)),
        params_(params),
        grads_(grads),
        opt_(make_slice_optimizer(config, params, &model.memory())) {}

  // Data parallel over the token batch; gradients carry 1/B, so sums are global means.
  std::vector<MicroBatch> micro_batches() const override {
    return data_parallel_micro_batches(config_, comm_.size(), comm_.rank(),
                                       1.0f / static_cast<float>(config_.global_batch));
  }
  void begin_step() override { model_.store().zero_grad(); }
  float forward_backward(int step, const MicroBatch& mb) override {
    x_.resize(size_t(mb.size) * config_.moe.input_dim);
    labels_.resize(mb.size);
    task_.batch(step, mb.first, mb.size, x_, labels_);
    return model_.forward_backward(x_, labels_, mb.size, mb.grad_scale, ep_);
  }
  // The replicated embed, head and router saw different tokens on every rank.
  void sync_gradients() override { ep_.all_reduce(grads_.first(model_.replicated_size())); }
  void optimizer_step() override { opt_->step(params_, grads_); }
  void observe_memory(PeakMemory& peak) override { peak.observe(model_.memory()); }
  std::vector<float> final_params() override { return model_.store().params_as_float(); }

 private:
  const TrainConfig& config_;
  Communicator& comm_;
  EpMoeModel& model_;
  TracedComm ep_;
  const model::ClassificationTask task_;
  std::vector<float> x_;
  std::vector<int32_t> labels_;
  std::span<T> params_, grads_;
  std::unique_ptr<SliceOptimizer> opt_;
};

}  // namespace

std::optional<RunResult> run_ep(const TrainConfig& config) {
  const std::vector<float> init =
      model::init_params(model::moe_model_layout(config.moe), config.seed);  // MoeModel's bits
  return launch(
      config,
      [&](Communicator& comm, StepRunner& runner) {
        EpMoeModel model(config.moe, comm.rank(), comm.size(), config.precision);
        model.load_full(init);
        with_buffers(model.store(), [&](auto params, auto grads) {
          using T = typename decltype(grads)::value_type;
          EpRank<T> rank(config, comm, model, runner, params, grads);
          runner.run(rank);
        });
      },
      [&](std::vector<std::vector<float>>& parts) { return gather_params(config, parts); });
}

}  // namespace dtsim::train
