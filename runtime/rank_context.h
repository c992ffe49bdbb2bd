// Everything one rank owns in the runtime: its transport endpoint, traffic counters and
// trace. Every communicator of that rank points at it. Used only by the rank's thread
// while a run is active, then read by the World's owner.
#pragma once

#include <cstdint>
#include <memory>

#include "runtime/diagnostics/counters.h"
#include "runtime/diagnostics/flight_recorder.h"
#include "runtime/diagnostics/trace.h"
#include "runtime/native_collectives.h"
#include "runtime/transport/transport.h"

namespace dtsim {

struct PlantedBug;

struct RankContext {
  int rank = 0;
  std::unique_ptr<Transport> transport;
  RankCounters counters;
  RankTrace trace;  // trace.h; written only when tracing
  bool tracing = false;
  size_t lend_bytes = SIZE_MAX;         // Exchange::send_or_lend lends payloads this large
  uint8_t world_features = 0;           // WorldFeature bits (types.h) of this world
  const PlantedBug* planted = nullptr;  // a bug planted by a test (planted.h), or none

  FlightRecorder* recorder = nullptr;  // owned by RunState; every collective is recorded
  // Algo::kMpi, where the world has one (an MPI world of one rank per process).
  std::unique_ptr<NativeCollectives> native;
};

}  // namespace dtsim
