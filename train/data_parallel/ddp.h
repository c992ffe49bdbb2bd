// DDP's gradient buckets, exposed so tests can work out the expected all-reduce count.
#pragma once

#include <cstddef>
#include <vector>

#include "model/param_layout.h"

namespace dtsim::train {

// A run of whole layers whose gradients are all-reduced together: layers
// [first_layer, last_layer], the contiguous flat range `range`.
struct GradBucket {
  int first_layer = 0;
  int last_layer = 0;
  model::ParamRange range;
};

// Buckets in launch order (backward visits layers last to first): layers are added from the
// last layer down until a bucket holds at least `bucket_bytes` of gradients (`elem_bytes`
// each), as torch DDP fills buckets in reverse order. bucket_bytes == 0 gives no buckets:
// the plain, unbucketed DDP that all-reduces everything once after backward.
std::vector<GradBucket> ddp_buckets(const model::ParamLayout& layout, size_t elem_bytes,
                                    size_t bucket_bytes);

}  // namespace dtsim::train
