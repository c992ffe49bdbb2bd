#include "train/pipeline_parallel/pipeline_parallel.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <memory>
#include <stdexcept>
#include <utility>
#include <vector>

#include "model/layer_stack.h"
#include "model/mlp.h"
#include "train/accounting.h"
#include "train/data_parallel/data_parallel.h"
#include "train/expert_parallel/ep_moe_layer.h"
#include "train/grad_ops.h"
#include "train/launch.h"
#include "train/mesh.h"
#include "train/parallelize.h"
#include "train/pipeline_parallel/pipeline_stage.h"
#include "train/pipeline_parallel/schedule_check.h"
#include "train/placement_plan.h"
#include "train/slice_optimizer.h"
#include "train/step_runner.h"
#include "train/strategies.h"
#include "train/tensor_parallel/tp_mlp_block.h"
#include "train/traced_comm.h"
#include "train/trainee.h"

namespace dtsim::train::pipeline {
namespace {

// A chunk's LayerStack as the executor drives it, with the data-parallel wrapper's layer
// hooks when it has any to run (ZeRO-3's gathers; null otherwise).
class LayerStackChunk : public StageChunk {
 public:
  // `before_backward(k)`: called before the chunk's k-th backward of the step.
  LayerStackChunk(model::LayerStack& stack, model::LayerHooks* hooks,
                  std::function<void(int)> before_backward)
      : stack_(stack), hooks_(hooks), before_backward_(std::move(before_backward)) {}
  int in_dim() const override { return stack_.in_dim(); }
  int out_dim() const override { return stack_.out_dim(); }
  std::span<const float> forward(int pass, std::span<const float> x, int batch) override {
    return stack_.forward(pass, x, batch, hooks_);
  }
  std::span<const float> backward(int pass, std::span<float> dy, int batch, float grad_scale,
                                  bool input_grad, bool write_grads) override {
    if (write_grads) backwards_ = 0;  // the step's first backward of this chunk
    if (before_backward_) before_backward_(backwards_++);
    return stack_.backward(pass, dy, {grad_scale, batch, write_grads}, hooks_, input_grad);
  }
  bool splits_backward() const override { return stack_.splits_backward(); }
  std::span<const float> backward_input(int pass, std::span<float> dy, int batch, float grad_scale,
                                        bool input_grad) override {
    return stack_.backward_input(pass, dy, {grad_scale, batch}, input_grad, hooks_);
  }
  // The weight halves run in micro-batch order, so the k-th of the step is micro-batch k's.
  void backward_weight(int pass, int batch, float grad_scale, bool write_grads) override {
    if (write_grads) backwards_ = 0;
    if (before_backward_) before_backward_(backwards_++);
    stack_.backward_weight(pass, {grad_scale, batch, write_grads}, hooks_);
  }

