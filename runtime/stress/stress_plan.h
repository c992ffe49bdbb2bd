// The stress plan (internal to stress.cc): the random sequence of steps of one iteration,
// the inputs each rank fills in, and the single-threaded reference results.
//
// make_plan is a pure function of (seed, iteration, ranks, ...): every process calls it on
// its own and gets the same plan, so ranks agree on the sequence without communicating.
// With two or more ranks every plan holds one kFailingLend step, at a random place (drawn
// from a stream of its own, so the other steps do not depend on it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/types.h"

namespace dtsim::stress {

enum class StepKind : uint8_t {
  kNewGroup,  // world.new_group(members): creates groups[group]
  kSplit,     // world.split(color, key): creates groups[group + color] for each color
  kCall,      // a collective on groups[group]
  // A failing lender: world.new_group(members) creates groups[group], on which local rank
  // `root` lends `chunks` chunks of its input to every other member (steps 0..chunks-1),
  // sends a snapshot of its first element (step chunks), then fails by design and
  // overwrites its buffer. Each receiver must either read every lent chunk intact or be
  // refused with the withdrawal error (lend.cc's claim/withdraw handshake); the group is
  // unusable afterwards on every rank that saw an error. op is kBroadcast: the reference
  // of every member is the lender's input.
  kFailingLend,
};

// A byte buffer left uninitialised (its owner writes what it uses, so untouched pages cost
// neither a memset nor a page fault); from 4 MiB up backed by transparent huge pages where
// the kernel offers them (madvise), a 512th of the page faults. Move-only.
class Bytes {
 public:
  Bytes() = default;
  explicit Bytes(size_t n);
  size_t size() const { return size_; }
  std::byte* data() { return p_.get(); }
  const std::byte* data() const { return p_.get(); }

 private:
  struct Free {
    void operator()(std::byte* p) const;
  };
  std::unique_ptr<std::byte, Free> p_;
  size_t size_ = 0;
};

struct Step {
  StepKind kind = StepKind::kCall;
  int group = 0;  // kCall: the group it runs on; kNewGroup/kSplit: the first group made
  // kNewGroup: the members (world ranks, in communicator order). kSplit: per world rank
  // its color (-1: none) and key.
  std::vector<int> members, colors, keys;
  OpKind op = OpKind::kAllReduce;
  bool single = false;  // all_to_all with explicit split sizes (all_to_all_single)
  DType dtype = DType::kFloat32;
  ReduceOp reduce = ReduceOp::kSum;
  Algo algo = Algo::kAuto;
  int root = 0;
  size_t numel = 0;
  std::vector<size_t> counts;  // all_to_all_single: counts[i * g + j], i sends to j
  bool fractional = false;     // random fractions (order-sensitive sums) instead of integers
  int repeats = 1;             // 2 for the deterministic algorithms: bitwise equal runs
  int chunks = 0;              // kFailingLend: lent chunks per receiver (tensor_split)
};

struct Plan {
  std::vector<Step> steps;
  std::vector<std::vector<int>> groups;  // world ranks of each group, in communicator order
};

Plan make_plan(uint64_t seed, int iteration, int ranks, int calls, size_t max_numel);

// Element counts of local rank r's input and output buffers for a kCall step.
size_t input_count(const Step& s, int g, int r);
size_t output_count(const Step& s, int g, int r);
// An upper bound on the work of a kCall or kFailingLend step on a group of g ranks: the
// messages and payload bytes all its ranks send together under s.algo (direct all_reduce
// sends every buffer to every peer, rd log2 g + 2 buffers a rank, the others at most two),
// and the payload bytes that may be sent and not yet received at once (the direct
// schedules send everything before they receive): the larger of all inputs and all
// outputs, (g - 1) times all inputs for direct all_reduce.
struct Work {
  uint64_t messages = 0, bytes = 0, in_flight = 0;
};
Work work(const Step& s, int g);
// Fills local rank r's input (input_count elements of s.dtype).
void fill_input(uint64_t seed, int iteration, int step, const Step& s, int g, int r, void* out);
// The reference: per local rank, its output bytes (for reduce, every rank's buffer).
std::vector<Bytes> reference(uint64_t seed, int iteration, int step, const Step& s, int g);
// "element 7 is 12 but the reference is 4" for the first difference, "" when equal.
std::string first_difference(DType t, const std::byte* got, const std::byte* want, size_t n);
// "all_reduce(numel=100, dtype=int32, op=sum, algo=ring, root=...)"
std::string describe(const Step& s);

}  // namespace dtsim::stress
