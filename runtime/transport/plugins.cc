// The transport plug-ins built into the runtime, in routing order: a peer goes to the
// first domain that reaches it (plugin.h).
#include "runtime/transport/mpi/mpi_plugin.h"
#include "runtime/transport/plugin.h"
#include "runtime/transport/thread/thread_plugin.h"

namespace dtsim {

std::span<const TransportPlugin* const> transport_plugins() {
  static const TransportPlugin* const kPlugins[] = {&kThreadPlugin, &mpi::kMpiPlugin};
  return kPlugins;
}

}  // namespace dtsim
