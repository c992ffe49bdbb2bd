#include "runtime/mutant.h"

namespace dtsim {

const char* mutant_name(Mutant m) {
  switch (m) {
    case Mutant::kNone:
      return "none";
    case Mutant::kLendOverwrite:
      return "lend-overwrite";
    case Mutant::kMissingSettle:
      return "missing-settle";
    case Mutant::kRingWrongChunk:
      return "ring-wrong-chunk";
    case Mutant::kSplitOffByOne:
      return "split-off-by-one";
    case Mutant::kRecvWrongStep:
      return "recv-wrong-step";
    case Mutant::kLendClaimRace:
      return "lend-claim-race";
    case Mutant::kSharedEarlyRelease:
      return "shared-early-release";
    case Mutant::kSharedReleaseBeforeSum:
      return "shared-release-before-sum";
  }
  return "?";
}

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

std::string mutant_names() {
  std::string s;
  for (Mutant m : kAllMutants) s += (s.empty() ? "" : ", ") + std::string(mutant_name(m));
  return s;
}

}  // namespace dtsim
