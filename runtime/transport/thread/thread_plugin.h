// The thread transport as a plug-in (transport/plugin.h): every World opens it; it reaches
// the ranks of this process, through the mailboxes of ThreadShared.
#pragma once

#include "runtime/transport/plugin.h"

namespace dtsim {

extern const TransportPlugin kThreadPlugin;

}  // namespace dtsim
