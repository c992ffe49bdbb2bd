// How a World's ranks are laid out over operating-system processes.
//
//   - threads: one process, every rank a thread (the default; needs no MPI at run time);
//   - MPI: P processes started by mpirun, each running T rank threads (T = 1: one rank per
//     process; T > 1: the hybrid, like NCCL's shared memory inside a node and network
//     between nodes). Global rank = process * T + thread. Same-process peers talk through
//     the mailboxes, other peers through MPI.
//
// Collective algorithms and strategies never see this: they talk to a Transport.
// Thread safety: a value type.
#pragma once

#include <string>

namespace dtsim {

struct ProcessModel {
  bool mpi = false;
  int processes = 1;  // P
  int threads = 1;    // T, rank threads per process
  int process = 0;    // this process's index, 0..P-1 (MPI_COMM_WORLD rank)

  // N rank threads in this process, no MPI.
  static ProcessModel threads_only(int ranks);
  // Under mpirun (OMPI_COMM_WORLD_SIZE, PMIX_RANK or PMI_SIZE set): MPI with
  // `threads_per_process` rank threads per process. Otherwise threads_only(ranks).
  // Reads the environment only; MPI itself starts when the first MPI World is built.
  static ProcessModel from_environment(int ranks, int threads_per_process = 1);
  // True when this process was started by mpirun / mpiexec.
  static bool launched_by_mpi();

  int world_size() const { return processes * threads; }
  // The WorldFeature bits (types.h) a World of this model gives its ranks:
  // kWorldMpi with one rank per process (MPI's communicator then matches dtsim's).
  uint8_t world_features() const;
  int first_rank() const { return process * threads; }
  bool is_local(int rank) const { return rank / threads == process; }
  int process_of(int rank) const { return rank / threads; }
  // "4 rank threads", "4 MPI processes x 2 rank threads", for logs and errors.
  std::string describe() const;
};

// What the program must undo when a termination signal ends the process early, such as
// removing the temporary files of outputs not yet committed. The MPI process's signal thread
// (which replaces the program's own SIGTERM / SIGINT handlers) calls it before the process
// exits on either signal. Set once, before the first World; `cleanup` must be safe to run on
// any thread while other threads still run. Thread safety: both are safe from any thread.
void set_termination_cleanup(void (*cleanup)());
void run_termination_cleanup();

}  // namespace dtsim
