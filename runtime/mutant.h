// Mutants: bugs planted on purpose, switched on at run time (WorldOptions::mutant,
// `dtsim stress --mutant NAME`), so that the stress tester's power to find a race can be
// measured instead of assumed. Each names the one place in the runtime it breaks.
#pragma once

#include <cstdint>
#include <string>

namespace dtsim {

enum class Mutant : uint8_t {
  kNone,
  kLendOverwrite,           // all_gather_ring writes its own chunk after lending it (before settle)
  kMissingSettle,           // all_reduce_ring returns without its final settle()
  kRingWrongChunk,          // all_reduce_ring sends chunk s + 1 in its last all-gather step
  kSplitOffByOne,           // all_gather_ring sizes chunks with i <= n % parts (uneven lengths)
  kRecvWrongStep,           // recv takes the newest pending message of the call, not its step's
  kLendClaimRace,           // a lend claim checks for withdrawal before announcing its read
  kSharedEarlyRelease,      // all_reduce_shared releases each peer's buffer once it has the pointer
  kSharedReleaseBeforeSum,  // all_reduce_shared releases every peer's buffer, then sums
};

// Every mutant but kNone, for tests and help texts.
inline constexpr Mutant kAllMutants[] = {
    Mutant::kLendOverwrite,      Mutant::kMissingSettle,         Mutant::kRingWrongChunk,
    Mutant::kSplitOffByOne,      Mutant::kRecvWrongStep,         Mutant::kLendClaimRace,
    Mutant::kSharedEarlyRelease, Mutant::kSharedReleaseBeforeSum};

// "lend-overwrite", ...; "none" for kNone.
const char* mutant_name(Mutant m);
// Parses a name from mutant_name; false if unknown.
bool parse_mutant(const std::string& name, Mutant* out);
// "lend-overwrite, missing-settle, ...", for error messages.
std::string mutant_names();

}  // namespace dtsim
