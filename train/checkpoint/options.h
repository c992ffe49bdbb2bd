// What a training run saves and resumes from (dtsim train --save DIR --save-every K
// --resume DIR): the one field train/config.h holds for checkpoints.
#pragma once

#include <string>

namespace dtsim::train::checkpoint {

struct Options {
  std::string save_dir;    // empty: no saves
  int save_every = 0;      // also save after every K-th step (0: after the last one only)
  std::string resume_dir;  // empty: start from step 0; else from the step it holds
  bool active() const { return !save_dir.empty() || !resume_dir.empty(); }
  // Whether to save after `done` steps of a run of `steps`.
  bool saves_after(int done, int steps) const {
    return !save_dir.empty() && (done == steps || (save_every > 0 && done % save_every == 0));
  }
};

}  // namespace dtsim::train::checkpoint
