// dtsim train's checkpoint flags, declared and checked here so that train.cc only calls
// these (the command itself is add_checkpoint, commands.h).
#pragma once

namespace CLI {
class App;
}

#include "train/checkpoint/options.h"
#include "train/config.h"

namespace dtsim::cli {

// Declares --save, --save-every and --resume into `o`.
void declare_checkpoint_flags(CLI::App* app, train::checkpoint::Options& o);
// Before any work: the flags agree with the run, the checkpoint to resume is complete and
// fits `config`, the save directory is ours (else one line, exit 2). Then sets `config`'s
// checkpoint.on_io to print a line per save and load ("  saved step 3 into ck: 201.6 MB
// in 1.754 s").
void check_checkpoint_flags(const CLI::App& app, train::TrainConfig& config);

}  // namespace dtsim::cli
