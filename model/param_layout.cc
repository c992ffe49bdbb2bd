#include "model/param_layout.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "model/check.h"
#include "model/rng.h"

namespace dtsim::model {

void ParamLayout::begin_layer(std::string name) {
  layers_.push_back({size_, size_});
  layer_names_.push_back(std::move(name));
}

size_t ParamLayout::add(std::string name, int rows, int cols) {
  DTSIM_CHECK(!layers_.empty() && rows > 0 && cols > 0);
  ParamView v{std::move(name), size_, rows, cols, num_layers() - 1, {}};
  size_ += v.size();
  layers_.back().end = size_;
  views_.push_back(std::move(v));
  return views_.back().offset;
}

size_t ParamLayout::add(std::string name, int rows, int cols, TensorShard shard) {
  const size_t offset = add(std::move(name), rows, cols);
  views_.back().shard = shard;
  return offset;
}

std::vector<ParamSlice> slices_into(const ParamLayout& local, const ParamLayout& full) {
  std::vector<ParamSlice> slices;
  for (const ParamView& v : local.views()) {
    const ParamView& f = full.view(v.name);
    const TensorShard& s = v.shard;
    if (s.full_rows == 0) {  // the whole tensor
      DTSIM_CHECK(f.rows == v.rows && f.cols == v.cols);
      slices.push_back({v.offset, f.offset, v.size()});
      continue;
    }
    DTSIM_CHECK(f.rows == s.full_rows && f.cols == s.full_cols);
    DTSIM_CHECK(s.row0 + v.rows <= f.rows && s.col0 + v.cols <= f.cols);
    if (v.cols == f.cols) {  // whole rows: one run
      slices.push_back({v.offset, f.offset + size_t(s.row0) * f.cols, v.size()});
      continue;
    }
    for (int r = 0; r < v.rows; ++r) {
      slices.push_back({v.offset + size_t(r) * v.cols,
                        f.offset + size_t(s.row0 + r) * f.cols + s.col0, size_t(v.cols)});
    }
  }
  return slices;
}

size_t ParamLayout::max_layer_size() const {
  size_t m = 0;
  for (const ParamRange& r : layers_) m = std::max(m, r.size());
  return m;
}

const ParamView& ParamLayout::view(const std::string& name) const {
  for (const ParamView& v : views_) {
    if (v.name == name) return v;
  }
  std::fprintf(stderr, "ParamLayout: no tensor named '%s'\n", name.c_str());
  std::abort();
}

ParamRange shard_range(size_t n, int parts, int index) {
  DTSIM_CHECK(parts > 0 && index >= 0 && index < parts);
  const size_t base = n / parts;
  const size_t extra = n % parts;
  const size_t i = static_cast<size_t>(index);
  const size_t begin = i * base + std::min(i, extra);
  return {begin, begin + base + (i < extra ? 1 : 0)};
}

std::vector<float> init_params(const ParamLayout& layout, uint64_t seed) {
  std::vector<float> values(layout.size());
  int fan_in = 1;
  for (size_t t = 0; t < layout.views().size(); ++t) {
    const ParamView& v = layout.views()[t];
    if (v.cols > 1) fan_in = v.cols;  // a bias takes the fan-in of the matrix before it
    const float bound = 1.0f / std::sqrt(static_cast<float>(fan_in));
    SplitMix64 rng(mix_seed(seed, t));
    for (size_t i = 0; i < v.size(); ++i) values[v.offset + i] = rng.uniform(bound);
  }
  return values;
}

}  // namespace dtsim::model
