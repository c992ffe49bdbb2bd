#include "runtime/communicator.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "common/splitmix.h"
#include "runtime/algorithms/registry.h"
#include "runtime/exchange.h"
#include "runtime/planted.h"
#include "runtime/reduce_kernels.h"
#include "runtime/split.h"

namespace dtsim {
namespace {

// Communicator ids keep the top bit clear: it marks point-to-point sequence numbers.
uint64_t mix(uint64_t a, uint64_t b) { return mix64(a, b) & ~(1ull << 63); }

std::string group_name(const std::string& kind, const std::vector<int>& ranks) {
  std::string s = kind + "[";
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (i) s.push_back(',');
    if (i == 8 && ranks.size() > 9) {
      s.append("...,").append(std::to_string(ranks.back()));
      break;
    }
    s.append(std::to_string(ranks[i]));
  }
  return s + "]";
}

[[noreturn]] void usage(const std::string& what) { throw UsageError(what); }

Signature sig(OpKind op, DType t, ReduceOp red, Algo algo, int root, uint64_t count) {
  Signature s;
  s.op = op;
  s.dtype = t;
  s.reduce = red;
  s.algo = algo;
  s.root = root;
  s.count = count;
  return s;
}

}  // namespace

void Communicator::run_native(const NativeCall& call, Exchange& ex) {
  if (ctx_->native == nullptr || id_ != 1) {
    usage(std::string(to_string(call.op)) +
          ": algorithm 'mpi' runs MPI's own collectives and needs an MPI world of one rank per "
          "process (mpirun -np N, no --threads-per-process), on the world communicator; " +
          "communicator " + name_ + " is not one");
  }
  if (call.dtype == DType::kBFloat16) {
    usage(std::string(to_string(call.op)) +
          ": algorithm 'mpi' has no bfloat16 (MPI has no such type); use float32");
  }
  ctx_->native->run(call, ex.site());
}

Communicator::Communicator(RankContext* ctx, uint64_t id, std::vector<int> ranks, std::string name)
    : ctx_(ctx), id_(id), ranks_(std::move(ranks)), name_(std::move(name)) {
  auto it = std::find(ranks_.begin(), ranks_.end(), ctx_->rank);
  if (it == ranks_.end()) usage("communicator " + name_ + " does not contain this rank");
  rank_ = static_cast<int>(it - ranks_.begin());
  sent_.resize(ranks_.size());
  received_.resize(ranks_.size());
  lent_.resize(ranks_.size());
  shares_memory_ = std::all_of(ranks_.begin(), ranks_.end(), [&](int g) {
    return g == ctx_->transport->rank() || ctx_->transport->shares_memory(g);
  });
  traffic_ = ctx_->counters.groups.size();
  ctx_->counters.groups.push_back(
      GroupTraffic{name_, ranks_, std::vector<PeerTraffic>(ranks_.size())});
}

std::vector<FlightEntry> Communicator::flight_record() const {
  return ctx_->recorder != nullptr ? ctx_->recorder->entries() : std::vector<FlightEntry>{};
}

void Communicator::check_peer(int peer, const char* what) const {
  if (peer < 0 || peer >= size()) {
    usage(std::string(what) + ": rank " + std::to_string(peer) + " is not in " + name_ + " (size " +
          std::to_string(size()) + "); pass a rank in [0, " + std::to_string(size()) + ")");
  }
}

const AlgoRow& Communicator::pick(OpKind op, Algo algo, size_t bytes) {
  const AlgoRow* picked = &algorithm_for(op, algo, bytes, size(), ctx_->world_features);
  if (picked->algo == Algo::kShared && (bytes < ctx_->lend_bytes || !shares_memory_)) {
    picked = &algorithm_for(op, Algo::kDeterministic, bytes, size(), ctx_->world_features);
  }
  const AlgoRow& row = planted_row(ctx_->planted, *picked);  // the same row unless planted
  OpCounters& c = ctx_->counters[op];
  c.algo_calls[static_cast<int>(row.algo)] += 1;
  if (algo == Algo::kAuto) c.auto_calls[static_cast<int>(row.algo)] += 1;
  return row;
}

