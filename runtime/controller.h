// How a controller of the interleaving (the controlled scheduler, schedule/scheduler.h)
// plugs into a World: the World hands it each rank's start and end of a run, and the
// thread transport hands it every scheduling point and every wait. Declared here, below
// the transports and the scheduler, so that the transport calls the scheduler without
// depending on it.
//
// Thread safety: begin_run() between runs; the other calls from rank threads, which the
// implementation serialises.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "runtime/transport/transport.h"

namespace dtsim {

class RunState;

namespace schedule {

enum class Point : uint8_t { kStart, kSend, kLend, kRecv, kRelease, kSettle };
enum class WaitKind : uint8_t { kMessage, kRelease, kRoom, kBudget, kReaders };

// What a blocked rank waits for: `ready` must hold before it can go on.
struct Wait {
  WaitKind kind = WaitKind::kMessage;
  int peer = -1;
  const WaitSite* site = nullptr;  // the collective it is in, for the deadlock report
  const std::function<bool()>* ready = nullptr;
};

class Controller {
 public:
  virtual ~Controller() = default;
  // World::run, before the rank threads start the job.
  virtual void begin_run(RunState* run, std::chrono::milliseconds turn_timeout) = 0;
  // A rank thread, before its job: waits until it may run.
  virtual void enter(int rank) = 0;
  // A rank thread, after its job returned or threw: hands the turn on.
  virtual void leave(int rank) = 0;
  // A scheduling point: may hand the turn to another rank and wait to get it back.
  virtual void yield(int rank, Point point) = 0;
  // The rank cannot go on until wait.ready() holds (or the world aborts): hands the turn
  // on and returns when it is chosen again. Callers re-check their condition in a loop.
  virtual void block(int rank, const Wait& wait) = 0;
  // The schedule so far, with what replays it, for failure reports; `last` choices at most.
  // Any thread, also while ranks run.
  virtual std::string summary(size_t last) const = 0;
};

}  // namespace schedule
}  // namespace dtsim
