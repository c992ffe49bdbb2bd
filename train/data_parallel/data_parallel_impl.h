// DataParallel's template members (data_parallel.h states the algorithm).
#pragma once

#include <string>
#include <utility>

namespace dtsim::train {

// Phase timing plus the wrapper's per-layer communication.
template <class T>
class DataParallel<T>::Hooks : public PhaseHooks {
 public:
  Hooks(RankTimeline* timeline, DataParallel& dp) : PhaseHooks(timeline), dp_(dp) {}
  // ZeRO-3: a layer is gathered around each use and its gradients reduce-scattered after
  // its backward (a split backward's weight half); a layer with expert segments (step-scoped) stays
  // gathered from its first use of the step until sync_gradients, since expert parallelism
  // completes its gradients only then (finish_expert_gradients).
  void before_forward(int layer) override {
    PhaseHooks::before_forward(layer);
    if (dp_.zero_ == 3 && !dp_.gathered_now_[layer]) dp_.gather(layer);
  }
  void after_forward(int layer) override {
    if (dp_.zero_ == 3 && !dp_.step_scoped_[layer]) dp_.release(layer);
  }
  void before_backward(int layer) override {
    PhaseHooks::before_backward(layer);
    if (dp_.zero_ == 3 && !dp_.gathered_now_[layer]) dp_.gather(layer);
  }
  void after_backward(int layer) override {
    if (dp_.zero_ == 3) {
      if (dp_.step_scoped_[layer]) return;
      dp_.reduce_scatter_layer(layer);
      if (dp_.gathered_now_[layer]) dp_.release(layer);  // a split's input half released it
    } else if (!dp_.buckets_.empty()) {
      dp_.bucket_done(layer);
    }
  }
  // ZB-H1: the weight half reads no parameter, so the layer is released between the halves.
  void after_backward_input(int layer) override {
    if (dp_.zero_ == 3 && !dp_.step_scoped_[layer]) dp_.release(layer);
  }

