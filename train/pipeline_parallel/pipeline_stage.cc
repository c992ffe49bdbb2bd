#include "train/pipeline_parallel/pipeline_stage.h"

#include <fmt/format.h>

#include <stdexcept>
#include <string>
#include <utility>

#include "train/pipeline_parallel/schedule_check.h"

namespace dtsim::train::pipeline {
namespace {

constexpr int kActivationTag = 0;
constexpr int kGradientTag = 1;

}  // namespace

std::span<const float> StageChunk::backward_input(int, std::span<float>, int, float, bool) {
  throw std::logic_error("StageChunk: no split backward (splits_backward() is false)");
}

void StageChunk::backward_weight(int, int, float, bool) {
  throw std::logic_error("StageChunk: no split backward (splits_backward() is false)");
}

PipelineStage::PipelineStage(Schedule schedule, int stage, std::vector<StageChunk*> chunks,
                             Communicator* pipe, model::MemoryLedger* ledger,
                             RankTimeline* timeline)
    : schedule_(std::move(schedule)),
      stage_(stage),
      p_(schedule_.spec.stages),
      chunks_total_(schedule_.spec.stages * schedule_.spec.virtual_stages),
      chunks_(std::move(chunks)),
      pipe_(pipe),
      ledger_(ledger),
      timeline_(timeline) {
  const ScheduleSpec& s = schedule_.spec;
  if (s.kind == ScheduleKind::kZeroBubbleH1) {
    for (const StageChunk* c : chunks_) {
      if (!c->splits_backward()) {
        throw std::invalid_argument(
            "--schedule zb-h1 needs a backward split into input and weight gradients, which "
            "these layers do not offer; draw it with dtsim walk --pp");
      }
    }
  }
  const bool group_ok = pipe_ == nullptr ? p_ == 1 : pipe_->size() == p_ && pipe_->rank() == stage_;
  if (static_cast<int>(chunks_.size()) != s.virtual_stages || stage_ < 0 || stage_ >= p_ ||
      !group_ok) {
    throw std::invalid_argument(
        fmt::format("PipelineStage: {} chunks for v = {}, stage {} of {}, pipeline group of {}",
                    chunks_.size(), s.virtual_stages, stage_, p_, pipe_ ? pipe_->size() : 0));
  }
  if (const DryRun d = dry_run(schedule_); !d.error.empty()) {
    throw std::invalid_argument("PipelineStage: the schedule fails its check: " + d.error);
  }
  const int keys = s.micro_batches * s.virtual_stages;
  pass_of_.assign(s.virtual_stages, std::vector<int>(s.micro_batches, -1));
  free_passes_.assign(s.virtual_stages, {});
  stats_.passes.assign(s.virtual_stages, 0);
  for (Pool* pool : {&activations_, &gradients_, &loss_grads_}) pool->owner.assign(keys, -1);
  outputs_.assign(keys, {});
  input_grads_.assign(keys, {});
}

std::span<float> PipelineStage::take(Pool& pool, int key, size_t n) {
  int b;
  if (!pool.free.empty()) {
    b = pool.free.back();
    pool.free.pop_back();
  } else {
    b = static_cast<int>(pool.buffers.size());
    pool.buffers.emplace_back(ledger_, model::MemoryCategory::kActivations, n);
  }
  if (pool.buffers[b].size() < n) pool.buffers[b].resize(n);
  pool.owner[key] = b;
  return pool.buffers[b].span().first(n);
}

std::span<float> PipelineStage::held(Pool& pool, int key, size_t n) {
  if (pool.owner[key] < 0)
    throw std::logic_error("PipelineStage: a buffer read before it was filled");
  return pool.buffers[pool.owner[key]].span().first(n);
}

void PipelineStage::give_back(Pool& pool, int key) {
  pool.free.push_back(pool.owner[key]);
  pool.owner[key] = -1;
}

void PipelineStage::release_pass(int j, int micro_batch) {
  free_passes_[j].push_back(pass_of_[j][micro_batch]);
  pass_of_[j][micro_batch] = -1;
}

void PipelineStage::run(const std::vector<StageMicroBatch>& mbs, const StageData& data,
                        std::vector<float>* losses) {
  const ScheduleSpec& s = schedule_.spec;
  if (static_cast<int>(mbs.size()) != s.micro_batches) {
    throw std::invalid_argument(fmt::format(
        "PipelineStage::run: {} micro-batches, the schedule has {}", mbs.size(), s.micro_batches));
  }
  static const RankCounters kNone;  // one stage: no pipeline group, nothing sent
  const RankCounters& counters = pipe_ ? pipe_->counters() : kNone;
  const OpCounters send_before = counters[OpKind::kSend];
  const OpCounters recv_before = counters[OpKind::kRecv];
  const int v = s.virtual_stages, last = chunks_total_ - 1;
  written_.assign(v, 0);
  // The first weight-gradient action of local chunk j in this run writes, the rest add.
  auto first_write = [&](int j) {
    const bool first = written_[j] == 0;
    written_[j] = 1;
    return first;
  };
  // Each send and receive on the timeline too (--trace; the --html timeline's p2p bars).
  const auto p2p = [&](const char* name, auto&& fn) {
    if (timeline_ != nullptr) {
      timeline_->collective(name, *pipe_, fn);
    } else {
      fn();
    }
  };
  for (const Action& a : schedule_.ranks[stage_]) {
    const int i = a.micro_batch, batch = mbs[i].batch;
    switch (a.op) {
      case Op::kRecvActivation: {  // chunk a.chunk's output: the input of the next chunk
        const int j = (a.chunk + 1) / p_;
        p2p("recv", [&] {
          pipe_->recv(take(activations_, i * v + j, size_t(batch) * chunks_[j]->in_dim()), a.peer,
                      kActivationTag);
        });
        break;
      }
      case Op::kRecvGradient: {  // chunk a.chunk's input gradient: dy of the previous chunk
        const int j = (a.chunk - 1) / p_;
        p2p("recv", [&] {
          pipe_->recv(take(gradients_, i * v + j, size_t(batch) * chunks_[j]->out_dim()), a.peer,
                      kGradientTag);
        });
        break;
      }
      case Op::kForward: {
        const int j = a.chunk / p_, key = i * v + j;
        StageChunk& chunk = *chunks_[j];
        if (timeline_) timeline_->open(label(a, p_, v).c_str());
        if (free_passes_[j].empty()) free_passes_[j].push_back(stats_.passes[j]++);
        const int pass = pass_of_[j][i] = free_passes_[j].back();
        free_passes_[j].pop_back();
        const size_t in = size_t(batch) * chunk.in_dim();
        const std::span<const float> x =
            a.chunk == 0 ? data.inputs(i) : std::span<const float>(held(activations_, key, in));
        outputs_[key] = chunk.forward(pass, x, batch);
        if (a.chunk > 0) give_back(activations_, key);  // the pass kept what it needs
        if (a.chunk == last) {
          std::span<float> dy = take(loss_grads_, key, outputs_[key].size());
          const float loss = data.loss(i, outputs_[key], dy);
          if (losses != nullptr) (*losses)[i] = loss;
        }
        if (timeline_) timeline_->close();
        break;
      }
      case Op::kSendActivation:  // the pass's output is valid until its next forward
        p2p("send", [&] { pipe_->send(outputs_[i * v + a.chunk / p_], a.peer, kActivationTag); });
        break;
      case Op::kBackward:
      case Op::kBackwardInput: {
        const int j = a.chunk / p_, key = i * v + j;
        StageChunk& chunk = *chunks_[j];
        if (timeline_) timeline_->open(label(a, p_, v).c_str());
        Pool& from = a.chunk == last ? loss_grads_ : gradients_;
        std::span<float> dy = held(from, key, size_t(batch) * chunk.out_dim());
        const int pass = pass_of_[j][i];
        input_grads_[key] =
            a.op == Op::kBackward
                ? chunk.backward(pass, dy, batch, mbs[i].grad_scale, a.chunk > 0, first_write(j))
                : chunk.backward_input(pass, dy, batch, mbs[i].grad_scale, a.chunk > 0);
        give_back(from, key);
        if (a.op == Op::kBackward) release_pass(j, i);  // else the pass waits for its W
        if (timeline_) timeline_->close();
        break;
      }
      case Op::kBackwardWeight: {
        const int j = a.chunk / p_;
        if (timeline_) timeline_->open(label(a, p_, v).c_str());
        chunks_[j]->backward_weight(pass_of_[j][i], batch, mbs[i].grad_scale, first_write(j));
        release_pass(j, i);
        if (timeline_) timeline_->close();
        break;
      }
      case Op::kSendGradient:  // valid until the next backward, which comes after this send
        p2p("send", [&] { pipe_->send(input_grads_[i * v + a.chunk / p_], a.peer, kGradientTag); });
        break;
    }
  }
  const OpCounters& sent = counters[OpKind::kSend];
  const OpCounters& received = counters[OpKind::kRecv];
  stats_.p2p_bytes_sent = sent.bytes_sent - send_before.bytes_sent;
  stats_.p2p_messages_sent = sent.msgs_sent - send_before.msgs_sent;
  stats_.p2p_bytes_received = received.bytes_recv - recv_before.bytes_recv;
}

uint64_t p2p_bytes_per_step(const ScheduleSpec& spec, int stage, int batch, int dim) {
  const int chunks = spec.stages * spec.virtual_stages;
  uint64_t boundaries = 0;
  for (int c = stage; c < chunks; c += spec.stages) boundaries += (c < chunks - 1) + (c > 0);
  return boundaries * spec.micro_batches * uint64_t(batch) * dim * sizeof(float);
}

}  // namespace dtsim::train::pipeline
