// dtsim walk --cp N: ring attention's work, ring step by ring step (walk_context.cc).
#pragma once

#include <functional>
#include <optional>

namespace CLI {
class App;
}

namespace dtsim::cli {

// Adds --cp to `walk`. The returned function, called after parsing, prints the walk and
// returns its exit code when --cp was given (0 when the head-tail layout balanced the causal
// work), nullopt otherwise. It throws UsageError when another walk's flag comes with --cp.
std::function<std::optional<int>()> add_walk_context(CLI::App* walk);

}  // namespace dtsim::cli
