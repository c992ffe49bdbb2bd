#include "train/pipeline_parallel/pipeline_parallel.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <utility>
#include <vector>

#include "model/layer_stack.h"
#include "model/mlp.h"
#include "train/accounting.h"
#include "train/data_parallel/zero3_hooks.h"
#include "train/expert_parallel/ep_moe_layer.h"
#include "train/expert_parallel/ep_zero.h"
#include "train/grad_ops.h"
#include "train/launch.h"
#include "train/mesh.h"
#include "train/pipeline_parallel/pipeline_stage.h"
#include "train/pipeline_parallel/schedule_check.h"
#include "train/slice_optimizer.h"
#include "train/step_runner.h"
#include "train/strategies.h"
#include "train/tensor_parallel/tp_mlp_block.h"
#include "train/traced_comm.h"
#include "train/trainee.h"

namespace dtsim::train::pipeline {
namespace {

// A chunk's LayerStack as the executor drives it.
class LayerStackChunk : public StageChunk {
 public:
  explicit LayerStackChunk(model::LayerStack& stack) : stack_(stack) {}
  int in_dim() const override { return stack_.in_dim(); }
  int out_dim() const override { return stack_.out_dim(); }
  std::span<const float> forward(int pass, std::span<const float> x, int batch) override {
    return stack_.forward(pass, x, batch);
  }
  std::span<const float> backward(int pass, std::span<float> dy, int batch, float grad_scale,
                                  bool input_grad, bool write_grads) override {
    return stack_.backward(pass, dy, {grad_scale, batch, write_grads}, nullptr, input_grad);
  }
  bool splits_backward() const override { return stack_.splits_backward(); }
  std::span<const float> backward_input(int pass, std::span<float> dy, int batch, float grad_scale,
                                        bool input_grad) override {
    return stack_.backward_input(pass, dy, {grad_scale, batch}, input_grad);
  }
  void backward_weight(int pass, int batch, float grad_scale, bool write_grads) override {
    stack_.backward_weight(pass, {grad_scale, batch, write_grads});
  }

