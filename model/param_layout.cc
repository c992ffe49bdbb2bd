#include "model/param_layout.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "model/check.h"

namespace dtsim::model {

void ParamLayout::begin_layer(std::string name) {
  layers_.push_back({size_, size_});
  layer_names_.push_back(std::move(name));
}

size_t ParamLayout::add(std::string name, int rows, int cols) {
  DTSIM_CHECK(!layers_.empty() && rows > 0 && cols > 0);
  ParamView v{std::move(name), size_, rows, cols, num_layers() - 1};
  size_ += v.size();
  layers_.back().end = size_;
  views_.push_back(std::move(v));
  return views_.back().offset;
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

}  // namespace dtsim::model