void Communicator::all_reduce_raw(void* data, size_t count, DType t, ReduceOp op, Algo algo) {
  const Reducer red = reducer_for(t, op);
  const AlgoRow& row = pick(OpKind::kAllReduce, algo, count * dtype_size(t));
  Exchange ex(*this, sig(OpKind::kAllReduce, t, op, row.algo, -1, count));
  if (size() > 1 && count > 0) row.run(ex, CollArgs{.data = data, .count = count, .red = &red});
  if (op == ReduceOp::kAvg) red.divide(data, count, size());
}

void Communicator::reduce_scatter_raw(const void* in, size_t in_count, void* out, size_t out_count,
                                      DType t, ReduceOp op, Algo algo) {
  const size_t want = split_size(in_count, size(), rank_);
  if (out_count != want) {
    usage("reduce_scatter: rank " + std::to_string(rank_) + "'s output has " +
          std::to_string(out_count) + " elements but chunk " + std::to_string(rank_) + " of " +
          std::to_string(in_count) + " over " + std::to_string(size()) + " ranks has " +
          std::to_string(want) + " (tensor_split sizes)");
  }
  const Reducer red = reducer_for(t, op);
  const AlgoRow& row = pick(OpKind::kReduceScatter, algo, in_count * dtype_size(t));
  Exchange ex(*this, sig(OpKind::kReduceScatter, t, op, row.algo, -1, in_count));
  row.run(ex, CollArgs{.in = in, .data = out, .count = in_count, .red = &red});
  if (op == ReduceOp::kAvg) red.divide(out, out_count, size());
}

void Communicator::all_gather_raw(const void* in, size_t in_count, void* out, size_t out_count,
                                  DType t, Algo algo) {
  const size_t want = split_size(out_count, size(), rank_);
  if (in_count != want) {
    usage("all_gather: rank " + std::to_string(rank_) + "'s input has " + std::to_string(in_count) +
          " elements but chunk " + std::to_string(rank_) + " of an " + "output of " +
          std::to_string(out_count) + " over " + std::to_string(size()) + " ranks has " +
          std::to_string(want) + " (tensor_split sizes)");
  }
  const AlgoRow& row = pick(OpKind::kAllGather, algo, out_count * dtype_size(t));
  Exchange ex(*this, sig(OpKind::kAllGather, t, ReduceOp::kSum, row.algo, -1, out_count));
  row.run(ex, CollArgs{.in = in, .data = out, .count = out_count});
}

void Communicator::broadcast_raw(void* data, size_t count, DType t, int src, Algo algo) {
  check_peer(src, "broadcast");
  const AlgoRow& row = pick(OpKind::kBroadcast, algo, count * dtype_size(t));
  Exchange ex(*this, sig(OpKind::kBroadcast, t, ReduceOp::kSum, row.algo, src, count));
  if (size() == 1) return;
  row.run(ex, CollArgs{.data = data, .count = count, .root = src});
}

void Communicator::reduce_raw(void* data, size_t count, DType t, int dst, ReduceOp op, Algo algo) {
  check_peer(dst, "reduce");
  const Reducer red = reducer_for(t, op);
  const AlgoRow& row = pick(OpKind::kReduce, algo, count * dtype_size(t));
  Exchange ex(*this, sig(OpKind::kReduce, t, op, row.algo, dst, count));
  if (size() > 1) row.run(ex, CollArgs{.data = data, .count = count, .root = dst, .red = &red});
  if (op == ReduceOp::kAvg && rank_ == dst) red.divide(data, count, size());
}

void Communicator::all_to_all_raw(const void* in, size_t in_count, void* out, size_t out_count,
                                  DType t, Algo algo) {
  const size_t n = static_cast<size_t>(size());
  const size_t want = n * split_size(in_count, n, rank_);
  if (out_count != want) {
    usage("all_to_all: rank " + std::to_string(rank_) + "'s output has " +
          std::to_string(out_count) + " elements but should have " + std::to_string(want) +
          " (size() x chunk " + std::to_string(rank_) + " of the " + std::to_string(in_count) +
          "-element input)");
  }
  counts_.resize(2 * n);
  for (size_t j = 0; j < n; ++j) {
    counts_[j] = split_size(in_count, n, j);
    counts_[n + j] = split_size(in_count, n, rank_);
  }
  const AlgoRow& row = pick(OpKind::kAllToAll, algo, in_count * dtype_size(t));
  Exchange ex(*this, sig(OpKind::kAllToAll, t, ReduceOp::kSum, row.algo, -1, in_count));
  row.run(
      ex,
      CollArgs{
          .in = in, .data = out, .send_counts = counts_.data(), .recv_counts = counts_.data() + n});
}

