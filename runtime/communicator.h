// A communicator: a group of ranks that run collectives together, with torch.distributed's
// vocabulary (rank(), size(), all_reduce, reduce_scatter, all_gather, all_to_all, ...).
//
// Every collective takes the next sequence number of this communicator; its messages are
// matched on (source, communicator, sequence, step), so back-to-back collectives and
// concurrent disjoint subgroups never mix. Every rank of the communicator must call the
// same collectives in the same order with matching sizes; a mismatch raises MismatchError
// (or a TimeoutError naming the missing peer) instead of hanging.
//
// After an error (TimeoutError, MismatchError, AbortedError, or any exception) escapes a
// collective or a send/recv, the communicator is unusable on that rank, as in NCCL: every
// later call on it throws AbortedError at once, naming the call that failed. Its peers may
// be anywhere in that call, so no later message on it could be trusted to match. Return
// from the job (World::run reports the first failure); other communicators stay usable.
//
// Uneven lengths split like torch.tensor_split (split.h): chunk i of n over N ranks has
// n / N + (i < n % N) elements.
//
// Thread safety: a Communicator belongs to one rank thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "runtime/diagnostics/counters.h"
#include "runtime/diagnostics/flight_recorder.h"
#include "runtime/rank_context.h"
#include "runtime/types.h"

namespace dtsim {

class Exchange;
struct AlgoRow;

class Communicator {
 public:
  // `ranks` are global ranks in communicator order; ctx->rank must be one of them.
  Communicator(RankContext* ctx, uint64_t id, std::vector<int> ranks, std::string name);
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const { return rank_; }
  int size() const { return static_cast<int>(ranks_.size()); }
  int global_rank() const { return ranks_[rank_]; }
  int global_rank(int local) const { return ranks_[local]; }
  const std::vector<int>& ranks() const { return ranks_; }
  const std::string& name() const { return name_; }
  uint64_t next_seq() const { return seq_; }
  // Identifies this communicator in FlightEntry::comm.
  uint64_t id() const { return id_; }
  // This rank's traffic over all of its communicators.
  const RankCounters& counters() const { return ctx_->counters; }
  // This rank's last FlightRecorder::kDepth collectives over all of its communicators,
  // oldest first (allocates: for reports).
  std::vector<FlightEntry> flight_record() const;

  // Every rank ends with the element-wise reduction of all ranks' `data`.
  template <class T>
  void all_reduce(std::span<T> data, ReduceOp op = ReduceOp::kSum, Algo algo = Algo::kAuto) {
    all_reduce_raw(data.data(), data.size(), dtype_of<T>(), op, algo);
  }
  // Rank r gets chunk r (tensor_split of in.size() over size()) of the reduction of `in`.
  template <class T>
  void reduce_scatter(std::span<const T> in, std::span<T> out, ReduceOp op = ReduceOp::kSum,
                      Algo algo = Algo::kAuto) {
    reduce_scatter_raw(in.data(), in.size(), out.data(), out.size(), dtype_of<T>(), op, algo);
  }
  // Every rank gets the concatenation of all ranks' `in`; rank r's `in` must hold chunk r
  // of out.size() (tensor_split), so all_gather(reduce_scatter(x)) == all_reduce(x).
  template <class T>
  void all_gather(std::span<const T> in, std::span<T> out, Algo algo = Algo::kAuto) {
    all_gather_raw(in.data(), in.size(), out.data(), out.size(), dtype_of<T>(), algo);
  }
  // Every rank gets `src`'s data.
  template <class T>
  void broadcast(std::span<T> data, int src, Algo algo = Algo::kAuto) {
    broadcast_raw(data.data(), data.size(), dtype_of<T>(), src, algo);
  }
  // Rank `dst` gets the reduction; other ranks' buffers are left as they were.
  template <class T>
  void reduce(std::span<T> data, int dst, ReduceOp op = ReduceOp::kSum, Algo algo = Algo::kAuto) {
    reduce_raw(data.data(), data.size(), dtype_of<T>(), dst, op, algo);
  }
  // Chunk j (tensor_split) of rank i's `in` lands on rank j at position i: a transpose.
  // Every rank passes the same in.size(); out.size() is size() * chunk rank().
  template <class T>
  void all_to_all(std::span<const T> in, std::span<T> out, Algo algo = Algo::kAuto) {
    all_to_all_raw(in.data(), in.size(), out.data(), out.size(), dtype_of<T>(), algo);
  }
  // Like torch's all_to_all_single: send_counts[j] elements go to rank j, in order, and
  // recv_counts[i] elements arrive from rank i, in order. Counts must agree pairwise.
  template <class T>
  void all_to_all_single(std::span<const T> in, std::span<const size_t> send_counts,
                         std::span<T> out, std::span<const size_t> recv_counts,
                         Algo algo = Algo::kAuto) {
    all_to_all_single_raw(in.data(), in.size(), send_counts, out.data(), out.size(), recv_counts,
                          dtype_of<T>(), algo);
  }
  // Returns once every rank of the communicator has entered the barrier.
  void barrier();

