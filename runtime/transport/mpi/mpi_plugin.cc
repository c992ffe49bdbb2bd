#include "runtime/transport/mpi/mpi_plugin.h"

#include <string>

#include "runtime/job_start.h"
#include "runtime/run_state.h"
#include "runtime/transport/mpi/mpi_collectives.h"
#include "runtime/transport/mpi/mpi_link.h"
#include "runtime/transport/mpi/mpi_process.h"
#include "runtime/transport/mpi/mpi_transport.h"

namespace dtsim::mpi {
namespace {

class MpiDomain final : public TransportDomain {
 public:
  MpiDomain(RunState& run, const ProcessModel& model) : link_(&run, model, run.options().timeout) {}

  bool reaches(int peer) const override { return !link_.model().is_local(peer); }
  std::unique_ptr<Transport> make_transport(int rank) override {
    return std::make_unique<MpiTransport>(&link_, rank);
  }
  std::unique_ptr<NativeCollectives> make_native(int rank) override {
    // MPI's communicator matches dtsim's only with one rank per process.
    if (link_.model().threads != 1) return nullptr;
    return std::make_unique<MpiCollectives>(&link_, rank);
  }
  std::string begin_run(int* lost_rank) override { return link_.begin_run(lost_rank); }
  std::string finish_run(bool failed, int* lost_rank) override {
    return link_.finish_run(failed, lost_rank);
  }

 private:
  MpiLink link_;
};

bool joins(ProcessModel& model, const WorldOptions& options) {
  if (!model.mpi) return false;
  if (options.scheduler) {
    throw UsageError(
        "the controlled scheduler runs thread worlds only; run without mpirun to use it");
  }
  begin_work();  // passes the job's start (job_start.h) unless the program did
  MpiProcess& process = MpiProcess::instance();
  if (model.threads < 1) {
    throw UsageError("rank threads per process " + std::to_string(model.threads) +
                     " is out of range; use 1 or more");
  }
  model.processes = process.size();
  model.process = process.rank();
  return true;
}

std::unique_ptr<TransportDomain> open(RunState& run, const ProcessModel& model) {
  return std::make_unique<MpiDomain>(run, model);
}

}  // namespace

const TransportPlugin kMpiPlugin = {"mpi", joins, open};

}  // namespace dtsim::mpi
