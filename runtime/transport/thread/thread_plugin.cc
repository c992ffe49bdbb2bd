#include "runtime/transport/thread/thread_plugin.h"

#include "runtime/planted.h"
#include "runtime/transport/thread/thread_shared.h"
#include "runtime/transport/thread/thread_transport.h"

namespace dtsim {
namespace {

class ThreadDomain final : public TransportDomain {
 public:
  ThreadDomain(RunState& run, const ProcessModel& model) : shared_(&run), model_(model) {}

  bool reaches(int peer) const override { return model_.is_local(peer); }
  std::unique_ptr<Transport> make_transport(int rank) override {
    const PlantedBug* bug = shared_.options().planted;
    if (bug && bug->thread_transport) return bug->thread_transport(&shared_, rank);
    return std::make_unique<ThreadTransport>(&shared_, rank);
  }
  std::string undelivered_report(int* receiver) const override {
    return shared_.undelivered_report(receiver);
  }
  void end_run() override { shared_.reset(); }
  size_t payload_bytes() const override { return shared_.payload_bytes(); }

 private:
  ThreadShared shared_;
  ProcessModel model_;
};

bool joins(ProcessModel&, const WorldOptions&) { return true; }

std::unique_ptr<TransportDomain> open(RunState& run, const ProcessModel& model) {
  return std::make_unique<ThreadDomain>(run, model);
}

}  // namespace

const TransportPlugin kThreadPlugin = {"threads", joins, open};

}  // namespace dtsim
