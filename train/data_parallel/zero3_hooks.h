// ZeRO-3's per-layer sharding and the layer hooks that gather a layer's parameters before it
// runs and release them after, and reduce-scatter its gradients after its backward.
//
// Thread safety: a Zero3Layout is immutable once built (shared by reference is fine); the
// hooks belong to one rank thread.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <span>
#include <vector>

#include "model/memory.h"
#include "model/param_layout.h"
#include "runtime/algorithms/registry.h"
#include "runtime/communicator.h"
#include "train/accounting.h"
#include "train/config.h"
#include "train/grad_ops.h"

namespace dtsim::train {

// Reduce-scatter and all-gather have fewer algorithms than all-reduce: ZeRO (every stage)
// runs the config's algorithm where the registry lists it for them, else their auto one.
inline Algo reduce_scatter_algo(Algo a) { return algorithm_or_auto(OpKind::kReduceScatter, a); }
inline Algo all_gather_algo(Algo a) { return algorithm_or_auto(OpKind::kAllGather, a); }

// Every layer sharded on its own over n ranks, padded to a multiple of n (as FSDP pads a
// flat parameter): rank r's shard of layer l is elements [r * s_l, (r + 1) * s_l) of the
// padded layer, s_l = ceil(size_l / n). A rank's shard buffer holds its shards of all
// layers, layer after layer.
class Zero3Layout {
 public:
  Zero3Layout(const model::ParamLayout& layout, int ranks);

  int num_layers() const { return static_cast<int>(layers_.size()); }
  int ranks() const { return ranks_; }
  // Elements of one rank's shard buffer (sum of s_l).
  size_t shard_size() const { return shard_size_; }
  // Layer l's padded size (n * s_l) and per-rank shard size s_l.
  size_t padded(int l) const { return layers_[l].shard * ranks_; }
  size_t shard(int l) const { return layers_[l].shard; }
  // Where layer l's shard starts in the shard buffer.
  size_t shard_offset(int l) const { return layers_[l].offset; }
  // Layer l's range in the flat parameter buffer.
  model::ParamRange range(int l) const { return layers_[l].range; }
  // The real (unpadded) elements rank owns, as indices into the flat buffer.
  model::ParamRange owned(int l, int rank) const;

  // Copies rank's shards out of full params (padding zero).
  template <class T>
  void take_shard(int rank, std::span<const T> params, std::span<T> shard) const;
  // Writes rank's real shard elements, widened, into `out` (the full flat vector).
  template <class T>
  void put_shard(int rank, std::span<const T> shard, std::vector<float>& out) const;
  // Overwrites every element of layer l that rank does not own with NaN.
  template <class T>
  void poison(int l, int rank, std::span<T> params) const;
  template <class T>
  void poison_all(int rank, std::span<T> params) const {
    for (int l = 0; l < num_layers(); ++l) poison(l, rank, params);
  }

 private:
  struct Layer {
    model::ParamRange range;
    size_t shard = 0;
    size_t offset = 0;
  };
  int ranks_;
  size_t shard_size_ = 0;
  std::vector<Layer> layers_;
};

inline Zero3Layout::Zero3Layout(const model::ParamLayout& layout, int ranks) : ranks_(ranks) {
  for (int l = 0; l < layout.num_layers(); ++l) {
    const model::ParamRange r = layout.layer_range(l);
    const size_t s = (r.size() + ranks - 1) / ranks;
    layers_.push_back({r, s, shard_size_});
    shard_size_ += s;
  }
}

inline model::ParamRange Zero3Layout::owned(int l, int rank) const {
  const Layer& L = layers_[l];
  const size_t begin = std::min(L.range.begin + rank * L.shard, L.range.end);
  return {begin, std::min(begin + L.shard, L.range.end)};
}

template <class T>
void Zero3Layout::take_shard(int rank, std::span<const T> params, std::span<T> shard) const {
  std::fill(shard.begin(), shard.end(), T(0.0f));
  for (int l = 0; l < num_layers(); ++l) {
    const model::ParamRange o = owned(l, rank);
    std::copy(params.begin() + o.begin, params.begin() + o.end, shard.begin() + shard_offset(l));
  }
}

template <class T>
void Zero3Layout::put_shard(int rank, std::span<const T> shard, std::vector<float>& out) const {
  for (int l = 0; l < num_layers(); ++l) {
    const model::ParamRange o = owned(l, rank);
    for (size_t i = 0; i < o.size(); ++i) out[o.begin + i] = widen(shard[shard_offset(l) + i]);
  }
}

template <class T>
void Zero3Layout::poison(int l, int rank, std::span<T> params) const {
  const T nan(std::numeric_limits<float>::quiet_NaN());
  const model::ParamRange r = range(l), o = owned(l, rank);
  std::fill(params.begin() + r.begin, params.begin() + o.begin, nan);
  std::fill(params.begin() + o.end, params.begin() + r.end, nan);
}

// What the hooks need from the rank (all borrowed).
struct Zero3Context {
  RankTimeline* timeline;
  Communicator* comm;
  const TrainConfig* config;
  const Zero3Layout* layout;
  model::MemoryLedger* ledger;       // the strategy's ledger: shards and gathered layers
  model::MemoryLedger* activations;  // the model's ledger, for activations
  PeakMemory* peak;
};

template <class T>
class Zero3Hooks : public PhaseHooks {
 public:
  Zero3Hooks(Zero3Context ctx, std::span<T> params, std::span<T> grads, std::span<T> shard_params,
             std::span<T> shard_grads)
      : PhaseHooks(ctx.timeline),
        ctx_(ctx),
        params_(params),
        grads_(grads),
        shard_params_(shard_params),
        shard_grads_(shard_grads) {}

