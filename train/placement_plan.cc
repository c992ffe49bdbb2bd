#include "train/placement_plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

#include "model/layer_stack.h"
#include "train/parallelize.h"
#include "train/pipeline_parallel/pipeline_parallel.h"

namespace dtsim::train {
namespace {

std::string where(const MeshCoord& at) {
  return fmt::format("the rank at pp {}, tp {}, ep {}", at.pp, at.tp, at.ep);
}

// The one holder of a tensor along an axis, or a logic_error naming it.
int only_holder(const std::vector<int>& holders, const std::string& name, const char* axis) {
  if (holders.empty()) throw std::logic_error("placement: no rank holds parameter " + name);
  if (holders.size() > 1) {
    throw std::logic_error(
        fmt::format("placement: {} is held by {} {} coordinates; a {} "
                    "tensor has one holder",
                    name, holders.size(), axis, axis));
  }
  return holders[0];
}

}  // namespace

std::vector<TensorChunk> TensorPlacement::chunks(const MeshShape& shape,
                                                 const MeshCoord& at) const {
  const AxisPlacement &pp = on(MeshAxis::kPp), &ep = on(MeshAxis::kEp), &tp = on(MeshAxis::kTp);
  if (pp.kind == AxisPlacement::Kind::kHeld && pp.index != at.pp) return {};
  if (ep.kind == AxisPlacement::Kind::kHeld && ep.index != at.ep) return {};
  if (tp.kind != AxisPlacement::Kind::kShard) return {{0, 0, rows, cols}};
  std::vector<TensorChunk> out;
  const int64_t block = (tp.dim == 0 ? rows : cols) / tp.blocks;
  const model::ParamRange r = model::shard_range(static_cast<size_t>(block), shape.tp, at.tp);
  for (int b = 0; b < tp.blocks; ++b) {
    TensorChunk c{0, 0, rows, cols};
    (tp.dim == 0 ? c.row0 : c.col0) = b * block + static_cast<int64_t>(r.begin);
    (tp.dim == 0 ? c.rows : c.cols) = static_cast<int64_t>(r.size());
    out.push_back(c);
  }
  return out;
}

std::array<int64_t, model::kNumMemoryCategories> state_bytes(const StateElements& e,
                                                             model::Precision precision,
                                                             model::OptimizerKind optimizer) {
  using model::MemoryCategory;
  const bool fp32 = precision == model::Precision::kFp32;
  const bool adam = optimizer == model::OptimizerKind::kAdam;
  const bool momentum = adam || optimizer == model::OptimizerKind::kSgdMomentum;
  const int64_t t = fp32 ? 4 : 2;
  std::array<int64_t, model::kNumMemoryCategories> b{};
  b[static_cast<int>(MemoryCategory::kWeights)] = e.weights * t;
  b[static_cast<int>(MemoryCategory::kGradients)] = e.grads * t;
  b[static_cast<int>(MemoryCategory::kMasterWeights)] = fp32 ? 0 : 4 * e.optimizer;
  b[static_cast<int>(MemoryCategory::kAdamM)] = momentum ? 4 * e.optimizer : 0;
  b[static_cast<int>(MemoryCategory::kAdamV)] = adam ? 4 * e.optimizer : 0;
  return b;
}

ModelPlacement::ModelPlacement(const TrainConfig& config) {
  const bool solo = config.strategy == Strategy::kSingle || config.strategy == Strategy::kAccum;
  shape_ = solo ? MeshShape{} : config.mesh();
  zero_ = solo ? 0 : zero_stage(config);
  full_ = model_spec(config).layout(config);
  for (const model::ParamView& v : full_.views()) {
    index_[v.name] = static_cast<int>(tensors_.size());
    tensors_.push_back({.name = v.name, .rows = v.rows, .cols = v.cols, .vector = v.cols == 1});
  }
  if (zero_ >= 1) {  // a wrong ZeRO owner is refused before any work
    check_zero_owners(group(0));
    check_zero_owners(group(1));
  }
  std::vector<std::vector<int>> stages(tensors_.size()), eps(tensors_.size());
  const pipeline::ScheduleSpec sched = schedule_spec(config);
  positions_.resize(static_cast<size_t>(shape_.pp) * shape_.tp * shape_.ep);
  for (int s = 0; s < shape_.pp; ++s) {
    for (int t = 0; t < shape_.tp; ++t) {
      for (int e = 0; e < shape_.ep; ++e) {
        const MeshCoord at{.dp = e, .tp = t, .pp = s, .ep = e, .ep_group = 0};
        Position& p = positions_[(static_cast<size_t>(s) * shape_.tp + t) * shape_.ep + e];
        if (shape_.pp > 1) {
          for (int c = s; c < sched.stages * sched.virtual_stages; c += sched.stages) {
            p.chunks.push_back(model::layout_of(pipeline::layers_of_chunk(
                config, sched, c,
                {.tp_rank = t, .tp_size = shape_.tp, .ep_rank = e, .ep_size = shape_.ep})));
          }
        } else {
          p.chunks.push_back(model::layout_of(rank_layers(config, shape_, at)));
        }
        for (const model::ParamLayout& l : p.chunks) {
          p.parts.push_back(model_spec(config).dp_parts(config, shape_, l));
        }
        place(p, at, stages, eps);
      }
    }
  }
  for (size_t i = 0; i < tensors_.size(); ++i) {
    TensorPlacement& t = tensors_[i];
    if (stages[i].empty()) throw std::logic_error("placement: no rank holds parameter " + t.name);
    if (shape_.pp > 1) {
      t.params[static_cast<int>(MeshAxis::kPp)] =
          AxisPlacement::held(only_holder(stages[i], t.name, "pp"));
    }
    if (shape_.ep > 1 && t.expert) {
      t.params[static_cast<int>(MeshAxis::kEp)] =
          AxisPlacement::held(only_holder(eps[i], t.name, "ep"));
    }
    const bool many = group(t.expert ? 1 : 0) > 1;
    const AxisPlacement shard = many ? AxisPlacement::zero_shard() : AxisPlacement::replicate();
    t.params[static_cast<int>(MeshAxis::kDp)] = zero_ == 3 ? shard : AxisPlacement::replicate();
    t.grads_dp = many ? AxisPlacement::partial() : AxisPlacement::replicate();
    t.synced_grads_dp = zero_ >= 2 ? shard : AxisPlacement::replicate();
    t.state_dp = zero_ >= 1 ? shard : AxisPlacement::replicate();
  }
}

void ModelPlacement::place(const Position& p, const MeshCoord& at,
                           std::vector<std::vector<int>>& stages,
                           std::vector<std::vector<int>>& eps) {
  for (size_t c = 0; c < p.chunks.size(); ++c) {
    // A fused tensor is laid out as several local tensors of one name, one per block.
    std::map<std::string, int> blocks, seen;
    for (const model::ParamView& v : p.chunks[c].views()) ++blocks[v.name];
    for (const model::ParamView& v : p.chunks[c].views()) {
      const auto it = index_.find(v.name);
      if (it == index_.end()) {
        throw std::logic_error("placement: " + where(at) + " holds " + v.name +
                               ", which the model does not have");
      }
      TensorPlacement& t = tensors_[it->second];
      const int n = blocks[v.name], b = seen[v.name]++;
      AxisPlacement tp = AxisPlacement::replicate();
      const model::TensorShard& sh = v.shard;
      if (sh.full_rows == 0) {
        if (v.rows != t.rows || v.cols != t.cols || n > 1) {
          throw std::logic_error(
              fmt::format("placement: {} holds {} as ({}, {}) without a shard; "
                          "the model's is ({}, {})",
                          where(at), v.name, v.rows, v.cols, t.rows, t.cols));
        }
      } else {
        const int dim = v.cols == t.cols ? 0 : 1;
        const int64_t full = dim == 0 ? t.rows : t.cols, off = dim == 0 ? sh.row0 : sh.col0;
        const int64_t len = dim == 0 ? v.rows : v.cols, block = full / n;
        const model::ParamRange r =
            model::shard_range(static_cast<size_t>(block), shape_.tp, at.tp);
        const int64_t begin = b * block + static_cast<int64_t>(r.begin);
        if (sh.full_rows != t.rows || sh.full_cols != t.cols || (dim == 1 && v.rows != t.rows) ||
            full % n != 0 || begin != off || static_cast<int64_t>(r.size()) != len) {
          throw std::logic_error(fmt::format(
              "placement: {} holds {} [{}, {}) of dim {} ({}), but shard({}) over tp {} gives "
              "tp rank {} [{}, {}) (a wrong shard offset)",
              where(at), v.name, off, off + len, dim, full, dim, shape_.tp, at.tp, begin,
              begin + static_cast<int64_t>(r.size())));
        }
        tp = AxisPlacement::shard(dim, n);
      }
      AxisPlacement& on_tp = t.params[static_cast<int>(MeshAxis::kTp)];
      if (at.tp > 0 && on_tp != tp) {
        throw std::logic_error("placement: the tp ranks hold " + v.name + " as " + on_tp.str() +
                               " and as " + tp.str());
      }
      on_tp = tp;
      for (const model::ParamRange& r : p.parts[c].experts) {
        if (v.offset >= r.begin && v.offset < r.end) t.expert = true;
      }
      const int i = it->second;
      if (std::find(stages[i].begin(), stages[i].end(), at.pp) == stages[i].end()) {
        stages[i].push_back(at.pp);
      }
      if (std::find(eps[i].begin(), eps[i].end(), at.ep) == eps[i].end()) eps[i].push_back(at.ep);
    }
  }
}

const TensorPlacement& ModelPlacement::tensor(const std::string& name) const {
  const auto it = index_.find(name);
  if (it == index_.end()) throw std::logic_error("placement: no tensor named " + name);
  return tensors_[it->second];
}

const ModelPlacement::Position& ModelPlacement::position(const MeshCoord& at) const {
  return positions_.at((static_cast<size_t>(at.pp) * shape_.tp + at.tp) * shape_.ep + at.ep);
}

const std::vector<model::ParamLayout>& ModelPlacement::chunks(const MeshCoord& at) const {
  return position(at).chunks;
}

const std::vector<DpParts>& ModelPlacement::dp_parts(const MeshCoord& at) const {
  return position(at).parts;
}

bool ModelPlacement::writes(const std::string& name, const MeshCoord& at) const {
  const TensorPlacement& t = tensor(name);
  for (int a = 0; a < kMeshAxes; ++a) {
    const auto axis = static_cast<MeshAxis>(a);
    if (axis_in_data_parallel(axis)) continue;  // the data-parallel wrapper names the writer
    if (t.on(axis).kind == AxisPlacement::Kind::kReplicate && at.on(axis) != 0) return false;
  }
  return true;
}

StateElements ModelPlacement::elements(const MeshCoord& at, bool largest_shards) const {
  const Position& p = position(at);
  const int index[2] = {largest_shards ? 0 : at.dp_cp, largest_shards ? 0 : at.ep_group};
  const int sizes[2] = {group(0), group(1)};
  StateElements e;
  for (size_t c = 0; c < p.chunks.size(); ++c) {
    const model::ParamLayout& l = p.chunks[c];
    const int64_t n = static_cast<int64_t>(l.size());
    e.params += n;
    if (zero_ == 0) {
      e.weights += n, e.grads += n, e.optimizer += n;
    } else if (zero_ <= 2) {
      int64_t shard = 0;
      for (int k = 0; k < 2; ++k) {
        size_t size = 0;
        for (const model::ParamRange& r : k == 0 ? p.parts[c].dense : p.parts[c].experts) {
          size += r.size();
        }
        if (size > 0) shard += static_cast<int64_t>(zero_shard(size, sizes[k], index[k]).size());
      }
      e.weights += n, e.grads += zero_ == 2 ? shard : n, e.optimizer += shard;
    } else {
      int64_t shard = 0;
      for (const Zero3Segment& s : zero3_segments(l, p.parts[c], sizes)) shard += s.shard;
      e.weights += shard, e.grads += shard, e.optimizer += shard;
      e.gathered = std::max(e.gathered, static_cast<int64_t>(l.max_layer_size()));
    }
  }
  return e;
}

std::vector<model::ParamRange> ModelPlacement::zero3_held(int rank) const {
  if (zero_ != 3) return {};
  const MeshCoord at = mesh_coord(shape_, rank);
  const Position& p = position(at);
  const int sizes[2] = {group(0), group(1)};
  const int index[2] = {at.dp_cp, at.ep_group};
  std::vector<model::ParamRange> out;
  size_t base = 0;
  for (size_t c = 0; c < p.chunks.size(); ++c) {
    for (const Zero3Segment& s : zero3_segments(p.chunks[c], p.parts[c], sizes)) {
      const model::ParamRange o = zero3_owned(s, index[s.part]);
      out.push_back({base + o.begin, base + o.end});
    }
    base += p.chunks[c].size();
  }
  return out;
}

}  // namespace dtsim::train
