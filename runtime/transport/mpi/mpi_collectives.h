// Algo::kMpi over the process's MPI progress thread: the rank posts the call, the progress
// thread runs it as MPI's nonblocking collective on a duplicate of MPI_COMM_WORLD, and the
// rank waits with the World's deadline (and wakes on an abort). A call that times out or
// is aborted cannot be cancelled in MPI: the run fails, and later kMpi calls of this World
// are refused.
//
// Thread safety: one per rank (one rank per process), used by that rank's thread.
#pragma once

#include "runtime/native_collectives.h"
#include "runtime/transport/mpi/mpi_link.h"

namespace dtsim::mpi {

class MpiCollectives final : public NativeCollectives {
 public:
  MpiCollectives(MpiLink* link, int rank) : link_(link), rank_(rank) {}
  void run(const NativeCall& call, const WaitSite& site) override;

 private:
  MpiLink* link_;
  int rank_;
  bool broken_ = false;
};

}  // namespace dtsim::mpi