void Communicator::all_to_all_single_raw(const void* in, size_t in_count,
                                         std::span<const size_t> send_counts, void* out,
                                         size_t out_count, std::span<const size_t> recv_counts,
                                         DType t, Algo algo) {
  const size_t n = static_cast<size_t>(size());
  if (send_counts.size() != n || recv_counts.size() != n) {
    usage("all_to_all_single: pass one send and one receive count per rank (" + std::to_string(n) +
          "), got " + std::to_string(send_counts.size()) + " and " +
          std::to_string(recv_counts.size()));
  }
  size_t s = 0, r = 0;
  for (size_t j = 0; j < n; ++j) {
    s += send_counts[j];
    r += recv_counts[j];
  }
  if (s != in_count || r != out_count) {
    usage("all_to_all_single: send counts sum to " + std::to_string(s) + " (input has " +
          std::to_string(in_count) + ") and receive counts to " + std::to_string(r) +
          " (output has " + std::to_string(out_count) + "); they must match");
  }
  if (send_counts[rank_] != recv_counts[rank_]) {
    usage("all_to_all_single: rank " + std::to_string(rank_) + " sends " +
          std::to_string(send_counts[rank_]) + " elements to itself but expects " +
          std::to_string(recv_counts[rank_]));
  }
  const AlgoRow& row = pick(OpKind::kAllToAll, algo, in_count * dtype_size(t));
  Exchange ex(*this, sig(OpKind::kAllToAll, t, ReduceOp::kSum, row.algo, -1, 0));
  row.run(ex, CollArgs{.in = in,
                       .data = out,
                       .send_counts = send_counts.data(),
                       .recv_counts = recv_counts.data()});
}

void Communicator::barrier() {
  const AlgoRow& row = pick(OpKind::kBarrier, Algo::kAuto, 0);
  Exchange ex(*this, sig(OpKind::kBarrier, DType::kByte, ReduceOp::kSum, row.algo, -1, 0));
  row.run(ex, CollArgs{});
}

uint64_t& Communicator::p2p_counter(std::vector<std::vector<std::pair<int, uint64_t>>>& table,
                                    int peer, int tag) {
  auto& v = table[peer];
  for (auto& [t, c] : v) {
    if (t == tag) return c;
  }
  v.emplace_back(tag, 0);
  return v.back().second;
}

void Communicator::check_tag(int tag, const char* what) const {
  if (tag < 0) {
    usage(std::string(what) + ": tag " + std::to_string(tag) +
          " is out of range; use a tag in [0, " + std::to_string(kMaxTag) + "]");
  }
}

void Communicator::check_usable(const char* call) const {
  if (broken_.empty()) return;
  throw AbortedError(std::string(call) + " on communicator " + name_ + " (rank " +
                     std::to_string(rank_) + "): the communicator is unusable since its " +
                     broken_ +
                     " failed on this rank; after an error a communicator is not used again "
                     "(as in NCCL): return from the job, or use another communicator");
}

void Communicator::mark_broken(const std::string& call) {
  if (broken_.empty()) broken_ = call;
  if (ctx_->recorder) ctx_->recorder->note_failure();
}

void Communicator::send_raw(const void* data, size_t count, DType t, int dst, int tag) {
  check_peer(dst, "send");
  check_tag(tag, "send");
  const uint64_t n = p2p_counter(sent_, dst, tag)++;
  const size_t bytes = count * dtype_size(t);
  WaitSite site{name_.c_str(), n, sig(OpKind::kSend, t, ReduceOp::kSum, Algo::kAuto, -1, count)};
  const MessageKey key{id_, (1ull << 63) | (uint64_t(uint32_t(tag)) << 32) | (n & 0xffffffffu),
                       static_cast<uint32_t>(rank_)};
  check_usable("send");
  try {
    ctx_->transport->send(ranks_[dst], key, site.sig, {static_cast<const std::byte*>(data), bytes},
                          site);
  } catch (...) {
    mark_broken("send to rank " + std::to_string(dst) + " on tag " + std::to_string(tag));
    throw;
  }
  OpCounters& c = ctx_->counters[OpKind::kSend];
  c.calls += 1;
  c.steps += 1;
  c.msgs_sent += 1;
  c.bytes_sent += bytes;
  PeerTraffic& p = ctx_->counters.groups[traffic_].peers[dst];
  p.msgs_sent += 1;
  p.bytes_sent += bytes;
}

