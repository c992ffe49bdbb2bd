// Alpha-beta costs of the collectives by algorithm (Thakur, Rabenseifner and Gropp 2005,
// "Optimization of Collective Communication Operations in MPICH"; Patarasuk and Yuan 2009
// for the ring): p ranks, n bytes of the whole buffer, a link of latency alpha and
// bandwidth 1 / beta per device and direction.
//
//   all_reduce  ring                2 (p - 1) alpha + 2 (p - 1) / p  n beta
//               tree (binomial: reduce to rank 0, then broadcast, as dtsim's runtime runs it)
//                                   2 log2(p) (alpha + n beta)
//               recursive doubling  log2(p) (alpha + n beta)
//               direct (every rank sends its buffer to every other, at once)
//                                   alpha + (p - 1) n beta
//   reduce_scatter, all_gather ring (p - 1) alpha + (p - 1) / p  n beta
//               shared (one buffer every rank reduces into and reads back: dtsim's threads)
//                                   alpha + n beta, on the shared-memory link
//   all_to_all  direct              alpha + (p - 1) / p  n beta (every message sent at once)
//   send/recv                       alpha + n beta
#pragma once

#include <string>
#include <vector>

#include "train/estimate/hardware.h"

namespace dtsim::train::estimator {

enum class CollectiveKind { kAllReduce, kReduceScatter, kAllGather, kAllToAll, kSendRecv };
enum class Algorithm { kRing, kTree, kRecursiveDoubling, kDirect, kShared };

const char* to_string(CollectiveKind k);
const char* to_string(Algorithm a);
// Parses ring, tree, recursive-doubling, direct (kShared is the calibrated runtime's own).
bool parse_algorithm(const std::string& s, Algorithm* out);
std::vector<std::string> algorithm_names();

// Seconds for one collective of `bytes` (the whole buffer) over p ranks on `link`; 0 when
// p == 1. Algorithms other than ring apply to all_reduce; the rest run ring or direct.
double collective_seconds(CollectiveKind k, Algorithm a, int p, double bytes, const Link& link);

// Bytes one rank sends in that collective (what dtsim's counters measure for the ring).
double collective_bytes_sent(CollectiveKind k, Algorithm a, int p, double bytes);

}  // namespace dtsim::train::estimator
