#include "train/placement.h"

#include <algorithm>
#include <atomic>
#include <stdexcept>

namespace dtsim::train {
namespace {

int own_shard(int rank, int /*size*/) { return rank; }

std::atomic<ScopedZeroOwner::Owner> owner_fn{&own_shard};

}  // namespace

std::string AxisPlacement::str() const {
  switch (kind) {
    case Kind::kReplicate:
      return "replicate";
    case Kind::kShard:
      return "shard(" + std::to_string(dim) + ")";
    case Kind::kPartial:
      return "partial";
    case Kind::kHeld:
      return "held(" + std::to_string(index) + ")";
    case Kind::kZeroShard:
      return "zero-shard";
  }
  return "?";
}

int zero_shard_index(int rank, int size) { return owner_fn.load()(rank, size); }

void check_zero_owners(int size) {
  std::vector<int> owner(size, -1);
  for (int r = 0; r < size; ++r) {
    const int s = zero_shard_index(r, size);
    if (s < 0 || s >= size) {
      throw std::logic_error("ZeRO: rank " + std::to_string(r) + " of a group of " +
                             std::to_string(size) + " owns shard " + std::to_string(s) +
                             ", which does not exist");
    }
    if (owner[s] >= 0) {
      throw std::logic_error("ZeRO: ranks " + std::to_string(owner[s]) + " and " +
                             std::to_string(r) + " of a group of " + std::to_string(size) +
                             " both own shard " + std::to_string(s) +
                             "; every shard needs exactly one owner");
    }
    owner[s] = r;
  }
}

model::ParamRange zero_shard(size_t n, int size, int rank) {
  return model::shard_range(n, size, zero_shard_index(rank, size));
}

std::vector<Zero3Segment> zero3_segments(const model::ParamLayout& layout, const DpParts& parts,
                                         const int sizes[2]) {
  std::vector<Zero3Segment> out;
  size_t offset = 0;
  for (int l = 0; l < layout.num_layers(); ++l) {
    const model::ParamRange layer = layout.layer_range(l);
    std::vector<Zero3Segment> mine;
    for (int part = 0; part < 2; ++part) {
      for (const model::ParamRange& r : part == 0 ? parts.dense : parts.experts) {
        const size_t begin = std::max(r.begin, layer.begin), end = std::min(r.end, layer.end);
        if (begin >= end) continue;
        // Adjacent runs of one part within the layer are one segment.
        if (!mine.empty() && mine.back().part == part && mine.back().range.end == begin) {
          mine.back().range.end = end;
        } else {
          mine.push_back({.layer = l, .part = part, .range = {begin, end}, .group = sizes[part]});
        }
      }
    }
    std::sort(mine.begin(), mine.end(), [](const Zero3Segment& a, const Zero3Segment& b) {
      return a.range.begin < b.range.begin;
    });
    for (Zero3Segment& s : mine) {
      const size_t n = static_cast<size_t>(s.group);
      s.shard = (s.range.size() + n - 1) / n;
      s.offset = offset;
      offset += s.shard;
      out.push_back(s);
    }
  }
  return out;
}

model::ParamRange zero3_owned(const Zero3Segment& s, int rank) {
  const size_t index = static_cast<size_t>(zero_shard_index(rank, s.group));
  const size_t begin = std::min(s.range.begin + index * s.shard, s.range.end);
  return {begin, std::min(begin + s.shard, s.range.end)};
}

ScopedZeroOwner::ScopedZeroOwner(Owner owner) : previous_(owner_fn.exchange(owner)) {}

ScopedZeroOwner::~ScopedZeroOwner() { owner_fn.store(previous_); }

}  // namespace dtsim::train