  void before_forward(int layer) override {
    PhaseHooks::before_forward(layer);
    gather(layer);
  }
  void after_forward(int layer) override { release(layer); }
  void before_backward(int layer) override {
    PhaseHooks::before_backward(layer);
    gather(layer);
  }
  void after_backward(int layer) override {
    reduce_scatter(layer);
    release(layer);
  }
  // Whether the next backward's reduce-scattered gradients overwrite the shard's (the step's
  // first micro-batch) or add into them.
  void set_write_shard(bool write) { write_shard_ = write; }

 private:
  // All-gathers layer l's shards into a buffer of the padded layer and copies the real
  // elements into the model's parameters.
  void gather(int l) {
    const Zero3Layout& z = *ctx_.layout;
    gathered_ = model::TrackedBuffer<T>(ctx_.ledger, model::MemoryCategory::kWeights, z.padded(l));
    std::span<const T> mine = shard_params_.subspan(z.shard_offset(l), z.shard(l));
    ctx_.timeline->collective("all_gather", *ctx_.comm, [&] {
      ctx_.comm->all_gather(mine, gathered_.span(), all_gather_algo(ctx_.config->algo));
    });
    const model::ParamRange r = z.range(l);
    std::copy(gathered_.data(), gathered_.data() + r.size(), params_.begin() + r.begin);
    ctx_.peak->observe(*ctx_.ledger, *ctx_.activations);
  }

  // Frees the gathered layer: the non-owned parameters become NaN again.
  void release(int l) {
    ctx_.layout->poison(l, ctx_.comm->rank(), params_);
    gathered_ = model::TrackedBuffer<T>();
  }

  // Reduce-scatters layer l's gradients (padded) and adds rank's part to its shard grads (or
  // writes it: set_write_shard); the full layer gradient is then freed: NaN in the model's
  // buffer, which the next micro-batch's backward overwrites (BackwardScale::write_grads).
  void reduce_scatter(int l) {
    const Zero3Layout& z = *ctx_.layout;
    const model::ParamRange r = z.range(l);
    model::TrackedBuffer<T> staged(ctx_.ledger, model::MemoryCategory::kGradients, z.padded(l));
    std::copy(grads_.begin() + r.begin, grads_.begin() + r.end, staged.data());
    part_.resize(z.shard(l));
    ctx_.peak->observe(*ctx_.ledger, *ctx_.activations);
    ctx_.timeline->collective("reduce_scatter", *ctx_.comm, [&] {
      ctx_.comm->reduce_scatter(std::span<const T>(staged.span()), std::span<T>(part_),
                                ReduceOp::kSum, reduce_scatter_algo(ctx_.config->algo));
    });
    const std::span<T> to = shard_grads_.subspan(z.shard_offset(l), z.shard(l));
    if (write_shard_) {
      write_into(to, std::span<const T>(part_));
    } else {
      add_into(to, std::span<const T>(part_));
    }
    std::fill(grads_.begin() + r.begin, grads_.begin() + r.end,
              T(std::numeric_limits<float>::quiet_NaN()));
  }

  Zero3Context ctx_;
  std::span<T> params_, grads_, shard_params_, shard_grads_;
  model::TrackedBuffer<T> gathered_;
  std::vector<T> part_;  // (s_l) this rank's summed chunk of the layer being reduce-scattered
  bool write_shard_ = false;
};

}  // namespace dtsim::train
