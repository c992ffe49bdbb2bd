// The bugs `dtsim stress --mutant` can plant (runtime/planted.h): none in dtsim
// (planted_none.cc); every mutant of runtime/mutants/ in the test binary dtsim_with_mutants
// (planted_all.cc). The one function each links decides which.
#pragma once

#include <span>

#include "runtime/planted.h"

namespace dtsim::cli {

std::span<const PlantedBug> planted_bugs();

}  // namespace dtsim::cli
