// A communication library's own collectives, as one more algorithm (Algo::kMpi: MPI's
// MPI_Iallreduce, MPI_Ireduce_scatter, MPI_Iallgatherv, MPI_Ibcast, MPI_Ireduce), so a user
// compares dtsim's algorithms with the library's on the same job. Available only where the
// library's communicator matches the dtsim communicator: the world communicator of an MPI
// world with one rank per process.
//
// Thread safety: one instance per rank, used by that rank's thread.
#pragma once

#include <cstddef>

#include "runtime/transport/transport.h"
#include "runtime/types.h"

namespace dtsim {

struct NativeCall {
  OpKind op = OpKind::kAllReduce;  // kAllReduce, kReduceScatter, kAllGather, kBroadcast, kReduce
  const void* in = nullptr;        // reduce_scatter, all_gather: the input
  void* data = nullptr;            // the output (in place for all_reduce, broadcast, reduce)
  size_t count = 0;                // elements of the full buffer (all_gather: of the output)
  DType dtype = DType::kFloat32;
  ReduceOp reduce = ReduceOp::kSum;  // kAvg runs as kSum; the communicator divides
  int root = 0;
};

class NativeCollectives {
 public:
  virtual ~NativeCollectives() = default;
  // Runs `call` on every rank of the world; a deadline and aborts as in any wait.
  virtual void run(const NativeCall& call, const WaitSite& site) = 0;
};

}  // namespace dtsim
