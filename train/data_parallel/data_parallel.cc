#include "train/data_parallel/data_parallel.h"

#include <algorithm>

namespace dtsim::train {

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
          mine.push_back({.layer = l, .part = part, .range = {begin, end}});
        }
      }
    }
    std::sort(mine.begin(), mine.end(), [](const Zero3Segment& a, const Zero3Segment& b) {
      return a.range.begin < b.range.begin;
    });
    for (Zero3Segment& s : mine) {
      const size_t n = static_cast<size_t>(sizes[s.part]);
      s.shard = (s.range.size() + n - 1) / n;
      s.offset = offset;
      offset += s.shard;
      out.push_back(s);
    }
  }
  return out;
}

model::ParamRange zero3_owned(const Zero3Segment& s, int rank) {
  const size_t begin = std::min(s.range.begin + rank * s.shard, s.range.end);
  return {begin, std::min(begin + s.shard, s.range.end)};
}

}  // namespace dtsim::train
