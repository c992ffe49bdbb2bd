// The MPI transport as a plug-in (transport/plugin.h): it joins a World whose model is
// MPI (started by mpirun), starting MPI and taking the job's processes and this process's
// index; it reaches the ranks of the other processes, and gives Algo::kMpi where the
// world has one rank per process.
#pragma once

#include "runtime/transport/plugin.h"

namespace dtsim::mpi {

extern const TransportPlugin kMpiPlugin;

}  // namespace dtsim::mpi
