// dtsim walk --pp P: a pipeline schedule drawn as the papers draw it (walk_pipeline.cc).
// walk.cc declares the collective walk and asks this file whether the pipeline one was
// asked for.
#pragma once

#include <functional>
#include <optional>

namespace CLI {
class App;
}

namespace dtsim::cli {

// Adds --pp, --micro-batches, --schedule and --virtual-stages to `walk`. The returned
// function, called after parsing, runs the pipeline walk and returns its exit code when
// --pp was given, and returns nullopt (nothing done) otherwise. It throws UsageError when a
// pipeline flag comes without --pp, a collective flag with it, or the schedule is invalid.
std::function<std::optional<int>()> add_walk_pipeline(CLI::App* walk);

}  // namespace dtsim::cli
