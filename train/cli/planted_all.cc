// The test binary dtsim_with_mutants: every planted bug of runtime/mutants/ (planted_bugs.h).
#include "runtime/mutants/mutants.h"
#include "train/cli/planted_bugs.h"

namespace dtsim::cli {

std::span<const PlantedBug> planted_bugs() { return all_planted_bugs(); }

}  // namespace dtsim::cli