 private:
  model::LayerStack& stack_;
};

// Where a rank sits on the model-parallel axes inside its stage: its tensor-parallel rank
// (blocks split Megatron-style) and expert-parallel rank (MoE experts sharded), with the
// groups their layers talk on (null for the layout only).
struct ChunkParallel {
  int tp_rank = 0, tp_size = 1;
  TracedComm* tp = nullptr;
  int ep_rank = 0, ep_size = 1;
  TracedComm* ep = nullptr;
};

// Chunk `chunk`'s layers on the rank `at`.
model::Layers layers_of_chunk(const TrainConfig& config, const ScheduleSpec& spec, int chunk,
                              const ChunkParallel& at = {}) {
  const auto [first, last] = chunk_layers(config, spec, chunk);
  model::Layers all;
  if (config.model == ModelKind::kMoe) {
    all = at.ep_size == 1 ? model::moe_model_layers(config.moe)
                          : ep_moe_model_layers(config.moe, at.ep_rank, at.ep_size, at.ep,
                                                {config.precision, config.micro_batches});
  } else if (at.tp_size == 1) {
    return model::mlp_layers(config.mlp, first, last);
  } else {
    all = tp_mlp_layers(config.mlp, at.tp_rank, at.tp_size, at.tp);
  }
  return model::Layers(std::make_move_iterator(all.begin() + first),
                       std::make_move_iterator(all.begin() + last));
}

// The parameters stage s holds, chunk after chunk (for assembling the result).
model::ParamLayout stage_layout(const TrainConfig& config, const ScheduleSpec& spec, int stage,
                                const ChunkParallel& at) {
  model::Layers all;
  for (int c = stage; c < spec.stages * spec.virtual_stages; c += spec.stages) {
    for (auto& l : layers_of_chunk(config, spec, c, at)) all.push_back(std::move(l));
  }
  return model::layout_of(all);
}

// One rank: stage s of replica d. Its step is one MicroBatch for the runner (the replica's
// M micro-batches, which the schedule orders); only the last stage reports the loss.
template <class T>
class PipelineRank : public RankStrategy {
 public:
  PipelineRank(const TrainConfig& config, const ScheduleSpec& spec, const PipelineGroups& groups,
               bool reports_loss, StepRunner& runner, std::vector<std::unique_ptr<Trainee>>& chunks,
               int zero_stage)
      : config_(config),
        spec_(spec),
        dp_(groups.dp),
        expert_dp_(groups.expert_dp),
        chunks_(chunks),
        micro_(data_parallel_micro_batches(config, dp_ ? dp_->size() : 1, dp_ ? dp_->rank() : 0)),
        timeline_(&runner.timeline()),
        zero_stage_(zero_stage) {
    std::vector<StageChunk*> views;
    ep_zero_.reserve(2 * chunks_.size());
    for (auto& t : chunks_) {
      adapters_.push_back(std::make_unique<LayerStackChunk>(t->stack()));
      views.push_back(adapters_.back().get());
      with_buffers(t->store(), [&](auto params, auto grads) {
        if constexpr (std::is_same_v<typename decltype(params)::value_type, T>) {
          params_.push_back(params);
          grads_.push_back(grads);
          if (groups.ep != nullptr && zero_stage >= 1 && dp_ != nullptr) {
            // ZeRO along dp x ep (ep_zero.h): replicated tensors over dp, experts over
            // expert_dp, divided by dp as the stage's replicas' means.
            const EpParamSplit split = ep_param_split(t->store().layout(), config.moe.moe);
            shards_.push_back({0, params.size()});  // ZeRO-2's count is the parts'
            ep_zero_.emplace_back(config, dp_, split.replicated, params, &t->memory(), dp_->size());
            ep_zero_.emplace_back(config, expert_dp_, split.experts, params, &t->memory(),
                                  dp_->size());
            return;
          }
          // ZeRO-1: this dp rank's shard of the chunk's optimizer state only.
          const model::ParamRange mine =
              zero_stage >= 1 && dp_ ? model::shard_range(params.size(), dp_->size(), dp_->rank())
                                     : model::ParamRange{0, params.size()};
          shards_.push_back(mine);
          opts_.push_back(
              make_slice_optimizer(config, params.subspan(mine.begin, mine.size()), &t->memory()));
        }
      });
      if (groups.ep != nullptr)
        split_.push_back(ep_param_split(t->store().layout(), config.moe.moe));
    }
    Communicator* pipe = groups.pipe;
    const int stage = pipe ? pipe->rank() : 0;
    stage_ = std::make_unique<PipelineStage>(make_schedule(spec), stage, views, pipe, &buffers_,
                                             &runner.timeline());
    // The last stage computes the loss; of a tensor-parallel group, its rank 0 reports it.
    const bool last_stage = stage == (spec.stages * spec.virtual_stages - 1) % spec.stages;
    for (MicroBatch& mb : micro_) {
      mb.reports_loss = last_stage && reports_loss;
      mbs_.push_back({mb.size, mb.grad_scale});
    }
  }

