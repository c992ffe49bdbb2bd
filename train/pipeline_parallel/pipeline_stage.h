// The pipeline executor: one pipeline rank runs its actions of a checked Schedule
// (schedule.h) over its model chunks. Forward of chunk 0 reads the micro-batch's inputs;
// a forward of chunk c > 0 reads the activations chunk c - 1's rank sent; the last chunk's
// forward ends in the loss, whose gradient waits (one buffer per micro-batch in flight) for
// that micro-batch's backward; a backward of chunk c < last starts from the gradient chunk
// c + 1's rank sent and sends its input gradient back. Activations move on tag 0 and
// gradients on tag 1 of the pipeline group, each matched in order per (peer, tag): the
// checker proved the order agrees on both sides. Weight gradients accumulate in each chunk
// in micro-batch order, as single-rank gradient accumulation does, so a pipeline is bitwise
// equal to it; a chunk's first weight-gradient action of a run writes its gradients (no
// zero_grad before the step), the later ones add.
//
// ZB-H1 splits each backward into B (kBackwardInput: the input gradient the previous stage
// waits for) and W (kBackwardWeight: the weight gradients), W of each chunk in micro-batch
// order too.
//
// Memory: a micro-batch's pass of a chunk is taken from a free list at its forward and
// returned at its backward (at its W for ZB-H1), so a chunk holds exactly its peak passes
// held (peak_held_per_chunk); received activations and gradients live only until the
// compute that reads them, a loss gradient until its micro-batch's backward (B).
//
// Thread safety: none; a PipelineStage and its chunks belong to one rank thread.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "model/memory.h"
#include "runtime/communicator.h"
#include "train/accounting.h"
#include "train/pipeline_parallel/schedule.h"

namespace dtsim::train::pipeline {

// One model chunk (a contiguous range of layers) as the executor drives it; the model's
// LayerStack behind an adapter, or a test's toy.
class StageChunk {
 public:
  virtual ~StageChunk() = default;
  virtual int in_dim() const = 0;
  virtual int out_dim() const = 0;
  // Forward of one micro-batch x (batch, in_dim) in pass `pass`, which keeps what backward
  // needs (x itself may change once this returns); the output (batch, out_dim) stays valid
  // until the pass's next forward.
  virtual std::span<const float> forward(int pass, std::span<const float> x, int batch) = 0;
  // Backward of pass `pass` from dy (batch, out_dim), which it may overwrite; weight
  // gradients accumulate, or are overwritten when `write_grads` (bitwise accumulating into
  // zeros); returns the input gradient (batch, in_dim) when `input_grad`, valid until the
  // next backward.
  virtual std::span<const float> backward(int pass, std::span<float> dy, int batch,
                                          float grad_scale, bool input_grad, bool write_grads) = 0;
  // ZB-H1's split of backward, when splits_backward(): backward_input is backward without
  // the weight gradients (same arguments and result; the pass keeps what the weight half
  // needs), backward_weight then accumulates (or, `write_grads`, writes) the pass's weight
  // gradients. Input then weight is bitwise backward. The defaults throw std::logic_error.
  virtual bool splits_backward() const { return false; }
  virtual std::span<const float> backward_input(int pass, std::span<float> dy, int batch,
                                                float grad_scale, bool input_grad);
  virtual void backward_weight(int pass, int batch, float grad_scale, bool write_grads);
};

// One micro-batch of the step: its samples and its loss gradient's scale.
struct StageMicroBatch {
  int batch = 0;
  float grad_scale = 0;
};

// Where a micro-batch's data comes from, on the ranks that need it.
struct StageData {
  // Inputs (batch, in_dim) of micro-batch i (first chunk's rank only), valid until the next
  // call.
  std::function<std::span<const float>(int i)> inputs;
  // The loss of micro-batch i on the last chunk's output y: returns its mean loss and
  // OVERWRITES dy with grad_scale times the gradient of its sum (last chunk's rank only).
  std::function<float(int i, std::span<const float> y, std::span<float> dy)> loss;
};

// What the last run() did, for tests and reports.
struct StageStats {
  uint64_t p2p_bytes_sent = 0, p2p_bytes_received = 0, p2p_messages_sent = 0;
  std::vector<int> passes;  // per local chunk: passes allocated (its peak in-flight)
};

class PipelineStage {
 public:
  // `chunks[j]` is global chunk stage + j p of `schedule` (j = 0..v-1); `pipe` is the
  // pipeline group, whose rank is the stage (null only for p = 1). `ledger` records the stage's own
  // buffers (received activations and gradients, loss gradients) as activations; `timeline` (may be
  // null) gets a phase per forward and backward, named as walk draws them (F3, B3, F3.1).
  // Throws std::invalid_argument for ZB-H1 with a chunk that does not split its backward, or
  // a mismatch.
  PipelineStage(Schedule schedule, int stage, std::vector<StageChunk*> chunks, Communicator* pipe,
                model::MemoryLedger* ledger, RankTimeline* timeline);
  PipelineStage(const PipelineStage&) = delete;
  PipelineStage& operator=(const PipelineStage&) = delete;

  // Runs the stage's actions for one step over `mbs` (m of them): each chunk's weight
  // gradients end as the step's sum, whatever they held before. On the last chunk's rank
  // (*losses)[i] becomes micro-batch i's mean loss (losses may be null).
  void run(const std::vector<StageMicroBatch>& mbs, const StageData& data,
           std::vector<float>* losses);

  const StageStats& stats() const { return stats_; }
  const Schedule& schedule() const { return schedule_; }
  int stage() const { return stage_; }

 private:
  // Buffers of the stage's own, recorded in the ledger, lent per (micro-batch, local chunk)
  // key: received activations (a forward's input), received gradients (a backward's dy) and
  // the last chunk's loss gradients.
  struct Pool {
    std::vector<model::TrackedBuffer<float>> buffers;
    std::vector<int> free;
    std::vector<int> owner;  // per key: its buffer, -1 none
  };
  std::span<float> take(Pool& pool, int key, size_t n);
  std::span<float> held(Pool& pool, int key, size_t n);
  void give_back(Pool& pool, int key);
  // Local chunk j's pass of `micro_batch` goes back to the free list.
  void release_pass(int j, int micro_batch);

  Schedule schedule_;
  int stage_, p_, chunks_total_;
  std::vector<StageChunk*> chunks_;
  Communicator* pipe_;
  model::MemoryLedger* ledger_;
  RankTimeline* timeline_;
  StageStats stats_;
  // Per local chunk j: the pass each micro-batch holds (-1: none) and the free passes.
  std::vector<std::vector<int>> pass_of_;
  std::vector<std::vector<int>> free_passes_;
  std::vector<char> written_;  // per local chunk: its weight gradients written in this run
  Pool activations_, gradients_, loss_grads_;
  // Per key: the forward's output and the backward's input gradient, until they are sent.
  std::vector<std::span<const float>> outputs_, input_grads_;
};

// Bytes pipeline rank `stage` sends per step: each of its chunks but the last sends m
// activations of (b, out_dim) floats, each but chunk 0 sends m input gradients of
// (b, in_dim) floats; with every boundary d wide, 4 b d m (#boundaries it sends across).
uint64_t p2p_bytes_per_step(const ScheduleSpec& spec, int stage, int batch, int dim);

}  // namespace dtsim::train::pipeline
