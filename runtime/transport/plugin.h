// Transports as plug-ins. Each runtime/transport/<x>/ exports one TransportPlugin: a
// factory of its shared state in one World (a TransportDomain) and, from that, of each
// local rank's Transport. A World opens every plug-in that takes part in its layout (in
// the order of transport_plugins()) and routes each peer to the first domain that reaches
// it: threads alone (one process), MPI alone (one rank per process: self-sends stay with
// the threads), or both (the hybrid). Nothing outside a plug-in names it.
//
// Writing another (sockets, shared memory across processes): implement Transport
// (transport.h, with its contract) and a TransportDomain, and list the plug-in in
// transport_plugins() (plugins.cc). The runtime suites then run over it.
//
// Thread safety: a domain's run hooks (begin_run .. end_run) are called by the World's
// owner thread between runs; make_transport and make_native before the rank threads start.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string>

#include "runtime/native_collectives.h"
#include "runtime/process_model.h"
#include "runtime/transport/transport.h"
#include "runtime/world.h"

namespace dtsim {

class RunState;

// One plug-in's state shared by this process's ranks of one World.
class TransportDomain {
 public:
  virtual ~TransportDomain() = default;
  // Whether this domain carries messages between this process's ranks and global rank
  // `peer` (the same answer for every local rank).
  virtual bool reaches(int peer) const = 0;
  // Local rank `rank`'s endpoint; used only by that rank's thread.
  virtual std::unique_ptr<Transport> make_transport(int rank) = 0;
  // Local rank `rank`'s library collectives (Algo::kMpi), or nullptr where there are none.
  virtual std::unique_ptr<NativeCollectives> make_native(int rank) {
    (void)rank;
    return nullptr;
  }
  // Before the rank threads start a run: "" or a one-line error naming a process that was
  // lost before the run began (its first rank in *lost_rank); then the run does not start.
  virtual std::string begin_run(int* lost_rank) {
    (void)lost_rank;
    return "";
  }
  // After every local rank left the run (failed: the run failed here): "" or a one-line
  // error naming a process that was lost, with its first rank in *lost_rank.
  virtual std::string finish_run(bool failed, int* lost_rank) {
    (void)failed, (void)lost_rank;
    return "";
  }
  // After a run in which no rank failed: a message sent and never received, as an error
  // naming both ranks and both calls (its receiver in *receiver), or "".
  virtual std::string undelivered_report(int* receiver) const {
    (void)receiver;
    return "";
  }
  // Between runs: drops what the run left (messages, cached buffers).
  virtual void end_run() {}
  // Bytes of pooled payload buffers alive now.
  virtual size_t payload_bytes() const { return 0; }
};

struct TransportPlugin {
  const char* name;  // "threads", "mpi"
  // Whether the plug-in takes part in a World laid out as `model`; it may complete the
  // model first (MPI: starts MPI and fills in the job's processes and this process's index).
  // UsageError when the model or the options cannot run on it.
  bool (*joins)(ProcessModel& model, const WorldOptions& options);
  // Its state for one World, reporting into `run` (which outlives it).
  std::unique_ptr<TransportDomain> (*open)(RunState& run, const ProcessModel& model);
};

// Every plug-in built into the runtime, in routing order (plugins.cc).
std::span<const TransportPlugin* const> transport_plugins();

}  // namespace dtsim