 private:
  DataParallel& dp_;
};

template <class T>
DataParallel<T>::DataParallel(DpContext ctx, const model::ParamLayout& layout, DpParts parts,
                              std::span<T> params, std::span<T> grads)
    : ctx_(ctx),
      zero_(ctx.zero),
      divide_(ctx.config->pitfall != Pitfall::kForgetDivide && ctx.replicas > 1),
      params_(params),
      grads_(grads) {
  hooks_ = std::make_unique<Hooks>(ctx_.time_phases ? ctx_.timeline : &no_timeline_, *this);
  for (int k = 0; k < 2; ++k) {
    Part& p = parts_.emplace_back();
    p.ranges = k == 0 ? parts.dense : parts.experts;
    p.group = group_of(k);
    for (size_t i = 0; i < p.ranges.size(); ++i) {
      p.size += p.ranges[i].size();
      if (i > 0 && p.ranges[i].begin != p.ranges[i - 1].end) p.contiguous = false;
    }
  }
  if (zero_ == 0) {
    opt_ = make_slice_optimizer(*ctx_.config, params_, &ledger_);
    const bool one_part =
        parts_[1].ranges.empty() && parts_[0].contiguous && parts_[0].size == params_.size();
    if (ctx_.layer_hooks && one_part && ctx_.dp != nullptr) {
      buckets_ = ddp_buckets(layout, sizeof(T), ctx_.config->bucket_bytes);
    }
    return;
  }
  if (zero_ <= 2) {
    for (Part& p : parts_) {
      if (p.size == 0) continue;
      const int n = p.group ? p.group->size() : 1, r = p.group ? p.group->rank() : 0;
      check_zero_owners(n);
      p.mine = zero_shard(p.size, n, r);
      if (!p.contiguous) {
        p.packed_params.resize(p.size);
        pack(p, std::span<const T>(params_), std::span<T>(p.packed_params));
      }
      p.shard_grads = model::TrackedBuffer<T>(zero_ == 2 ? &ledger_ : nullptr,
                                              model::MemoryCategory::kGradients, p.mine.size());
      p.opt = make_slice_optimizer(*ctx_.config,
                                   part_params(p).subspan(p.mine.begin, p.mine.size()), &ledger_);
    }
    return;
  }
  // ZeRO 3: the shards, the model's buffer poisoned outside them.
  const int sizes[2] = {ctx_.dp ? ctx_.dp->size() : 1, ctx_.expert_dp ? ctx_.expert_dp->size() : 1};
  for (int n : sizes) check_zero_owners(n);
  segments_ = zero3_segments(layout, parts, sizes);
  layer_segments_.resize(layout.num_layers());
  step_scoped_.assign(layout.num_layers(), 0);
  gathered_now_.assign(layout.num_layers(), 0);
  size_t total = 0;
  for (size_t i = 0; i < segments_.size(); ++i) {
    layer_segments_[segments_[i].layer].push_back(static_cast<int>(i));
    if (segments_[i].part == 1) step_scoped_[segments_[i].layer] = 1;
    total += segments_[i].shard;
  }
  shard_params_ = model::TrackedBuffer<T>(&ledger_, model::MemoryCategory::kWeights, total);
  shard_grads_ = model::TrackedBuffer<T>(&ledger_, model::MemoryCategory::kGradients, total);
  std::fill(shard_params_.data(), shard_params_.data() + total, T(0.0f));
  for (const Zero3Segment& s : segments_) {
    const model::ParamRange o = zero3_owned(s, rank_in(s.part));
    std::copy(params_.begin() + o.begin, params_.begin() + o.end, shard_params_.data() + s.offset);
  }
  for (int l = 0; l < layout.num_layers(); ++l) release(l);
  opt_ = make_slice_optimizer(*ctx_.config, shard_params_.span(), &ledger_);
  gathered_.resize(segments_.size());
}

template <class T>
std::span<T> DataParallel<T>::part_params(Part& p) {
  if (!p.contiguous) return std::span<T>(p.packed_params);
  return p.ranges.empty() ? std::span<T>() : params_.subspan(p.ranges[0].begin, p.size);
}

template <class T>
void DataParallel<T>::pack(const Part& p, std::span<const T> from, std::span<T> to) const {
  size_t at = 0;
  for (const model::ParamRange& r : p.ranges) {
    std::copy(from.begin() + r.begin, from.begin() + r.end, to.begin() + at);
    at += r.size();
  }
}

template <class T>
void DataParallel<T>::unpack(const Part& p, std::span<const T> from, std::span<T> to) const {
  size_t at = 0;
  for (const model::ParamRange& r : p.ranges) {
    std::copy_n(from.begin() + at, r.size(), to.begin() + r.begin);
    at += r.size();
  }
}

template <class T>
void DataParallel<T>::before_micro_batch(int index, int count) {
  sync_now_ = index == count - 1;  // no_sync before the last micro-batch
  write_shard_ = index == 0;
}

template <class T>
void DataParallel<T>::all_reduce(Communicator& c, std::span<T> g) {
  ctx_.timeline->collective("all_reduce", c,
                            [&] { c.all_reduce(g, ReduceOp::kSum, ctx_.config->algo); });
}

template <class T>
void DataParallel<T>::bucket_done(int layer) {
  if (!sync_now_) return;
  for (const GradBucket& b : buckets_) {
    if (b.first_layer != layer) continue;
    const std::span<T> g = grads_.subspan(b.range.begin, b.range.size());
    all_reduce(*ctx_.dp, g);
    if (divide_) divide(g, ctx_.replicas);
  }
}

template <class T>
void DataParallel<T>::sync_gradients() {
  if (zero_ == 3) {
    // The step-scoped layers' gradients are complete now: reduce-scatter them once.
    const bool write = write_shard_;
    write_shard_ = true;
    for (size_t l = 0; l < step_scoped_.size(); ++l) {
      if (!step_scoped_[l]) continue;
      reduce_scatter_layer(static_cast<int>(l));
      release(static_cast<int>(l));
    }
    write_shard_ = write;
    if (divide_) divide(shard_grads_.span(), ctx_.replicas);
    return;
  }
  if (zero_ == 0) {
    if (!buckets_.empty()) return;  // the hooks reduced every bucket
    for (Part& p : parts_) {
      if (p.size == 0) continue;
      std::span<T> g = p.contiguous ? grads_.subspan(p.ranges[0].begin, p.size) : std::span<T>();
      if (!p.contiguous) {
        p.packed_grads.resize(p.size);
        pack(p, std::span<const T>(grads_), std::span<T>(p.packed_grads));
        g = std::span<T>(p.packed_grads);
      }
      if (p.group != nullptr) all_reduce(*p.group, g);
      if (divide_) divide(g, ctx_.replicas);
      if (!p.contiguous) unpack(p, std::span<const T>(g), grads_);
    }
    return;
  }
  for (Part& p : parts_) {  // ZeRO 1, 2
    if (p.size == 0) continue;
    std::span<const T> g =
        p.contiguous ? grads_.subspan(p.ranges[0].begin, p.size) : std::span<const T>();
    if (!p.contiguous) {
      p.packed_grads.resize(p.size);
      pack(p, std::span<const T>(grads_), std::span<T>(p.packed_grads));
      g = std::span<const T>(p.packed_grads);
    }
    if (p.group != nullptr) {
      ctx_.timeline->collective("reduce_scatter", *p.group, [&] {
        p.group->reduce_scatter(g, p.shard_grads.span(), ReduceOp::kSum,
                                reduce_scatter_algo(ctx_.config->algo));
      });
    } else {
      std::copy(g.begin(), g.end(), p.shard_grads.data());
    }
    if (divide_) divide(p.shard_grads.span(), ctx_.replicas);
  }
}

template <class T>
void DataParallel<T>::optimizer_step() {
  if (zero_ == 0) return opt_->step(params_, grads_);
  if (zero_ == 3) return opt_->step(shard_params_.span(), shard_grads_.span());
  for (Part& p : parts_) {
    if (p.size == 0) continue;
    p.opt->step(part_params(p).subspan(p.mine.begin, p.mine.size()), p.shard_grads.span());
  }
}

template <class T>
void DataParallel<T>::sync_params() {
  if (zero_ != 1 && zero_ != 2) return;
  for (Part& p : parts_) {
    if (p.size == 0) continue;
    const std::span<T> all = part_params(p);
    if (p.group != nullptr) {
      ctx_.timeline->collective("all_gather", *p.group, [&] {
        p.group->all_gather(std::span<const T>(all.subspan(p.mine.begin, p.mine.size())), all,
                            all_gather_algo(ctx_.config->algo));
      });
    }
    if (!p.contiguous) unpack(p, std::span<const T>(all), params_);
  }
}

template <class T>
void DataParallel<T>::gather(int layer) {
  for (int i : layer_segments_[layer]) {
    const Zero3Segment& s = segments_[i];
    Communicator* g = group_of(s.part);
    const size_t n = g ? g->size() : 1;
    gathered_[i] = model::TrackedBuffer<T>(&ledger_, model::MemoryCategory::kWeights, s.shard * n);
    const std::span<const T> mine(shard_params_.data() + s.offset, s.shard);
    if (g != nullptr) {
      ctx_.timeline->collective("all_gather", *g, [&] {
        g->all_gather(mine, gathered_[i].span(), all_gather_algo(ctx_.config->algo));
      });
    } else {
      std::copy(mine.begin(), mine.end(), gathered_[i].data());
    }
    std::copy_n(gathered_[i].data(), s.range.size(), params_.begin() + s.range.begin);
  }
  gathered_now_[layer] = 1;
  if (ctx_.observe) ctx_.observe();
}

template <class T>
void DataParallel<T>::release(int layer) {
  const T nan(std::numeric_limits<float>::quiet_NaN());
  for (int i : layer_segments_[layer]) {
    const Zero3Segment& s = segments_[i];
    const model::ParamRange o = zero3_owned(s, rank_in(s.part));
    std::fill(params_.begin() + s.range.begin, params_.begin() + o.begin, nan);
    std::fill(params_.begin() + o.end, params_.begin() + s.range.end, nan);
    if (!gathered_.empty()) gathered_[i] = model::TrackedBuffer<T>();
  }
  gathered_now_[layer] = 0;
}

template <class T>
void DataParallel<T>::reduce_scatter_layer(int layer) {
  for (int i : layer_segments_[layer]) {
    const Zero3Segment& s = segments_[i];
    Communicator* g = group_of(s.part);
    const size_t n = g ? g->size() : 1;
    model::TrackedBuffer<T> staged(&ledger_, model::MemoryCategory::kGradients, s.shard * n);
    std::copy(grads_.begin() + s.range.begin, grads_.begin() + s.range.end, staged.data());
    std::fill(staged.data() + s.range.size(), staged.data() + s.shard * n, T(0.0f));
    rs_part_.resize(s.shard);
    if (ctx_.observe) ctx_.observe();
    if (g != nullptr) {
      ctx_.timeline->collective("reduce_scatter", *g, [&] {
        g->reduce_scatter(std::span<const T>(staged.span()), std::span<T>(rs_part_), ReduceOp::kSum,
                          reduce_scatter_algo(ctx_.config->algo));
      });
    } else {
      std::copy_n(staged.data(), s.shard, rs_part_.begin());
    }
    const std::span<T> to = shard_grads_.span().subspan(s.offset, s.shard);
    if (write_shard_) {
      write_into(to, std::span<const T>(rs_part_));
    } else {
      add_into(to, std::span<const T>(rs_part_));
    }
    // Freed: the next micro-batch's backward adds into zeros, bitwise a write.
    std::fill(grads_.begin() + s.range.begin, grads_.begin() + s.range.end, T(0.0f));
  }
}

template <class T>
void DataParallel<T>::add_model_state(model::MemoryLedger& out, int64_t model_grads) const {
  using model::MemoryCategory;
  for (int c = 0; c < model::kNumMemoryCategories; ++c) {
    const auto cat = static_cast<MemoryCategory>(c);
    if (cat != MemoryCategory::kActivations) out.add(cat, ledger_.bytes(cat));
  }
  const auto bytes = [](size_t n) { return static_cast<int64_t>(n * sizeof(T)); };
  // Stage 2 frees the full gradient buffer as the reduce-scatter consumes it, stage 3 the
  // full weights too: the model's buffers stand in for what is gathered or staged.
  if (zero_ >= 2) out.add(MemoryCategory::kGradients, -bytes(grads_.size()) - model_grads);
  if (zero_ == 3) out.add(MemoryCategory::kWeights, -bytes(params_.size()));
}

template <class T>
std::vector<float> DataParallel<T>::final_params() const {
  std::vector<float> out(params_.size());
  if (zero_ != 3) {
    for (size_t i = 0; i < out.size(); ++i) out[i] = widen(params_[i]);
    return out;
  }
  for (const Zero3Segment& s : segments_) {
    const model::ParamRange o = zero3_owned(s, rank_in(s.part));
    for (size_t i = 0; i < o.size(); ++i)
      out[o.begin + i] = widen(shard_params_.data()[s.offset + i]);
  }
  return out;
}

template <class T>
std::vector<checkpoint::OptimizerRun> DataParallel<T>::optimizer_runs() {
  std::vector<checkpoint::OptimizerRun> out;
  if (zero_ == 0) {
    for (size_t k = 0; k < parts_.size(); ++k) {
      for (const model::ParamRange& r : parts_[k].ranges) {
        out.push_back({opt_.get(), r.begin, r.begin, r.size(), rank_in(static_cast<int>(k)) == 0});
      }
    }
  } else if (zero_ == 3) {
    for (const Zero3Segment& s : segments_) {
      const model::ParamRange o = zero3_owned(s, rank_in(s.part));
      if (o.size() > 0) out.push_back({opt_.get(), s.offset, o.begin, o.size(), true});
    }
  } else {
    for (Part& p : parts_) {  // the shard [mine) of the packed part, back in local order
      size_t packed = 0;
      for (const model::ParamRange& r : p.ranges) {
        const size_t b = std::max(packed, p.mine.begin),
                     e = std::min(packed + r.size(), p.mine.end);
        if (b < e) {
          out.push_back({p.opt.get(), b - p.mine.begin, r.begin + (b - packed), e - b, true});
        }
        packed += r.size();
      }
    }
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.local < b.local; });
  return out;
}

