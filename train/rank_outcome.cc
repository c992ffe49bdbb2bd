#include "train/rank_outcome.h"

#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <utility>

#include "runtime/types.h"

namespace dtsim::train {
namespace {

using Clock = std::chrono::steady_clock;

class Writer {
 public:
  template <class T>
  void put(const T& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    const auto* p = reinterpret_cast<const std::byte*>(&v);
    out_.insert(out_.end(), p, p + sizeof(T));
  }
  void put(const std::string& s) { put_array(std::span<const char>(s)); }
  void put(Clock::time_point t) { put(int64_t{t.time_since_epoch().count()}); }
  template <class T>
  void put_array(std::span<const T> v) {
    put(uint64_t{v.size()});
    const auto* p = reinterpret_cast<const std::byte*>(v.data());
    out_.insert(out_.end(), p, p + v.size_bytes());
  }
  // by_op, then per communicator its name, members and per-peer traffic.
  void put(const RankCounters& c) {
    put(c.by_op);
    put(uint64_t{c.groups.size()});
    for (const GroupTraffic& g : c.groups) {
      put(g.name);
      put_array(std::span<const int>(g.ranks));
      put_array(std::span<const PeerTraffic>(g.peers));
    }
  }
  std::vector<std::byte> take() { return std::move(out_); }

 private:
  std::vector<std::byte> out_;
};

class Reader {
 public:
  explicit Reader(std::span<const std::byte> in) : in_(in) {}
  template <class T>
  T get() {
    static_assert(std::is_trivially_copyable_v<T>);
    T v;
    std::memcpy(&v, take(sizeof(T)), sizeof(T));
    return v;
  }
  std::string get_string() {
    const auto n = get<uint64_t>();
    const std::byte* p = take(n);
    return std::string(reinterpret_cast<const char*>(p), n);
  }
  Clock::time_point get_time() { return Clock::time_point(Clock::duration(get<int64_t>())); }
  template <class T>
  std::vector<T> get_array() {
    const auto n = get<uint64_t>();
    if (n > in_.size() / sizeof(T)) fail();
    std::vector<T> v(n);
    std::memcpy(v.data(), take(n * sizeof(T)), n * sizeof(T));
    return v;
  }
  RankCounters get_counters() {
    RankCounters c;
    c.by_op = get<decltype(c.by_op)>();
    const auto n = get<uint64_t>();
    if (n > in_.size()) fail();
    for (uint64_t i = 0; i < n; ++i) {
      GroupTraffic g;
      g.name = get_string();
      g.ranks = get_array<int>();
      g.peers = get_array<PeerTraffic>();
      if (g.peers.size() != g.ranks.size()) fail();
      c.groups.push_back(std::move(g));
    }
    return c;
  }
  bool done() const { return pos_ == in_.size(); }

 private:
  [[noreturn]] static void fail() { throw Error("rank outcome: truncated or corrupt encoding"); }
  const std::byte* take(size_t n) {
    if (n > in_.size() - pos_) fail();
    const std::byte* p = in_.data() + pos_;
    pos_ += n;
    return p;
  }
  std::span<const std::byte> in_;
  size_t pos_ = 0;
};

constexpr uint32_t kMagic = 0x6474726f;  // "dtro"

}  // namespace

std::vector<std::byte> encode(const RankOutcome& o) {
  Writer w;
  w.put(kMagic);
  const RankReport& r = o.report;
  w.put(int32_t{r.rank});
  w.put(r.memory);
  w.put(r.counters);
  w.put(r.reporting);
  w.put(uint64_t{r.flight.size()});
  for (const FlightEntry& e : r.flight) {
    w.put(e.comm);
    w.put(e.comm_name);
    w.put(e.seq);
    w.put(e.sig);
    w.put(e.state);
    w.put(e.bytes_sent);
    w.put(e.start);
    w.put(e.end);
  }
  w.put(uint64_t{r.timeline.size()});
  for (const PhaseEvent& e : r.timeline) {
    w.put(e.name);
    w.put(e.start);
    w.put(e.end);
    w.put(e.bytes);
  }
  w.put_array(std::span<const double>(o.step_seconds));
  w.put_array(std::span<const double>(o.losses));
  w.put_array(std::span<const float>(o.params));
  w.put(uint64_t{o.history.size()});
  for (const std::vector<float>& h : o.history) w.put_array(std::span<const float>(h));
  w.put(uint64_t{o.step_sizes.size()});
  for (const std::vector<float>& h : o.step_sizes) w.put_array(std::span<const float>(h));
  return w.take();
}

RankOutcome decode(std::span<const std::byte> bytes) {
  Reader in(bytes);
  if (in.get<uint32_t>() != kMagic) throw Error("rank outcome: not a rank outcome encoding");
  RankOutcome o;
  RankReport& r = o.report;
  r.rank = in.get<int32_t>();
  r.memory = in.get<decltype(r.memory)>();
  r.counters = in.get_counters();
  r.reporting = in.get_counters();
  const auto flights = in.get<uint64_t>();
  for (uint64_t i = 0; i < flights; ++i) {
    FlightEntry e;
    e.comm = in.get<uint64_t>();
    e.comm_name = in.get_string();
    e.seq = in.get<uint64_t>();
    e.sig = in.get<Signature>();
    e.state = in.get<CallState>();
    e.bytes_sent = in.get<uint64_t>();
    e.start = in.get_time();
    e.end = in.get_time();
    r.flight.push_back(std::move(e));
  }
  const auto events = in.get<uint64_t>();
  for (uint64_t i = 0; i < events; ++i) {
    PhaseEvent e;
    e.name = in.get_string();
    e.start = in.get_time();
    e.end = in.get_time();
    e.bytes = in.get<uint64_t>();
    r.timeline.push_back(std::move(e));
  }
  o.step_seconds = in.get_array<double>();
  o.losses = in.get_array<double>();
  o.params = in.get_array<float>();
  const auto steps = in.get<uint64_t>();
  for (uint64_t i = 0; i < steps && !in.done(); ++i) o.history.push_back(in.get_array<float>());
  if (o.history.size() != steps) throw Error("rank outcome: truncated parameter history");
  const auto sized = in.get<uint64_t>();
  for (uint64_t i = 0; i < sized && !in.done(); ++i) o.step_sizes.push_back(in.get_array<float>());
  if (o.step_sizes.size() != sized) throw Error("rank outcome: truncated step sizes");
  if (!in.done()) throw Error("rank outcome: trailing bytes after the encoding");
  return o;
}

}  // namespace dtsim::train
