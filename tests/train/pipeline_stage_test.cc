// The pipeline executor on rank threads, with toy chunks whose arithmetic is easy to follow:
// every schedule's gradients and losses are bitwise those of running the chunks one after
// another on one thread with gradient accumulation in micro-batch order; each rank sends the
// bytes of the formula; each chunk holds exactly its schedule's peak in-flight passes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "pipeline_test_util.h"
#include "runtime/world.h"
#include "train/pipeline_parallel/pipeline_stage.h"
#include "train/pipeline_parallel/schedule_check.h"

namespace dtsim::train::pipeline {
namespace {

constexpr int kDim = 5, kBatch = 3, kLayersPerChunk = 2;

// kLayersPerChunk layers y = tanh(w * x + 0.1), elementwise with one weight per feature.
// A pass keeps its input and every layer's output, (kBatch, kDim) floats each; a split
// backward (`split`) also keeps every layer's pre-activation gradient from B to W. Its
// gradients start as NaN: a run must write them before it adds to them.
class ToyChunk : public StageChunk {
 public:
  ToyChunk(int chunk, model::MemoryLedger* ledger, bool split = true)
      : ledger_(ledger), split_(split) {
    for (int l = 0; l < kLayersPerChunk; ++l) {
      for (int d = 0; d < kDim; ++d) w_.push_back(0.5f + 0.1f * chunk + 0.03f * l + 0.07f * d);
    }
    grad_.assign(w_.size(), NAN);
  }
  int in_dim() const override { return kDim; }
  int out_dim() const override { return kDim; }

  std::span<const float> forward(int pass, std::span<const float> x, int batch) override {
    Pass& s = get(pass, batch);
    std::copy(x.begin(), x.end(), s.in.data());
    const float* prev = s.in.data();
    for (int l = 0; l < kLayersPerChunk; ++l) {
      float* out = s.out[l].data();
      for (int b = 0; b < batch; ++b) {
        for (int d = 0; d < kDim; ++d) {
          out[b * kDim + d] = std::tanh(w_[l * kDim + d] * prev[b * kDim + d] + 0.1f);
        }
      }
      prev = out;
    }
    return s.out.back().span().first(size_t(batch) * kDim);
  }

  std::span<const float> backward(int pass, std::span<float> dy, int batch, float /*grad_scale*/,
                                  bool input_grad, bool write_grads) override {
    if (write_grads) std::fill(grad_.begin(), grad_.end(), 0.0f);
    return run_backward(pass, dy, batch, input_grad, nullptr);
  }
  bool splits_backward() const override { return split_; }
  std::span<const float> backward_input(int pass, std::span<float> dy, int batch,
                                        float /*grad_scale*/, bool input_grad) override {
    Pass& s = *passes_.at(pass);
    if (s.g.empty()) {
      for (int l = 0; l < kLayersPerChunk; ++l) {
        s.g.emplace_back(ledger_, model::MemoryCategory::kActivations, size_t(batch) * kDim);
      }
    }
    return run_backward(pass, dy, batch, input_grad, &s.g);
  }
  void backward_weight(int pass, int batch, float /*grad_scale*/, bool write_grads) override {
    if (write_grads) std::fill(grad_.begin(), grad_.end(), 0.0f);
    Pass& s = *passes_.at(pass);
    for (int l = kLayersPerChunk - 1; l >= 0; --l) {
      const float* prev = l > 0 ? s.out[l - 1].data() : s.in.data();
      for (int b = 0; b < batch; ++b) {
        for (int d = 0; d < kDim; ++d)
          grad_[l * kDim + d] += s.g[l][b * kDim + d] * prev[b * kDim + d];
      }
    }
  }

  const std::vector<float>& grad() const { return grad_; }
  int passes() const { return static_cast<int>(passes_.size()); }
  // A pass's bytes, with a split backward's saved gradients when `split`.
  static int64_t pass_bytes(int batch, bool split) {
    return int64_t{kLayersPerChunk * (split ? 2 : 1) + 1} * batch * kDim * int64_t{sizeof(float)};
  }

