// dtsim plants no bugs: its stress command has no --mutant (planted_bugs.h).
#include "train/cli/planted_bugs.h"

namespace dtsim::cli {

std::span<const PlantedBug> planted_bugs() { return {}; }

}  // namespace dtsim::cli
