#include "train/report_channel.h"

#include <algorithm>
#include <cstdint>
#include <numeric>

namespace dtsim::train {
namespace {

// a - b, per collective kind and per (communicator, peer). b was taken earlier from the same
// counters, so its communicators are the first of a's (a run only appends them).
RankCounters minus(const RankCounters& a, const RankCounters& b) {
  RankCounters d;
  for (int k = 0; k < kNumOpKinds; ++k) {
    const OpCounters &x = a.by_op[k], &y = b.by_op[k];
    OpCounters& z = d.by_op[k];
    z.calls = x.calls - y.calls;
    z.steps = x.steps - y.steps;
    z.msgs_sent = x.msgs_sent - y.msgs_sent;
    z.bytes_sent = x.bytes_sent - y.bytes_sent;
    z.msgs_recv = x.msgs_recv - y.msgs_recv;
    z.bytes_recv = x.bytes_recv - y.bytes_recv;
    z.nanos = x.nanos - y.nanos;
    for (int i = 0; i < kAlgoSlots; ++i) {
      z.algo_calls[i] = x.algo_calls[i] - y.algo_calls[i];
      z.auto_calls[i] = x.auto_calls[i] - y.auto_calls[i];
    }
  }
  d.groups = a.groups;
  for (size_t g = 0; g < b.groups.size() && g < d.groups.size(); ++g) {
    for (size_t p = 0; p < d.groups[g].peers.size() && p < b.groups[g].peers.size(); ++p) {
      PeerTraffic& x = d.groups[g].peers[p];
      const PeerTraffic& y = b.groups[g].peers[p];
      x = {x.msgs_sent - y.msgs_sent, x.bytes_sent - y.bytes_sent, x.msgs_recv - y.msgs_recv,
           x.bytes_recv - y.bytes_recv};
    }
  }
  return d;
}

// into += d, communicator by communicator (index-aligned, as minus()).
void add(RankCounters& into, const RankCounters& d) {
  for (int k = 0; k < kNumOpKinds; ++k) into.by_op[k] += d.by_op[k];
  for (size_t g = 0; g < d.groups.size(); ++g) {
    if (g >= into.groups.size()) {
      into.groups.push_back(d.groups[g]);
      continue;
    }
    for (size_t p = 0; p < d.groups[g].peers.size(); ++p) {
      PeerTraffic& x = into.groups[g].peers[p];
      const PeerTraffic& y = d.groups[g].peers[p];
      x.msgs_sent += y.msgs_sent;
      x.bytes_sent += y.bytes_sent;
      x.msgs_recv += y.msgs_recv;
      x.bytes_recv += y.bytes_recv;
    }
  }
}

constexpr int kSizeTag = 1, kBytesTag = 2;

}  // namespace

template <class F>
void ReportChannel::booked(F&& fn) {
  const RankCounters before = world_.counters();
  fn();
  add(overhead_, minus(world_.counters(), before));
}

ReportChannel::ReportChannel(Communicator& world) : world_(world) {
  std::vector<int> all(world.size());
  std::iota(all.begin(), all.end(), 0);
  booked([&] { comm_ = world.new_group(all, "report"); });
}

void ReportChannel::all_gather(std::span<const double> in, std::span<double> out) {
  booked([&] { comm_->all_gather(in, out, Algo::kRing); });
}

void ReportChannel::barrier() {
  booked([&] { comm_->barrier(); });
}

RankCounters ReportChannel::training_counters() const {
  RankCounters c = minus(world_.counters(), overhead_);
  // The channel's own communicator carries nothing but reporting.
  std::erase_if(c.groups, [&](const GroupTraffic& g) { return g.name == comm_->name(); });
  return c;
}

std::vector<FlightEntry> ReportChannel::training_flight_record() const {
  std::vector<FlightEntry> calls = world_.flight_record();
  // The group's creation runs on the parent (world) communicator; it happened before
  // training, so only entries of the channel's own communicator need to go.
  std::erase_if(calls, [&](const FlightEntry& e) { return e.comm == comm_->id(); });
  return calls;
}

std::vector<RankOutcome> ReportChannel::gather_to_root(const RankOutcome& mine) {
  std::vector<RankOutcome> all;
  booked([&] {
    if (comm_->rank() != 0) {
      const std::vector<std::byte> bytes = encode(mine);
      const auto size = static_cast<int64_t>(bytes.size());
      comm_->send(std::span<const int64_t>(&size, 1), 0, kSizeTag);
      comm_->send(std::span<const std::byte>(bytes), 0, kBytesTag);
      return;
    }
    all.push_back(mine);
    std::vector<std::byte> bytes;
    for (int r = 1; r < comm_->size(); ++r) {
      int64_t size = 0;
      comm_->recv(std::span<int64_t>(&size, 1), r, kSizeTag);
      bytes.resize(size);
      comm_->recv(std::span<std::byte>(bytes), r, kBytesTag);
      all.push_back(decode(bytes));
    }
  });
  return all;
}

}  // namespace dtsim::train