template <class T>
void DataParallel<T>::load_params(std::span<const float> local) {
  if (zero_ != 3) {
    for (size_t i = 0; i < params_.size(); ++i) params_[i] = T(local[i]);
    for (Part& p : parts_) {
      if (p.size > 0 && !p.contiguous && !p.packed_params.empty()) {
        pack(p, std::span<const T>(params_), std::span<T>(p.packed_params));
      }
    }
    return;
  }
  for (const Zero3Segment& s : segments_) {
    const model::ParamRange o = zero3_owned(s, rank_in(s.part));
    for (size_t i = 0; i < o.size(); ++i) {
      params_[o.begin + i] = T(local[o.begin + i]);
      shard_params_.data()[s.offset + i] = params_[o.begin + i];
    }
  }
}

template <class T>
std::span<float> DataParallel<T>::fp32_params(size_t begin, size_t count) {
  if constexpr (!std::is_same_v<T, float>) {
    return {};
  } else {
    if (zero_ != 3) return params_.subspan(begin, count);
    for (const Zero3Segment& s : segments_) {
      const model::ParamRange o = zero3_owned(s, rank_in(s.part));
      if (o.begin <= begin && begin + count <= o.end) {
        return shard_params_.span().subspan(s.offset + (begin - o.begin), count);
      }
    }
    return {};
  }
}

template <class T>
void DataParallel<T>::fp32_params_loaded() {
  if (zero_ != 3) {
    for (Part& p : parts_) {
      if (p.size > 0 && !p.contiguous && !p.packed_params.empty()) {
        pack(p, std::span<const T>(params_), std::span<T>(p.packed_params));
      }
    }
    return;
  }
  for (const Zero3Segment& s : segments_) {  // as load_params leaves the full buffer
    const model::ParamRange o = zero3_owned(s, rank_in(s.part));
    std::copy_n(shard_params_.data() + s.offset, o.size(), params_.begin() + o.begin);
  }
}

}  // namespace dtsim::train
