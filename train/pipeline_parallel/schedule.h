// Pipeline schedules as data. A schedule is, for every pipeline rank, the list of actions it
// runs in program order: forward or backward of (micro-batch, model chunk), and the
// point-to-point sends and receives that move activations forward and their gradients back.
// It is generated before anything runs and checked (schedule_check.h): every send has its
// receive, a unit-time dry run finishes, the bubble equals the paper's formula.
//
// The model's L pipeline layers are cut into p * v chunks of L / (p v) layers; chunk c lives
// on pipeline rank c % p (v = 1 except for the interleaved schedule). The schedules:
//   gpipe        GPipe (Huang et al. 2019): every forward, then every backward.
//   1f1b         PipeDream-Flush (Narayanan et al. 2021): p - r - 1 warm-up forwards on rank r,
//                then one forward, one backward; at most p - r micro-batches in flight.
//   interleaved  Megatron-LM's interleaved 1F1B (Narayanan et al. 2021, section 2.2): v chunks
//                per rank; the bubble shrinks v-fold, (p - 1)/(v m + p - 1).
//   zb-h1        Zero Bubble H1 (Qi et al. 2023): backward split into an input-gradient pass
//                (B, on the critical path) and a weight-gradient pass (W, deferred to fill
//                the bubble), with 1F1B's in-flight bound.
// Every schedule runs each chunk's backward passes in micro-batch order 0..m-1, so weight
// gradients accumulate in the order single-rank gradient accumulation uses (bitwise equal).
//
// Thread safety: everything here is pure functions of their arguments and immutable tables.
#pragma once

#include <string>
#include <vector>

namespace dtsim::train::pipeline {

enum class ScheduleKind { kGpipe, kOneFOneB, kInterleaved, kZeroBubbleH1 };

// CLI names gpipe, 1f1b, interleaved, zb-h1: true and *out set when `name` is one.
bool parse_schedule(const std::string& name, ScheduleKind* out);
const char* to_string(ScheduleKind k);

enum class Op {
  kForward,         // forward of (micro_batch, chunk)
  kBackward,        // full backward of (micro_batch, chunk): input grad + weight grad
  kBackwardInput,   // ZB-H1 only: input gradient
  kBackwardWeight,  // ZB-H1 only: weight gradient
  kSendActivation,  // output activations of `chunk` -> the next chunk's rank
  kRecvActivation,  // output activations of `chunk` (the previous chunk) from its rank
  kSendGradient,    // input gradient of `chunk` -> the previous chunk's rank
  kRecvGradient,    // input gradient of `chunk` (the next chunk) from its rank
};

// True for the compute ops (each takes one slot in the dry run).
bool is_compute(Op op);
bool is_send(Op op);
bool is_recv(Op op);
// "forward", "backward", ..., "send activation", "recv gradient".
const char* to_string(Op op);

struct Action {
  Op op;
  int micro_batch;  // 0..m-1
  int chunk;        // model chunk 0..p*v-1; chunk c lives on pipeline rank c % p
  int peer;         // pipeline rank of the other side for send/recv, -1 for compute

  bool operator==(const Action&) const = default;
};

// "F3" / "B3" / "W3" (ZB-H1's B is the input-gradient pass), "F3.1" with the rank-local
// chunk when v > 1, "send act 3.1 -> 2" for communication.
std::string label(const Action& a, int stages, int virtual_stages);

struct ScheduleSpec {
  ScheduleKind kind = ScheduleKind::kOneFOneB;
  int stages = 1;          // p: pipeline ranks
  int micro_batches = 1;   // m
  int virtual_stages = 1;  // v: chunks per rank (kInterleaved only; 1 otherwise)
};

// "" if the spec is valid, else a one-line reason naming the flag (--pp, --micro-batches,
// --virtual-stages): p, m, v >= 1; v > 1 only with interleaved; interleaved needs p >= 2 and
// m % p == 0.
std::string validate(const ScheduleSpec& spec);

struct Schedule {
  ScheduleSpec spec;
  std::vector<std::vector<Action>> ranks;  // ranks[r]: rank r's actions in program order
};

// The schedule of `spec`, which must validate (a programmer error otherwise).
Schedule make_schedule(const ScheduleSpec& spec);

// One row per schedule: the single list parse_schedule, to_string and the CLI help read.
struct ScheduleInfo {
  ScheduleKind kind;
  const char* name;     // CLI name
  const char* title;    // "GPipe", "1F1B (PipeDream-Flush)", ...
  const char* formula;  // the bubble in slots, as the paper writes it
  // Each rank's compute actions in program order (make_schedule adds the communication).
  std::vector<std::vector<Action>> (*compute_order)(const ScheduleSpec& spec);
};
const std::vector<ScheduleInfo>& schedules();
const ScheduleInfo& info(ScheduleKind k);
// The CLI names, in registry order.
std::vector<std::string> schedule_names();

// The generators, one per file (gpipe.cc, one_f_one_b.cc, interleaved.cc, zero_bubble_h1.cc).
std::vector<std::vector<Action>> gpipe_order(const ScheduleSpec& spec);
std::vector<std::vector<Action>> one_f_one_b_order(const ScheduleSpec& spec);
std::vector<std::vector<Action>> interleaved_order(const ScheduleSpec& spec);
std::vector<std::vector<Action>> zero_bubble_h1_order(const ScheduleSpec& spec);

// Compute-action shorthands for the generators.
inline Action forward(int micro_batch, int chunk) { return {Op::kForward, micro_batch, chunk, -1}; }
inline Action backward(int micro_batch, int chunk) {
  return {Op::kBackward, micro_batch, chunk, -1};
}

// Chunk c of p * v holds layers [c L/(p v), (c + 1) L/(p v)) of L pipeline layers.
inline int first_layer(int chunk, int layers, int chunks) { return chunk * layers / chunks; }

}  // namespace dtsim::train::pipeline