  // The replica's M micro-batches, run in the schedule's order by run_micro_batches; each
  // chunk's first weight-gradient action writes its gradients (PipelineStage::run).
  std::vector<MicroBatch> micro_batches() const override { return micro_; }
  float forward_backward(int, const MicroBatch&) override {
    throw std::logic_error("PipelineRank runs its micro-batches in run_micro_batches");
  }
  bool run_micro_batches(int step, const std::vector<MicroBatch>& /*mbs*/,
                         std::vector<float>* losses) override {
    Trainee& first = *chunks_.front();
    Trainee& last = *chunks_.back();
    StageData data;
    data.inputs = [&](int i) { return first.load_batch(step, micro_[i].first, micro_[i].size); };
    data.loss = [&](int i, std::span<const float> y, std::span<float> dy) {
      last.load_batch(step, micro_[i].first, micro_[i].size);
      return last.loss().forward_backward(y, last.targets(), micro_[i].size, micro_[i].grad_scale,
                                          dy);
    };
    stage_->run(mbs_, data, losses);
    return true;
  }
  // Plain data parallelism all-reduces each chunk's gradients over the stage's dp group;
  // ZeRO-1 reduce-scatters them (the shard's sum lands in its slice of the buffer).
  void sync_gradients() override {
    // Under --ep: each expert's gradient completed from its sources, in their order.
    for (auto& t : chunks_) finish_expert_gradients(t->stack());
    if (dp_ == nullptr || dp_->size() == 1) return;
    Communicator& dp = *dp_;
    for (size_t j = 0; j < grads_.size(); ++j) {
      std::span<T> g = grads_[j];
      if (!ep_zero_.empty()) {
        for (int part : {0, 1}) ep_zero_[2 * j + part].sync_gradients(g, *timeline_);
        continue;
      }
      if (!split_.empty()) {
        sync_expert_parallel(g, split_[j]);
        continue;
      }
      if (zero_stage_ == 0) {
        timeline_->collective("all_reduce", dp,
                              [&] { dp.all_reduce(g, ReduceOp::kSum, config_.algo); });
        divide(g, dp.size());
        continue;
      }
      shard_sum_.resize(shards_[j].size());
      timeline_->collective("reduce_scatter", dp, [&] {
        dp.reduce_scatter(std::span<const T>(g), std::span<T>(shard_sum_), ReduceOp::kSum,
                          reduce_scatter_algo(config_.algo));
      });
      std::span<T> mine = g.subspan(shards_[j].begin, shards_[j].size());
      std::copy(shard_sum_.begin(), shard_sum_.end(), mine.begin());
      divide(mine, dp.size());
    }
  }
  // Expert parallelism inside the stage: the replicated tensors (embed, head, routers) are
  // summed over dp, each expert's gradient (complete over its expert group's tokens) over the
  // expert_dp ranks that hold the same experts; then all of it is divided by dp.
  void sync_expert_parallel(std::span<T> g, const EpParamSplit& split) {
    packed_.clear();
    for (const model::ParamRange& r : split.replicated) {
      packed_.insert(packed_.end(), g.begin() + r.begin, g.begin() + r.end);
    }
    timeline_->collective("all_reduce", *dp_, [&] {
      dp_->all_reduce(std::span<T>(packed_), ReduceOp::kSum, config_.algo);
    });
    size_t at = 0;
    for (const model::ParamRange& r : split.replicated) {
      std::copy_n(packed_.begin() + at, r.size(), g.begin() + r.begin);
      at += r.size();
    }
    for (const model::ParamRange& r : split.experts) {
      if (expert_dp_ == nullptr) break;
      timeline_->collective("all_reduce", *expert_dp_, [&] {
        expert_dp_->all_reduce(g.subspan(r.begin, r.size()), ReduceOp::kSum, config_.algo);
      });
    }
    divide(g, dp_->size());
  }
  void optimizer_step() override {
    for (size_t j = 0; j < opts_.size(); ++j) {
      const model::ParamRange r = shards_[j];
      opts_[j]->step(params_[j].subspan(r.begin, r.size()), grads_[j].subspan(r.begin, r.size()));
    }
    for (EpZeroPart<T>& part : ep_zero_) part.optimizer_step();
  }
  // ZeRO-1: the updated shards travel back to every dp rank of the stage.
  void sync_params() override {
    if (zero_stage_ == 0 || dp_ == nullptr || dp_->size() == 1) return;
    for (size_t j = 0; j < ep_zero_.size(); ++j) {
      ep_zero_[j].sync_params(params_[j / 2], *timeline_);
    }
    for (size_t j = 0; j < opts_.size(); ++j) {
      const model::ParamRange r = shards_[j];
      timeline_->collective("all_gather", *dp_, [&] {
        dp_->all_gather(std::span<const T>(params_[j].subspan(r.begin, r.size())), params_[j],
                        all_gather_algo(config_.algo));
      });
    }
  }
  void observe_memory(PeakMemory& peak) override {
    model::MemoryLedger all;
    for (int c = 0; c < model::kNumMemoryCategories; ++c) {
      const auto cat = static_cast<model::MemoryCategory>(c);
      int64_t bytes = buffers_.bytes(cat);
      for (auto& t : chunks_) {  // activations: each chunk's peak (recomputation frees states)
        const bool activation = cat == model::MemoryCategory::kActivations;
        bytes += activation ? t->memory().peak_bytes(cat) : t->memory().bytes(cat);
      }
      all.add(cat, bytes);
    }
    if (zero_stage_ == 2 && dp_ != nullptr) {
      // ZeRO-2 holds its shard's summed gradient; the buffer the micro-batches accumulate
      // into is not counted, as for zero2 over the world (zero.cc).
      for (size_t j = 0; j < grads_.size(); ++j) {
        const int64_t full = static_cast<int64_t>(grads_[j].size() * sizeof(T));
        const int64_t shard = static_cast<int64_t>(shards_[j].size() * sizeof(T));
        all.add(model::MemoryCategory::kGradients, shard - full);
      }
      for (const EpZeroPart<T>& part : ep_zero_) {
        all.add(model::MemoryCategory::kGradients,
                -static_cast<int64_t>((part.size() - part.shard_size()) * sizeof(T)));
      }
      for (auto& t : chunks_) {
        all.add(model::MemoryCategory::kGradients, -expert_partial_bytes(t->stack()));
      }
    }
    peak.observe(all);
  }
  std::vector<float> final_params() override {
    std::vector<float> out;
    for (auto& t : chunks_) {
      const std::vector<float> p = t->store().params_as_float();
      out.insert(out.end(), p.begin(), p.end());
    }
    return out;
  }

