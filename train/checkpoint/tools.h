// What runs on a checkpoint outside training: the checks before a resume or a save (each a
// one-line UsageError before any work), and dtsim checkpoint inspect / consolidate.
//
// Thread safety: free functions; call from one thread.
#pragma once

#include <string>

#include "train/checkpoint/format.h"
#include "train/config.h"

namespace dtsim::train::checkpoint {

// Reads every chunk of the checkpoint in `folder` and checks its size and checksum; throws
// UsageError naming the first shard that is missing, truncated or corrupted.
void verify_chunks(const std::string& folder, const Metadata& meta);

// Before a run with --resume: the checkpoint is complete and intact, and `config` can
// continue it (the same tensors and shapes, optimizer, batch and seed; --steps beyond its
// step). Throws UsageError naming what differs, e.g. the tensor and both shapes.
void validate_resume(const TrainConfig& config);
// Before a run with --save: checks and creates the directory (store.h, check_save_dir).
void validate_save(const TrainConfig& config);

// A report of the checkpoint in `dir` (step, mesh it was saved from, each tensor's shape,
// chunks and bytes) after verifying every checksum.
std::string inspect(const std::string& dir);
// Writes one unsharded safetensors file `out` (temporary name, then rename): every global
// tensor whole, the parameters first in the model's flat order. Returns its tensor count.
int consolidate(const std::string& dir, const std::string& out);

}  // namespace dtsim::train::checkpoint
