// Vocabulary shared by the runtime's public API: element types, reduce ops, algorithms,
// collective kinds and the errors a caller can see. Mirrors torch.distributed's names.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "common/bf16.h"

namespace dtsim {

enum class ReduceOp : uint8_t { kSum, kAvg, kMax, kMin };

enum class DType : uint8_t { kFloat32, kFloat64, kInt32, kInt64, kBFloat16, kByte };

// Algorithm behind one collective call. kAuto picks per collective and message size.
// Which collective has which, their names and the auto rule: algorithms/registry.h.
enum class Algo : uint8_t {
  kAuto,
  kRing,               // bandwidth-optimal, 2(N-1) steps (all_reduce), N-1 (RS, AG)
  kRecursiveDoubling,  // latency-optimal all_reduce, ceil(log2 N) (+2) steps
  kTree,               // binomial tree: reduce to rank 0, then broadcast
  kDirect,             // everyone sends everything to everyone, summed in rank order
  kDeterministic,      // bandwidth-optimal, every element summed in rank order 0..N-1
  kDissemination,      // barrier: ceil(log2 N) rounds of signals
  kMpi,                // the MPI library's own collective (MPI world, one rank per process)
  kShared,             // all_reduce: ranks write each other's buffers (shared memory)
};

enum class OpKind : uint8_t {
  kSend,
  kRecv,
  kBroadcast,
  kReduce,
  kAllReduce,
  kReduceScatter,
  kAllGather,
  kAllToAll,
  kBarrier,
  kGroup,  // communicator creation (new_group / split)
  kCount
};
inline constexpr int kNumOpKinds = static_cast<int>(OpKind::kCount);

// What a world provides its algorithms (bit flags of AlgoRow::needs in
// algorithms/registry.h, and of ProcessModel::world_features). The thread world provides
// nothing beyond the basics.
enum WorldFeature : uint8_t {
  kWorldBasic = 0,
  kWorldMpi = 1,  // an MPI world (ranks are MPI processes): native MPI collectives
};

const char* to_string(ReduceOp op);
const char* to_string(DType t);
const char* to_string(Algo a);
const char* to_string(OpKind k);
// Algorithm names, from the registry's name table (defined in algorithms/registry.cc).
bool parse_algo(const std::string& s, Algo* out);
size_t dtype_size(DType t);

template <class T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<float>() {
  return DType::kFloat32;
}
template <>
constexpr DType dtype_of<double>() {
  return DType::kFloat64;
}
template <>
constexpr DType dtype_of<int32_t>() {
  return DType::kInt32;
}
template <>
constexpr DType dtype_of<int64_t>() {
  return DType::kInt64;
}
template <>
constexpr DType dtype_of<BFloat16>() {
  return DType::kBFloat16;
}
template <>
constexpr DType dtype_of<std::byte>() {
  return DType::kByte;
}

// Base of every error the runtime raises; what() is one line saying what, where, what to do.
struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};
// A caller passed arguments that cannot work (wrong buffer size, bad root, bad group).
struct UsageError : Error {
  using Error::Error;
};
// A blocking wait passed its deadline.
struct TimeoutError : Error {
  using Error::Error;
};
// Another rank failed; this rank was woken so that the world can shut down.
struct AbortedError : Error {
  using Error::Error;
};
// Ranks of one communicator called different collectives at the same sequence number.
struct MismatchError : Error {
  using Error::Error;
};

}  // namespace dtsim
