// Named views into one flat parameter buffer. Gradients use the identical layout in a
// parallel buffer, so a data-parallel bucket or a ZeRO shard is a plain [begin, end) slice,
// and each layer's parameters are contiguous (ZeRO-3 gathers one layer at a time).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace dtsim::model {

// A half-open range [begin, end) of element indices into a flat buffer.
struct ParamRange {
  size_t begin = 0;
  size_t end = 0;
  size_t size() const { return end - begin; }
  bool operator==(const ParamRange&) const = default;
};

// Where a tensor of a rank's local layout sits in the full model's tensor of the same name:
// the block of rows [row0, row0 + rows) and columns [col0, col0 + cols) of a (full_rows,
// full_cols) tensor. full_rows == 0 means the whole tensor (replicated or unsharded).
struct TensorShard {
  int row0 = 0;
  int col0 = 0;
  int full_rows = 0;
  int full_cols = 0;
};

// One named tensor in the flat buffer: row-major (rows, cols); a vector has cols == 1.
struct ParamView {
  std::string name;  // e.g. "block0.w1"
  size_t offset = 0;
  int rows = 0;
  int cols = 0;
  int layer = 0;  // index of the layer that owns it
  TensorShard shard;
  size_t size() const { return static_cast<size_t>(rows) * cols; }
};

// A contiguous run of `count` elements at `local` in a local layout and at `full` in the
// full model's layout.
struct ParamSlice {
  size_t local = 0;
  size_t full = 0;
  size_t count = 0;
};

// Builds and describes the layout: tensors are appended layer by layer.
class ParamLayout {
 public:
  // Starts a new layer; tensors added until the next begin_layer() belong to it.
  void begin_layer(std::string name);
  // Appends a (rows, cols) tensor to the current layer and returns its offset.
  size_t add(std::string name, int rows, int cols);
  // Appends a tensor that is the `shard` block of the full model's tensor `name`.
  size_t add(std::string name, int rows, int cols, TensorShard shard);

  // Total number of parameters (Psi).
  size_t size() const { return size_; }
  int num_layers() const { return static_cast<int>(layers_.size()); }
  // The contiguous range of layer `layer`'s parameters.
  ParamRange layer_range(int layer) const { return layers_.at(layer); }
  const std::string& layer_name(int layer) const { return layer_names_.at(layer); }
  // Size of the largest layer, for per-layer workspaces.
  size_t max_layer_size() const;
  // Every tensor, in buffer order.
  const std::vector<ParamView>& views() const { return views_; }
  // The tensor called `name`; aborts if there is none.
  const ParamView& view(const std::string& name) const;

 private:
  size_t size_ = 0;
  std::vector<ParamView> views_;
  std::vector<ParamRange> layers_;
  std::vector<std::string> layer_names_;
};

// Where each element of `local` lives in `full` (tensors matched by name, each placed by
// its TensorShard), in local order; aborts if a name is missing or a shard does not fit.
std::vector<ParamSlice> slices_into(const ParamLayout& local, const ParamLayout& full);

// Splits [0, n) into `parts` contiguous ranges whose sizes differ by at most one, larger
// first (the usual ZeRO / reduce-scatter chunking); returns range `index`.
ParamRange shard_range(size_t n, int parts, int index);

// Seeded uniform(+-1/sqrt(fan_in)) initial values for `layout` (fan_in = cols of the
// matrix a bias belongs to: the tensor just before it). Same seed, same bits.
std::vector<float> init_params(const ParamLayout& layout, uint64_t seed);

}  // namespace dtsim::model
