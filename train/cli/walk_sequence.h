// dtsim walk --tp T --sequence-parallel: a gpt layer's regions under sequence parallelism,
// the tokens each rank holds and the bytes each collective sends (walk_sequence.cc).
#pragma once

#include <functional>
#include <optional>

namespace CLI {
class App;
}

namespace dtsim::cli {

// Adds --tp and --sequence-parallel to `walk`. The returned function, called after parsing,
// prints the walk and returns its exit code when either was given (0 when sequence
// parallelism sent what plain tensor parallelism sends and both computed the same logits),
// nullopt otherwise. It throws UsageError when one comes without the other or with another
// walk's flag.
std::function<std::optional<int>()> add_walk_sequence(CLI::App* walk);

}  // namespace dtsim::cli
