// What a training run saves and resumes from (dtsim train --save DIR --save-every K
// --resume DIR): the one field train/config.h holds for checkpoints.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace dtsim::train::checkpoint {

struct Options {
  std::string save_dir;    // empty: no saves
  int save_every = 0;      // also save after every K-th step (0: after the last one only)
  std::string resume_dir;  // empty: start from step 0; else from the step it holds
  // Called on global rank 0 after each save ("saved") and after the resume's load ("loaded")
  // with the step, the checkpoint's bytes of data and the wall seconds it took every rank
  // (to the last rank's end: a barrier ends both); may be empty.
  std::function<void(const char* what, int64_t step, uint64_t bytes, double seconds)> on_io;
  bool active() const { return !save_dir.empty() || !resume_dir.empty(); }
  // Whether to save after `done` steps of a run of `steps`.
  bool saves_after(int done, int steps) const {
    return !save_dir.empty() && (done == steps || (save_every > 0 && done % save_every == 0));
  }
};

}  // namespace dtsim::train::checkpoint