 private:
  const TrainConfig& config_;
  ScheduleSpec spec_;
  Communicator* dp_;
  Communicator* expert_dp_;  // under --ep: the ranks holding the same experts (null: none)
  std::vector<std::unique_ptr<Trainee>>& chunks_;
  std::vector<MicroBatch> micro_;
  std::vector<StageMicroBatch> mbs_;
  std::vector<std::unique_ptr<LayerStackChunk>> adapters_;
  std::vector<std::span<T>> params_, grads_;
  std::vector<std::unique_ptr<SliceOptimizer>> opts_;
  model::MemoryLedger buffers_;  // the stage's received activations, gradients, loss grads
  std::unique_ptr<PipelineStage> stage_;
  RankTimeline* timeline_;
  int zero_stage_;
  std::vector<model::ParamRange> shards_;  // per chunk: this dp rank's optimizer shard
  std::vector<T> shard_sum_;               // reduce-scatter output (scratch)
  std::vector<EpParamSplit> split_;        // under --ep, per chunk: replicated and experts
  std::vector<EpZeroPart<T>> ep_zero_;     // under --ep and ZeRO: per chunk, those two parts
  std::vector<T> packed_;                  // the replicated gradients of a chunk (scratch)
};

}  // namespace

int pipeline_blocks(const TrainConfig& config) {
  return config.model == ModelKind::kMlp ? config.mlp.num_blocks : config.moe.num_blocks;
}

std::pair<int, int> chunk_layers(const TrainConfig& config, const ScheduleSpec& spec, int chunk) {
  const int blocks = pipeline_blocks(config), chunks = spec.stages * spec.virtual_stages;
  const int lead = config.model == ModelKind::kMlp ? 0 : 1;  // the MoE's embedding
  const int first = chunk == 0 ? 0 : lead + first_layer(chunk, blocks, chunks);
  const int last =
      chunk == chunks - 1 ? lead + blocks + 1 : lead + first_layer(chunk + 1, blocks, chunks);
  return {first, last};
}

int64_t stage_activation_bytes(const TrainConfig& config, const ScheduleSpec& spec, int stage,
                               int batch) {
  const int64_t b = batch, d = config.mlp.input_dim, h = config.mlp.hidden_dim,
                o = config.mlp.output_dim;
  const int p = spec.stages, chunks = p * spec.virtual_stages;
  const Schedule schedule = make_schedule(spec);
  const std::vector<int> in_flight = peak_in_flight_per_chunk(schedule, stage);
  const std::vector<int> passes = peak_held_per_chunk(schedule, stage);
  const bool split = spec.kind == ScheduleKind::kZeroBubbleH1;
  int64_t floats = 0;
  bool receives_activations = false, receives_gradients = false;
  for (int j = 0; j < spec.virtual_stages; ++j) {
    const int c = stage + j * p;
    const bool last = c == chunks - 1;
    const auto [first, end] = chunk_layers(config, spec, c);
    const int64_t k = (last ? end - 1 : end) - first;  // blocks
    floats += passes[j] * b * (d + k * d + 2 * k * h + (last ? o : 0));
    // A split backward keeps each block's dy and pre-activation gradient and the head's dy
    // until W; its input half needs no workspace, the fused backward one (b, H) for the
    // pre-activation gradient (dh itself is never stored: see MlpBlock::input_part).
    if (split) floats += passes[j] * b * (k * (d + h) + (last ? o : 0));
    floats += (split ? 0 : 1) * b * h + (last ? b * d : 0);
    if (last) floats += in_flight[j] * b * o;
    if (config.precision == model::Precision::kMixedBf16) {  // the store's fp32 layer views
      const int64_t block = 2 * h * d + h + d, head = o * d + o;
      floats += 2 * std::max(k > 0 ? block : 0, last ? head : 0);
    }
    receives_activations |= c > 0;
    receives_gradients |= !last;
  }
  floats += (receives_activations + receives_gradients) * b * d;
  return floats * int64_t{sizeof(float)};
}

WallBubble wall_bubble(const std::vector<const std::vector<PhaseEvent>*>& timelines,
                       const ScheduleSpec& spec, int step) {
  const int passes = spec.kind == ScheduleKind::kZeroBubbleH1 ? 3 : 2;     // F B, or F B W
  const int per_step = passes * spec.micro_batches * spec.virtual_stages;  // compute phases
  WallBubble w;
  std::chrono::steady_clock::time_point first = std::chrono::steady_clock::time_point::max();
  std::chrono::steady_clock::time_point last = std::chrono::steady_clock::time_point::min();
  for (const std::vector<PhaseEvent>* events : timelines) {
    int seen = 0;
    for (const PhaseEvent& e : *events) {
      const bool compute = e.name.size() > 1 &&
                           (e.name[0] == 'F' || e.name[0] == 'B' || e.name[0] == 'W') &&
                           e.name[1] >= '0' && e.name[1] <= '9';
      if (!compute || seen++ / per_step != step) continue;
      w.busy_seconds += std::chrono::duration<double>(e.end - e.start).count();
      first = std::min(first, e.start);
      last = std::max(last, e.end);
    }
  }
  if (last > first) w.span_seconds = std::chrono::duration<double>(last - first).count();
  if (w.span_seconds > 0) w.bubble = 1 - w.busy_seconds / (spec.stages * w.span_seconds);
  return w;
}

double measured_wall_bubble(const TrainConfig& config, const RunResult& run) {
  const MeshShape shape = config.mesh();
  const ScheduleSpec spec = schedule_spec(config);
  std::vector<double> bubbles;
  for (int replica = 0; replica < shape.dp; ++replica) {
    std::vector<const std::vector<PhaseEvent>*> stages(spec.stages, nullptr);
    for (const RankReport& r : run.ranks) {
      const MeshCoord at = mesh_coord(shape, r.rank);
      if (at.dp == replica && at.tp == 0) stages[at.pp] = &r.timeline;
    }
    if (std::find(stages.begin(), stages.end(), nullptr) != stages.end()) continue;
    for (int step = run.steps > 1 ? 1 : 0; step < run.steps; ++step) {
      const WallBubble w = wall_bubble(stages, spec, step);
      if (w.span_seconds > 0) bubbles.push_back(w.bubble);
    }
  }
  if (bubbles.empty()) return std::nan("");
  const auto mid = bubbles.begin() + bubbles.size() / 2;
  std::nth_element(bubbles.begin(), mid, bubbles.end());
  return *mid;
}

std::string validate_pipeline(const TrainConfig& config, const ScheduleSpec& spec, int dp) {
  if (std::string why = validate(spec); !why.empty()) return why;
  if (spec.kind == ScheduleKind::kZeroBubbleH1 && config.model != ModelKind::kMlp) {
    return "--schedule zb-h1 needs --model mlp (its layers split backward into input and weight "
           "gradients; MoE layers do not)";
  }
  const int chunks = spec.stages * spec.virtual_stages;
  if (pipeline_blocks(config) % chunks != 0) {
    return fmt::format(
        "--layers {} must be a multiple of --pp x --virtual-stages = {} (each "
        "chunk holds the same number of blocks)",
        pipeline_blocks(config), chunks);
  }
  if (config.micro_batches != spec.micro_batches) {
    return fmt::format("--micro-batches {} but the schedule has {}", config.micro_batches,
                       spec.micro_batches);
  }
  if (config.global_batch % (dp * spec.micro_batches) != 0) {
    return fmt::format("--batch {} must be divisible by --dp x --micro-batches = {}",
                       config.global_batch, dp * spec.micro_batches);
  }
  return "";
}

void run_pipeline_rank(const TrainConfig& config, const ScheduleSpec& spec,
                       const PipelineGroups& groups, StepRunner& runner, int zero_stage) {
  const int p = spec.stages, stage = groups.pipe ? groups.pipe->rank() : 0;
  std::unique_ptr<TracedComm> tp, ep;
  ChunkParallel at;
  if (groups.tp != nullptr) {
    tp = std::make_unique<TracedComm>(*groups.tp, runner.timeline(), config.algo);
    at.tp_rank = groups.tp->rank();
    at.tp_size = groups.tp->size();
    at.tp = tp.get();
  }
  if (groups.ep != nullptr) {
    ep = std::make_unique<TracedComm>(*groups.ep, runner.timeline(), config.algo);
    at.ep_rank = groups.ep->rank();
    at.ep_size = groups.ep->size();
    at.ep = ep.get();
  }
  std::vector<std::unique_ptr<Trainee>> chunks;
  for (int c = stage; c < p * spec.virtual_stages; c += p) {
    chunks.push_back(std::make_unique<Trainee>(config, layers_of_chunk(config, spec, c, at)));
    with_buffers(chunks.back()->store(), [&](auto, auto grads) { runner.add_gradients(grads); });
  }
  auto run = [&](auto tag) {
    PipelineRank<decltype(tag)> rank(config, spec, groups, at.tp_rank == 0, runner, chunks,
                                     zero_stage);
    runner.run(rank);
  };
  if (config.precision == model::Precision::kFp32) {
    run(float{});
  } else {
    run(BFloat16{});
  }
}

}  // namespace dtsim::train::pipeline