void Communicator::recv_raw(void* data, size_t count, DType t, int src, int tag) {
  check_peer(src, "recv");
  check_tag(tag, "recv");
  const uint64_t n = p2p_counter(received_, src, tag)++;
  WaitSite site{name_.c_str(), n, sig(OpKind::kRecv, t, ReduceOp::kSum, Algo::kAuto, -1, count)};
  const MessageKey key{id_, (1ull << 63) | (uint64_t(uint32_t(tag)) << 32) | (n & 0xffffffffu),
                       static_cast<uint32_t>(src)};
  check_usable("recv");
  Message m;
  try {
    m = ctx_->transport->recv(ranks_[src], key, site);
  } catch (...) {
    mark_broken("recv from rank " + std::to_string(src) + " on tag " + std::to_string(tag));
    throw;
  }
  const size_t bytes = count * dtype_size(t);
  if (m.size != bytes) {
    const size_t got = m.size;
    ctx_->transport->release(ranks_[src], m);
    usage("recv: rank " + std::to_string(rank_) + " expected " + std::to_string(bytes) +
          " bytes from rank " + std::to_string(src) + " (tag " + std::to_string(tag) +
          ") but the matching send had " + std::to_string(got));
  }
  if (bytes) std::memcpy(data, m.data, bytes);
  ctx_->transport->release(ranks_[src], m);
  OpCounters& c = ctx_->counters[OpKind::kRecv];
  c.calls += 1;
  c.steps += 1;
  c.msgs_recv += 1;
  c.bytes_recv += bytes;
  PeerTraffic& p = ctx_->counters.groups[traffic_].peers[src];
  p.msgs_recv += 1;
  p.bytes_recv += bytes;
}

std::unique_ptr<Communicator> Communicator::new_group(const std::vector<int>& ranks,
                                                      const std::string& kind) {
  // Check that every rank passed the same list: all_reduce (h, -h) with MAX. Group
  // creation names its algorithms (here and in split) rather than take auto's, so that its
  // messages, and the schedules the stress search explores around them, stay the same
  // when auto's rule is tuned.
  uint64_t h = 1469598103934665603ull;
  for (int r : ranks) h = mix(h, static_cast<uint64_t>(r));
  int64_t check[2] = {static_cast<int64_t>(h >> 1), -static_cast<int64_t>(h >> 1)};
  all_reduce(std::span<int64_t>(check, 2), ReduceOp::kMax, Algo::kRecursiveDoubling);
  if (check[0] != static_cast<int64_t>(h >> 1) || check[1] != -static_cast<int64_t>(h >> 1)) {
    usage("new_group: the ranks of " + name_ +
          " passed different member lists; every rank "
          "must call new_group with the same ranks");
  }
  const uint64_t id = mix(id_, ++groups_made_);
  std::vector<int> global;
  for (int r : ranks) {
    check_peer(r, "new_group");
    global.push_back(ranks_[r]);
  }
  std::vector<int> sorted = global;
  std::sort(sorted.begin(), sorted.end());
  if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) {
    usage("new_group: a rank is listed twice; list each member once");
  }
  if (std::find(ranks.begin(), ranks.end(), rank_) == ranks.end()) return nullptr;
  return std::make_unique<Communicator>(ctx_, id, global, group_name(kind, global));
}

std::unique_ptr<Communicator> Communicator::split(int color, int key, const std::string& kind) {
  const size_t n = static_cast<size_t>(size());
  std::vector<int64_t> mine = {color, key};
  std::vector<int64_t> all(2 * n);
  all_gather(std::span<const int64_t>(mine), std::span<int64_t>(all), Algo::kRing);
  const uint64_t id = mix(mix(id_, ++groups_made_), static_cast<uint64_t>(color) + 1);
  if (color < 0) return nullptr;
  std::vector<std::pair<int64_t, int>> members;  // (key, local rank)
  for (size_t i = 0; i < n; ++i) {
    if (all[2 * i] == color) members.emplace_back(all[2 * i + 1], static_cast<int>(i));
  }
  std::sort(members.begin(), members.end());
  std::vector<int> global;
  for (auto& m : members) global.push_back(ranks_[m.second]);
  return std::make_unique<Communicator>(ctx_, id, global, group_name(kind, global));
}

}  // namespace dtsim