 private:
  struct Pass {
    model::TrackedBuffer<float> in;
    std::vector<model::TrackedBuffer<float>> out;
    std::vector<model::TrackedBuffer<float>> g;  // split: per layer, kept from B to W
  };
  // Backward from dy; `keep`: the input half only, keeping each layer's gradient there.
  std::span<const float> run_backward(int pass, std::span<float> dy, int batch, bool input_grad,
                                      std::vector<model::TrackedBuffer<float>>* keep) {
    Pass& s = *passes_.at(pass);
    dx_.resize(dy.size());
    std::copy(dy.begin(), dy.end(), dx_.begin());
    for (int l = kLayersPerChunk - 1; l >= 0; --l) {
      const float* out = s.out[l].data();
      const float* prev = l > 0 ? s.out[l - 1].data() : s.in.data();
      for (int b = 0; b < batch; ++b) {
        for (int d = 0; d < kDim; ++d) {
          const float g = dx_[b * kDim + d] * (1.0f - out[b * kDim + d] * out[b * kDim + d]);
          if (keep) {
            (*keep)[l][b * kDim + d] = g;
          } else {
            grad_[l * kDim + d] += g * prev[b * kDim + d];
          }
          dx_[b * kDim + d] = g * w_[l * kDim + d];
        }
      }
    }
    return input_grad ? std::span<const float>(dx_) : std::span<const float>();
  }
  Pass& get(int pass, int batch) {
    while (static_cast<int>(passes_.size()) <= pass) {
      auto s = std::make_unique<Pass>();
      const size_t n = size_t(batch) * kDim;
      s->in = model::TrackedBuffer<float>(ledger_, model::MemoryCategory::kActivations, n);
      for (int l = 0; l < kLayersPerChunk; ++l) {
        s->out.emplace_back(ledger_, model::MemoryCategory::kActivations, n);
      }
      passes_.push_back(std::move(s));
    }
    return *passes_[pass];
  }

