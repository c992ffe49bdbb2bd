#include "train/estimate/collective_cost.h"

#include <cmath>

namespace dtsim::train::estimator {

const char* to_string(CollectiveKind k) {
  switch (k) {
    case CollectiveKind::kAllReduce:
      return "all_reduce";
    case CollectiveKind::kReduceScatter:
      return "reduce_scatter";
    case CollectiveKind::kAllGather:
      return "all_gather";
    case CollectiveKind::kAllToAll:
      return "all_to_all";
    case CollectiveKind::kSendRecv:
      return "send/recv";
  }
  return "?";
}

const char* to_string(Algorithm a) {
  switch (a) {
    case Algorithm::kRing:
      return "ring";
    case Algorithm::kTree:
      return "tree";
    case Algorithm::kRecursiveDoubling:
      return "recursive-doubling";
    case Algorithm::kDirect:
      return "direct";
    case Algorithm::kShared:
      return "shared";
  }
  return "?";
}

std::vector<std::string> algorithm_names() {
  return {"ring", "tree", "recursive-doubling", "direct"};
}

bool parse_algorithm(const std::string& s, Algorithm* out) {
  for (Algorithm a :
       {Algorithm::kRing, Algorithm::kTree, Algorithm::kRecursiveDoubling, Algorithm::kDirect}) {
    if (s == to_string(a)) {
      *out = a;
      return true;
    }
  }
  return false;
}

double collective_bytes_sent(CollectiveKind k, Algorithm a, int p, double bytes) {
  if (p <= 1) return 0;
  const double share = (p - 1.0) / p, log_p = std::ceil(std::log2(p));
  switch (k) {
    case CollectiveKind::kAllReduce:
      if (a == Algorithm::kTree) return 2 * log_p * bytes;  // the root's, the busiest rank
      if (a == Algorithm::kRecursiveDoubling) return log_p * bytes;
      if (a == Algorithm::kDirect) return (p - 1) * bytes;
      if (a == Algorithm::kShared) return bytes;  // what dtsim's counters record
      return 2 * share * bytes;
    case CollectiveKind::kReduceScatter:
    case CollectiveKind::kAllGather:
    case CollectiveKind::kAllToAll:
      return share * bytes;
    case CollectiveKind::kSendRecv:
      return bytes;
  }
  return 0;
}

double collective_seconds(CollectiveKind k, Algorithm a, int p, double bytes, const Link& link) {
  if (p <= 1) return 0;
  const double alpha = link.latency, beta = 1 / link.bandwidth;
  const double log_p = std::ceil(std::log2(p));
  const double sent = collective_bytes_sent(k, a, p, bytes);
  switch (k) {
    case CollectiveKind::kAllReduce:
      if (a == Algorithm::kTree) return 2 * log_p * alpha + sent * beta;
      if (a == Algorithm::kRecursiveDoubling) return log_p * alpha + sent * beta;
      if (a == Algorithm::kDirect || a == Algorithm::kShared) return alpha + sent * beta;
      return 2 * (p - 1) * alpha + sent * beta;
    case CollectiveKind::kReduceScatter:
    case CollectiveKind::kAllGather:
      return (a == Algorithm::kDirect ? 1 : p - 1) * alpha + sent * beta;
    case CollectiveKind::kAllToAll:
      return alpha + sent * beta;  // every peer's message in flight at once
    case CollectiveKind::kSendRecv:
      return alpha + sent * beta;
  }
  return 0;
}

}  // namespace dtsim::train::estimator