 private:
  model::LayerStack& stack_;
  model::LayerHooks* hooks_;
  std::function<void(int)> before_backward_;
  int backwards_ = 0;
};

}  // namespace

model::Layers layers_of_chunk(const TrainConfig& config, const ScheduleSpec& spec, int chunk,
                              const ChunkParallel& at) {
  const auto [first, last] = chunk_layers(config, spec, chunk);
  const MeshShape shape{.tp = at.tp_size, .ep = at.ep_size, .cp = at.cp_size};
  MeshCoord coord;
  coord.tp = at.tp_rank;
  coord.ep = at.ep_rank;
  coord.cp = at.cp_rank;
  model::Layers all = rank_layers(config, shape, coord, {at.tp, at.ep, at.cp});
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

namespace {

// One rank: stage s of replica d. Its step is one MicroBatch for the runner (the replica's
// M micro-batches, which the schedule orders); only the last stage reports the loss. Each
// chunk's buffer has its own data-parallel wrapper over the stage's dp (and expert_dp) group.
template <class T>
class PipelineRank : public RankStrategy {
 public:
  PipelineRank(const TrainConfig& config, const ScheduleSpec& spec, const PipelineGroups& groups,
               bool reports_loss, StepRunner& runner, std::vector<std::unique_ptr<Trainee>>& chunks,
               const MeshShape& shape, const std::vector<DpParts>& parts)
      : chunks_(chunks),
        cp_(shape.cp),
        micro_(data_parallel_micro_batches(config, shape.dp, groups.dp ? groups.dp->rank() : 0)),
        peak_(runner.peak()) {
    const int zero = zero_stage(config);
    std::vector<StageChunk*> views;
    if (parts.size() != chunks_.size()) throw std::logic_error("pipeline: one DpParts per chunk");
    for (size_t c = 0; c < chunks_.size(); ++c) {
      Trainee* t = chunks_[c].get();
      with_buffers(t->store(), [&](auto params, auto grads) {
        if constexpr (std::is_same_v<typename decltype(params)::value_type, T>) {
          dp_.push_back(std::make_unique<DataParallel<T>>(
              DpContext{.config = &config,
                        .zero = zero,
                        .dp = shape.cp > 1 ? groups.dp_cp : groups.dp,
                        .expert_dp = shape.ep > 1 ? groups.expert_dp : nullptr,
                        .replicas = shape.dp_cp(),
                        .timeline = &runner.timeline(),
                        .observe = [this] { observe_memory(peak_); },
                        .layer_hooks = zero == 3,
                        .time_phases = false},
              t->store().layout(), parts[c], params, grads));
        }
      });
      DataParallel<T>& dp = *dp_.back();
      const int m = spec.micro_batches;
      adapters_.push_back(
          std::make_unique<LayerStackChunk>(t->stack(), zero == 3 ? &dp.hooks() : nullptr,
                                            [&dp, m](int k) { dp.before_micro_batch(k, m); }));
      views.push_back(adapters_.back().get());
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
      // Context parallel: this rank's tokens' mean, a 1/cp share of the samples' (mesh_rank.h).
      return last.loss().forward_backward(y, last.targets(), micro_[i].size, micro_[i].grad_scale,
                                          dy) /
             static_cast<float>(cp_);
    };
    stage_->run(mbs_, data, losses);
    return true;
  }
  void sync_gradients() override {
    for (size_t j = 0; j < chunks_.size(); ++j) {
      finish_expert_gradients(chunks_[j]->stack());  // expert parallelism's partials
      dp_[j]->sync_gradients();
    }
  }
  void optimizer_step() override {
    for (auto& dp : dp_) dp->optimizer_step();
  }
  void sync_params() override {
    for (auto& dp : dp_) dp->sync_params();
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
    for (size_t j = 0; j < chunks_.size(); ++j) {
      dp_[j]->add_model_state(all, expert_partial_bytes(chunks_[j]->stack()));
    }
    peak.observe(all);
  }
  std::vector<float> final_params() override {
    std::vector<float> out;
    for (auto& dp : dp_) {
      const std::vector<float> p = dp->final_params();
      out.insert(out.end(), p.begin(), p.end());
    }
    return out;
  }
  checkpoint::RankState checkpoint_state() override {
    checkpoint::RankState state;
    for (size_t j = 0; j < chunks_.size(); ++j) {
      state.parts.push_back({&chunks_[j]->store().layout(), dp_[j].get()});
    }
    return state;
  }

 private:
  std::vector<std::unique_ptr<Trainee>>& chunks_;
  int cp_;  // context-parallel width: the loss is a 1/cp share
  std::vector<MicroBatch> micro_;
  std::vector<StageMicroBatch> mbs_;
  PeakMemory& peak_;
  std::vector<std::unique_ptr<DataParallel<T>>> dp_;  // per chunk
  std::vector<std::unique_ptr<LayerStackChunk>> adapters_;
  model::MemoryLedger buffers_;  // the stage's received activations, gradients, loss grads
  std::unique_ptr<PipelineStage> stage_;
};

}  // namespace

int pipeline_blocks(const TrainConfig& config) {
  return model_spec(config).pipeline_blocks(config);
}

std::pair<int, int> chunk_layers(const TrainConfig& config, const ScheduleSpec& spec, int chunk) {
  const int blocks = pipeline_blocks(config), chunks = spec.stages * spec.virtual_stages;
  const ModelSpec& model = model_spec(config);
  const int lead = model.lead_layers();  // an embedding before the blocks
  const int per = model.layers_per_block(), tail = model.tail_layers();
  // Where chunk c's blocks begin: the explicit counts' prefix sum, else the balanced split.
  const auto begin = [&](int c) {
    if (config.stage_layers.empty()) return first_layer(c, blocks, chunks);
    int at = 0;
    for (int i = 0; i < c; ++i) at += config.stage_layers[i];
    return at;
  };
  const int first = chunk == 0 ? 0 : lead + per * begin(chunk);
  const int last = chunk == chunks - 1 ? lead + per * blocks + tail : lead + per * begin(chunk + 1);
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

std::string validate_stage_layers(const TrainConfig& config, int chunks) {
  const int blocks = pipeline_blocks(config);
  if (!config.stage_layers.empty()) {
    if (static_cast<int>(config.stage_layers.size()) != chunks) {
      return fmt::format("--stage-layers gives {} counts for --pp x --virtual-stages = {} chunks",
                         config.stage_layers.size(), chunks);
    }
    int sum = 0;
    for (int n : config.stage_layers) {
      if (n < 0) return fmt::format("--stage-layers {}: a count cannot be negative", n);
      sum += n;
    }
    if (sum != blocks) {
      return fmt::format("--stage-layers add up to {} but --layers is {}; make them agree", sum,
                         blocks);
    }
  }
  // Every chunk must hold a layer: a block, or the MoE's embedding (first) or the head (last).
  const ScheduleSpec spec{
      .kind = ScheduleKind::kGpipe, .stages = chunks, .micro_batches = 1, .virtual_stages = 1};
  for (int c = 0; c < chunks; ++c) {
    const auto [first, last] = chunk_layers(config, spec, c);
    if (first < last) continue;
    if (!config.stage_layers.empty()) {
      return fmt::format("--stage-layers leaves pipeline chunk {} with no layer; give it a block",
                         c);
    }
    return fmt::format(
        "--layers {} leaves pipeline chunk {} of --pp x --virtual-stages = {} with no layer; "
        "give --layers {} or more, or --stage-layers",
        blocks, c, chunks, chunks);
  }
  return "";
}

std::string validate_pipeline(const TrainConfig& config, const ScheduleSpec& spec, int dp) {
  if (std::string why = validate(spec); !why.empty()) return why;
  if (spec.kind == ScheduleKind::kZeroBubbleH1 && !model_spec(config).splits_backward()) {
    return std::string(
               "--schedule zb-h1 splits each layer's backward into input and weight "
               "gradients, which --model ") +
           to_string(config.model) + "'s layers do not; use another --schedule";
  }
  const int chunks = spec.stages * spec.virtual_stages;
  if (std::string why = validate_stage_layers(config, chunks); !why.empty()) return why;
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
                       const PipelineGroups& groups, StepRunner& runner, const MeshShape& shape,
                       const std::vector<DpParts>& parts) {
  const int p = spec.stages, stage = groups.pipe ? groups.pipe->rank() : 0;
  std::unique_ptr<TracedComm> tp, ep, cp;
  ChunkParallel at;
  if (groups.tp != nullptr) {
    tp = std::make_unique<TracedComm>(*groups.tp, runner.timeline(), config.algo);
    at.tp_rank = groups.tp->rank();
    at.tp_size = groups.tp->size();
    at.tp = tp.get();
  }
  if (groups.cp != nullptr) {
    cp = std::make_unique<TracedComm>(*groups.cp, runner.timeline(), config.algo);
    at.cp_rank = groups.cp->rank();
    at.cp_size = groups.cp->size();
    at.cp = cp.get();
  }
  if (groups.ep != nullptr) {
    ep = std::make_unique<TracedComm>(*groups.ep, runner.timeline(), config.algo);
    at.ep_rank = groups.ep->rank();
    at.ep_size = groups.ep->size();
    at.ep = ep.get();
  }
  std::vector<std::unique_ptr<Trainee>> chunks;
  for (int c = stage; c < p * spec.virtual_stages; c += p) {
    MeshCoord coord;  // the objective's tokens (context parallel)
    coord.cp = at.cp_rank;
    chunks.push_back(std::make_unique<Trainee>(config, layers_of_chunk(config, spec, c, at), true,
                                               MeshShape{.cp = at.cp_size}, coord));
    with_buffers(chunks.back()->store(), [&](auto, auto grads) { runner.add_gradients(grads); });
  }
  auto run = [&](auto tag) {
    PipelineRank<decltype(tag)> rank(config, spec, groups, at.tp_rank == 0, runner, chunks, shape,
                                     parts);
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
  // Each rank's data-parallel parts; under ZeRO-3 its owned runs of its stage buffer, for
  // assembling the final parameters.
  const auto placement = std::make_shared<const ModelPlacement>(config);
  HeldRanges held;
  if (placement->zero() == 3) held = [placement](int rank) { return placement->zero3_held(rank); };
  return launch(
      config,
      [&](Communicator& world, StepRunner& runner) {
        Mesh mesh(world, shape);
        pipeline::run_pipeline_rank(
            config, spec,
            {mesh.pp(), mesh.dp(), mesh.tp(), mesh.ep(), mesh.expert_dp(), mesh.cp(), mesh.dp_cp()},
            runner, shape, placement->dp_parts(mesh.coord()));
      },
      assemble_slices(
          model_layout(config),
          [config, spec, shape](int rank) {
            const MeshCoord c = mesh_coord(shape, rank);
            return pipeline::stage_layout(config, spec, c.pp,
                                          {.tp_rank = c.tp,
                                           .tp_size = shape.tp,
                                           .ep_rank = c.ep,
                                           .ep_size = shape.ep,
                                           .cp_rank = c.cp,
                                           .cp_size = shape.cp});
          },
          "pipeline", held));
}

}  // namespace dtsim::train