  // Point to point, matched in order per (peer, tag). Tags are 0..kMaxTag (like MPI's
  // MPI_TAG_UB, which is at least 32767); others throw UsageError.
  static constexpr int kMaxTag = 0x7fffffff;
  template <class T>
  void send(std::span<const T> data, int dst, int tag = 0) {
    send_raw(data.data(), data.size(), dtype_of<T>(), dst, tag);
  }
  template <class T>
  void recv(std::span<T> data, int src, int tag = 0) {
    recv_raw(data.data(), data.size(), dtype_of<T>(), src, tag);
  }

  // Collective over this communicator (every rank calls it with the same `ranks`, local
  // ranks of this communicator): returns the new group's communicator on its members and
  // nullptr elsewhere. Like torch.distributed.new_group. The group is named
  // `kind`[members] ("dp[0,2]"): errors, the flight recorder and the traffic counters
  // (RankCounters::groups) show it.
  std::unique_ptr<Communicator> new_group(const std::vector<int>& ranks,
                                          const std::string& kind = "group");
  // Collective: ranks with the same color form a group, ordered by (key, rank). Like
  // MPI_Comm_split; a negative color returns nullptr. Named like new_group.
  std::unique_ptr<Communicator> split(int color, int key, const std::string& kind = "group");

  // Type-erased entry points behind the templates above (counts are in elements). Each
  // picks its algorithm from the registry (algorithms/registry.h); an algorithm the
  // collective does not have is a UsageError naming the ones it has.
  void all_reduce_raw(void* data, size_t count, DType t, ReduceOp op, Algo algo);
  void reduce_scatter_raw(const void* in, size_t in_count, void* out, size_t out_count, DType t,
                          ReduceOp op, Algo algo);
  void all_gather_raw(const void* in, size_t in_count, void* out, size_t out_count, DType t,
                      Algo algo);
  void broadcast_raw(void* data, size_t count, DType t, int src, Algo algo);
  void reduce_raw(void* data, size_t count, DType t, int dst, ReduceOp op, Algo algo);
  void all_to_all_raw(const void* in, size_t in_count, void* out, size_t out_count, DType t,
                      Algo algo = Algo::kAuto);
  void all_to_all_single_raw(const void* in, size_t in_count, std::span<const size_t> send_counts,
                             void* out, size_t out_count, std::span<const size_t> recv_counts,
                             DType t, Algo algo = Algo::kAuto);
  void send_raw(const void* data, size_t count, DType t, int dst, int tag);
  void recv_raw(void* data, size_t count, DType t, int src, int tag);

 private:
  friend class Exchange;
  // The registry's row of the algorithm that runs for (op, algo) at this size (all_reduce
  // `shared` where it cannot lend, below WorldOptions::lend_bytes or across processes, runs
  // as `deterministic`, its bitwise twin); notes it in the counters.
  const AlgoRow& pick(OpKind op, Algo algo, size_t bytes);
  uint64_t& p2p_counter(std::vector<std::vector<std::pair<int, uint64_t>>>& table, int peer,
                        int tag);
  void check_peer(int peer, const char* what) const;
  // Algo::kMpi: the library's own collective (native_collectives.h).
  void run_native(const NativeCall& call, Exchange& ex);
  void check_tag(int tag, const char* what) const;
  // AbortedError if an earlier call on this communicator failed on this rank.
  void check_usable(const char* call) const;
  // Marks the communicator unusable: `call` failed on this rank.
  void mark_broken(const std::string& call);

  RankContext* ctx_;
  uint64_t id_;
  std::vector<int> ranks_;
  int rank_ = -1;
  std::string name_;
  uint64_t seq_ = 0;
  uint64_t groups_made_ = 0;
  size_t traffic_ = 0;              // index of this communicator in ctx_->counters.groups
  bool shares_memory_ = false;      // every peer shares memory with this rank (Exchange)
  std::string broken_;              // the call that failed on this rank, or ""
  std::vector<std::byte> scratch_;  // reused temporaries of the algorithms
  std::vector<size_t> counts_;      // all_to_all split sizes, reused
  std::vector<uint8_t> lent_;       // by peer: the current call lent it a message
  std::vector<std::vector<std::pair<int, uint64_t>>> sent_, received_;  // p2p (tag, count)
};

}  // namespace dtsim
