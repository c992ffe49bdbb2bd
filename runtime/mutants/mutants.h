// Mutants: bugs planted on purpose (planted.h), so that the stress tester's power to find a
// race is measured instead of assumed. Each decorates release code and perturbs one thing:
// an algorithm's row runs the release row with an ExchangeTap (exchange.h), a transport bug
// overrides one seam of the thread transport. Put in place for one World through planted.h.
// Library dtsim_mutants, linked into test and stress binaries only (the test
// release_has_no_mutants checks that dtsim holds none of it).
//
// Thread safety: everything here is immutable.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "runtime/planted.h"

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
// The bug to plant for `m` (WorldOptions::planted, StressOptions::planted); nullptr for kNone.
const PlantedBug* planted(Mutant m);
// Every mutant's PlantedBug, in kAllMutants order.
std::span<const PlantedBug> all_planted_bugs();

// The mutants' pieces (mutant_algorithms.cc, mutant_transport.cc), for the catalog.
namespace mutants {
extern const std::span<const AlgoRow> kLendOverwriteRows, kMissingSettleRows, kRingWrongChunkRows,
    kSplitOffByOneRows, kSharedEarlyReleaseRows, kSharedReleaseBeforeSumRows;
std::unique_ptr<Transport> recv_wrong_step_transport(ThreadShared* state, int rank);
std::unique_ptr<Transport> lend_claim_race_transport(ThreadShared* state, int rank);
}  // namespace mutants

}  // namespace dtsim