namespace dtsim::train {

std::optional<RunResult> run_pipeline(const TrainConfig& config) {
  const MeshShape shape = config.mesh();
  const pipeline::ScheduleSpec spec = schedule_spec(config);
  if (std::string why = pipeline::validate_pipeline(config, spec, shape.dp); !why.empty()) {
    throw UsageError("dtsim train: " + why);
  }
  if (config.zero < 0 || config.zero > 2) {
    throw UsageError("dtsim train: --zero " + std::to_string(config.zero) +
                     " with --pp: a pipeline shards along dp with ZeRO-1 or 2 (--zero 0, 1 or 2)");
  }
  return launch(
      config,
      [&](Communicator& world, StepRunner& runner) {
        Mesh mesh(world, shape);
        pipeline::run_pipeline_rank(config, spec,
                                    {mesh.pp(), mesh.dp(), mesh.tp(), mesh.ep(), mesh.expert_dp()},
                                    runner, config.zero);
      },
      assemble_slices(
          model_layout(config),
          [config, spec, shape](int rank) {
            const MeshCoord c = mesh_coord(shape, rank);
            return pipeline::stage_layout(
                config, spec, c.pp,
                {.tp_rank = c.tp, .tp_size = shape.tp, .ep_rank = c.ep, .ep_size = shape.ep});
          },
          "pipeline"));
}

}  // namespace dtsim::train