  model::MemoryLedger* ledger_;
  bool split_;
  std::vector<float> w_, grad_, dx_;
  std::vector<std::unique_ptr<Pass>> passes_;
};

float input_value(int i, int k) { return std::sin(0.37f * float(i) + 0.11f * float(k)); }
float target_value(int i, int k) { return 0.2f * std::cos(0.5f * float(i) - 0.3f * float(k)); }

// The loss of micro-batch i: mean squared error, dy = grad_scale 2 (y - t).
float loss_of(int i, std::span<const float> y, std::span<float> dy, float grad_scale) {
  float sum = 0;
  for (size_t k = 0; k < y.size(); ++k) {
    const float e = y[k] - target_value(i, int(k));
    sum += e * e;
    dy[k] = grad_scale * 2.0f * e;
  }
  return sum / float(y.size());
}

struct Result {
  std::vector<std::vector<float>> grads;  // per global chunk
  std::vector<float> losses;
};

// Every chunk on one thread, micro-batch after micro-batch.
Result sequential(int chunks, int m) {
  model::MemoryLedger ledger;
  std::vector<std::unique_ptr<ToyChunk>> c;
  for (int k = 0; k < chunks; ++k) c.push_back(std::make_unique<ToyChunk>(k, &ledger));
  Result r;
  const float scale = 1.0f / float(m * kBatch);
  for (int i = 0; i < m; ++i) {
    std::vector<float> x(kBatch * kDim);
    for (size_t k = 0; k < x.size(); ++k) x[k] = input_value(i, int(k));
    std::span<const float> y = x;
    for (auto& chunk : c) y = chunk->forward(0, y, kBatch);
    std::vector<float> dy(y.size());
    r.losses.push_back(loss_of(i, y, dy, scale));
    std::span<float> g = dy;
    std::vector<float> next;
    for (int k = chunks - 1; k >= 0; --k) {
      std::span<const float> dx = c[k]->backward(0, g, kBatch, scale, k > 0, i == 0);
      next.assign(dx.begin(), dx.end());
      g = next;
    }
  }
  for (auto& chunk : c) r.grads.push_back(chunk->grad());
  return r;
}

class Executor : public ::testing::TestWithParam<ScheduleSpec> {};

TEST_P(Executor, BitwiseEqualToSequentialAccumulation) {
  const ScheduleSpec spec = GetParam();
  const int p = spec.stages, v = spec.virtual_stages, m = spec.micro_batches;
  const Schedule schedule = make_schedule(spec);
  const Result want = sequential(p * v, m);

  Result got;
  got.grads.resize(p * v);
  got.losses.assign(m, NAN);
  std::vector<StageStats> stats(p);
  std::vector<int64_t> chunk_bytes(p), stage_bytes(p);
  std::vector<std::vector<int>> passes(p);
  WorldOptions options;
  options.timeout = std::chrono::milliseconds(20000);
  World world(p, options);
  world.run([&](Communicator& comm) {
    const int r = comm.rank();
    model::MemoryLedger chunk_ledger, stage_ledger;
    std::vector<std::unique_ptr<ToyChunk>> own;
    std::vector<StageChunk*> chunks;
    for (int j = 0; j < v; ++j) {
      own.push_back(std::make_unique<ToyChunk>(r + j * p, &chunk_ledger));
      chunks.push_back(own.back().get());
    }
    PipelineStage stage(schedule, r, chunks, &comm, &stage_ledger, nullptr);
    std::vector<StageMicroBatch> mbs(m, {kBatch, 1.0f / float(m * kBatch)});
    std::vector<float> x(kBatch * kDim);
    StageData data;
    data.inputs = [&](int i) {
      for (size_t k = 0; k < x.size(); ++k) x[k] = input_value(i, int(k));
      return std::span<const float>(x);
    };
    data.loss = [&](int i, std::span<const float> y, std::span<float> dy) {
      return loss_of(i, y, dy, mbs[i].grad_scale);
    };
    std::vector<float> losses(m, NAN);
    stage.run(mbs, data, &losses);
    for (int j = 0; j < v; ++j) {
      got.grads[r + j * p] = own[j]->grad();
      passes[r].push_back(own[j]->passes());
    }
    if (r == (p * v - 1) % p) got.losses = losses;
    stats[r] = stage.stats();
    chunk_bytes[r] = chunk_ledger.bytes(model::MemoryCategory::kActivations);
    stage_bytes[r] = stage_ledger.bytes(model::MemoryCategory::kActivations);
  });

  for (int c = 0; c < p * v; ++c) {
    ASSERT_EQ(got.grads[c].size(), want.grads[c].size());
    EXPECT_EQ(std::memcmp(got.grads[c].data(), want.grads[c].data(),
                          want.grads[c].size() * sizeof(float)),
              0)
        << "chunk " << c << " gradients differ from sequential accumulation";
  }
  EXPECT_EQ(std::memcmp(got.losses.data(), want.losses.data(), m * sizeof(float)), 0);
  for (int r = 0; r < p; ++r) {
    EXPECT_EQ(stats[r].p2p_bytes_sent, p2p_bytes_per_step(spec, r, kBatch, kDim)) << "rank " << r;
    // What one rank sends, its neighbours receive: the totals agree.
    const std::vector<int> held = peak_held_per_chunk(schedule, r);
    const std::vector<int> peak = peak_in_flight_per_chunk(schedule, r);
    EXPECT_EQ(passes[r], held) << "rank " << r
                               << ": passes = peak held (F to B, or to W) per chunk";
    EXPECT_EQ(stats[r].passes, held);
    const bool split = spec.kind == ScheduleKind::kZeroBubbleH1;
    int64_t pass_total = 0;
    for (int n : held) pass_total += n * ToyChunk::pass_bytes(kBatch, split);
    EXPECT_EQ(chunk_bytes[r], pass_total) << "rank " << r;
    // The stage's own buffers: one received activation and one received gradient (each is
    // read by the compute right after its receive), and the last chunk's loss gradients, one
    // per micro-batch in flight on it.
    const int64_t buffer = int64_t{kBatch} * kDim * sizeof(float);
    const bool has_first = r == 0, has_last = r == (p * v - 1) % p;
    int64_t expected = 0;
    if (p * v > 1 && !(has_first && v == 1)) expected += buffer;  // a chunk > 0 receives
    if (p * v > 1 && !(has_last && v == 1)) expected += buffer;   // a chunk < last receives
    if (has_last) expected += peak.back() * buffer;
    EXPECT_EQ(stage_bytes[r], expected) << "rank " << r;
  }
  uint64_t sent = 0, received = 0;
  for (const StageStats& s : stats) sent += s.p2p_bytes_sent, received += s.p2p_bytes_received;
  EXPECT_EQ(sent, received);
  EXPECT_EQ(sent, 2ull * m * (p * v - 1) * kBatch * kDim * sizeof(float));
}

std::vector<ScheduleSpec> executor_specs() {
  std::vector<ScheduleSpec> specs;
  for (int p : {1, 2, 3, 4, 8}) {
    for (int m : {1, 3, 8}) {
      specs.push_back({ScheduleKind::kGpipe, p, m, 1});
      specs.push_back({ScheduleKind::kOneFOneB, p, m, 1});
      specs.push_back({ScheduleKind::kZeroBubbleH1, p, m, 1});
    }
    if (p > 1) {
      specs.push_back({ScheduleKind::kInterleaved, p, p, 2});
      specs.push_back({ScheduleKind::kInterleaved, p, 2 * p, 2});
    }
  }
  specs.push_back({ScheduleKind::kOneFOneB, 16, 32, 1});
  specs.push_back({ScheduleKind::kZeroBubbleH1, 16, 32, 1});
  specs.push_back({ScheduleKind::kInterleaved, 4, 8, 4});
  return specs;
}

INSTANTIATE_TEST_SUITE_P(Pipeline, Executor, ::testing::ValuesIn(executor_specs()),
                         [](const auto& info) { return test_name(info.param); });

TEST(ExecutorRejects, ZeroBubbleWithoutASplitBackward) {
  World world(1);
  world.run([&](Communicator& comm) {
    model::MemoryLedger ledger;
    ToyChunk chunk(0, &ledger, /*split=*/false);
    EXPECT_THROW(PipelineStage(make_schedule({ScheduleKind::kZeroBubbleH1, 1, 2, 1}), 0, {&chunk},
                               &comm, &ledger, nullptr),
                 std::invalid_argument);
  });
}

}  // namespace
}  // namespace dtsim::train::pipeline
