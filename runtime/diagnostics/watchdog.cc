#include "runtime/diagnostics/watchdog.h"

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cstdio>
#include <mutex>
#include <set>
#include <thread>
#include <tuple>
#include <vector>

#include "runtime/controller.h"
#include "runtime/run_state.h"

namespace dtsim {
namespace {

using Clock = std::chrono::steady_clock;

std::string secs(Clock::duration d) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f s", std::chrono::duration<double>(d).count());
  return buf;
}

std::string call_name(const FlightEntry& e) {
  return e.comm_name + "#" + std::to_string(e.seq) + " " + describe(e.sig);
}

}  // namespace

std::string mismatch_message(uint64_t seq, const std::string& comm_name, int rank_a,
                             const Signature& a, int rank_b, const Signature& b) {
  if (rank_b < rank_a) return mismatch_message(seq, comm_name, rank_b, b, rank_a, a);
  return "collective mismatch at seq " + std::to_string(seq) + ": rank " + std::to_string(rank_a) +
         " called " + describe(a) + ", rank " + std::to_string(rank_b) + " called " + describe(b) +
         " (communicator " + comm_name +
         ", global ranks); every rank must call the same collectives in the same order with "
         "the same sizes";
}

std::string desync_report(const RunState& state) {
  const int n = state.size();
  const auto now = Clock::now();
  std::string out = "desync report (per rank: last completed collective; where it is now):\n";
  std::vector<FlightEntry> cur(n);
  std::vector<bool> in_call(n);
  for (int r = 0; r < n; ++r) {
    const FlightRecorder& fr = state.recorder(r);
    FlightEntry last;
    out += "  rank " + std::to_string(r) + ": last completed ";
    out += fr.last_done(&last) ? call_name(last) : std::string("none");
    in_call[r] = fr.current(&cur[r]);
    const int peer = fr.waiting_on();
    if (in_call[r]) {
      out += "; blocked " + secs(now - cur[r].start) + " in " + call_name(cur[r]);
      if (peer >= 0) out += ", waiting for rank " + std::to_string(peer);
    } else {
      out += std::string("; not in a collective (") + to_string(fr.phase()) + ")";
    }
    out += "\n";
  }
  // Lagging or missing: ranks that a blocked rank waits for but that are not in its call.
  std::set<int> lagging;
  for (int r = 0; r < n; ++r) {
    const int peer = state.recorder(r).waiting_on();
    if (!in_call[r] || peer < 0 || peer >= n) continue;
    if (!in_call[peer] || cur[peer].comm != cur[r].comm || cur[peer].seq != cur[r].seq) {
      lagging.insert(peer);
    }
  }
  out += "lagging or missing rank(s):";
  if (lagging.empty()) out += " none identified (every waited-for rank is in the same call)";
  for (int r : lagging) {
    out += " " + std::to_string(r);
    out += in_call[r] ? " (in " + call_name(cur[r]) + ")"
                      : std::string(" (") + to_string(state.recorder(r).phase()) + ")";
  }
  if (const schedule::Controller* sched = state.options().scheduler) {
    out += "\n" + sched->summary(16);
  }
  return out;
}

bool find_mismatch(const RunState& state, int* rank, std::string* what) {
  const int n = state.size();
  std::vector<FlightEntry> cur(n);
  std::vector<int> order;
  for (int r = 0; r < n; ++r) {
    if (state.recorder(r).current(&cur[r])) order.push_back(r);
  }
  // Same (communicator, sequence number), different fingerprint: always a user bug.
  std::sort(order.begin(), order.end(), [&](int a, int b) {
    return std::tie(cur[a].comm, cur[a].seq, a) < std::tie(cur[b].comm, cur[b].seq, b);
  });
  for (size_t i = 1; i < order.size(); ++i) {
    const FlightEntry& a = cur[order[i - 1]];
    const FlightEntry& b = cur[order[i]];
    if (a.comm == b.comm && a.seq == b.seq && !(a.sig == b.sig)) {
      *rank = order[i - 1];
      *what = mismatch_message(a.seq, a.comm_name, order[i - 1], a.sig, order[i], b.sig);
      return true;
    }
  }
  return false;
}

struct Watchdog::Impl {
  explicit Impl(RunState* s) : state(s), timer(io) {
    const auto t = state->options().timeout / 8;  // no overflow, even at milliseconds::max()
    tick_every = std::clamp<std::chrono::milliseconds>(t, std::chrono::milliseconds(2),
                                                       std::chrono::milliseconds(100));
  }

  void arm() {
    timer.expires_after(tick_every);
    timer.async_wait([this](const boost::system::error_code& ec) {
      if (ec) return;
      tick();
      arm();
    });
  }

  void tick() {
    std::lock_guard<std::mutex> lock(mu);
    if (!active || state->aborted()) return;
    int rank = -1;
    std::string what;
    if (find_mismatch(*state, &rank, &what)) {
      fire(rank, std::make_exception_ptr(MismatchError(what)));
      return;
    }
    // Timeouts are not judged here: a long call that keeps making progress is fine, and
    // each blocking wait has its own deadline on lack of progress, so whether a
    // TimeoutError is raised (and caught) does not race this thread.
  }

  void fire(int rank, std::exception_ptr error) {
    active = false;
    state->fail(rank, std::move(error));
  }

  RunState* state;
  boost::asio::io_context io;
  boost::asio::steady_timer timer;
  std::chrono::milliseconds tick_every{100};
  std::thread thread;
  std::mutex mu;
  bool active = false;
};

Watchdog::Watchdog(RunState* state) : impl_(std::make_unique<Impl>(state)) {
  impl_->arm();
  impl_->thread = std::thread([this] { impl_->io.run(); });
}

Watchdog::~Watchdog() {
  impl_->io.stop();
  impl_->thread.join();
}

void Watchdog::set_active(bool active) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->active = active;
}

}  // namespace dtsim
