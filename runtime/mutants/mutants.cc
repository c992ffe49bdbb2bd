#include "runtime/mutants/mutants.h"

namespace dtsim {
namespace {

// In kAllMutants order; built on first use (the rows' spans are defined in another file).
std::span<const PlantedBug> catalog() {
  using namespace mutants;
  static const PlantedBug kBugs[] = {
      {"lend-overwrite", kLendOverwriteRows},
      {"missing-settle", kMissingSettleRows},
      {"ring-wrong-chunk", kRingWrongChunkRows},
      {"split-off-by-one", kSplitOffByOneRows},
      {"recv-wrong-step", {}, recv_wrong_step_transport},
      {"lend-claim-race", {}, lend_claim_race_transport},
      {"shared-early-release", kSharedEarlyReleaseRows},
      {"shared-release-before-sum", kSharedReleaseBeforeSumRows},
  };
  return kBugs;
}

}  // namespace

const PlantedBug* planted(Mutant m) {
  if (m == Mutant::kNone) return nullptr;
  return &catalog()[static_cast<size_t>(m) - 1];
}

const char* mutant_name(Mutant m) { return m == Mutant::kNone ? "none" : planted(m)->name; }

bool parse_mutant(const std::string& name, Mutant* out) {
  if (name == "none") {
    *out = Mutant::kNone;
    return true;
  }
  for (Mutant m : kAllMutants) {
    if (name == mutant_name(m)) {
      *out = m;
      return true;
    }
  }
  return false;
}

std::span<const PlantedBug> all_planted_bugs() { return catalog(); }

}  // namespace dtsim
