#include <string>

#include "runtime/transport/transport.h"

namespace dtsim {

std::string describe(const Signature& sig) {
  std::string s = to_string(sig.op);
  s += "(numel=" + std::to_string(sig.count);
  s += std::string(", dtype=") + to_string(sig.dtype);
  switch (sig.op) {
    case OpKind::kReduce:
    case OpKind::kAllReduce:
    case OpKind::kReduceScatter:
      s += std::string(", op=") + to_string(sig.reduce);
      s += std::string(", algo=") + to_string(sig.algo);
      break;
    case OpKind::kAllGather:
    case OpKind::kBroadcast:
      s += std::string(", algo=") + to_string(sig.algo);
      break;
    default:
      break;
  }
  if (sig.root >= 0) s += ", root=" + std::to_string(sig.root);
  return s + ")";
}

}  // namespace dtsim
