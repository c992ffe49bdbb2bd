// The schedule registry, validation, labels, and the communication every schedule shares:
// a generator gives each rank's compute order; make_schedule puts the receive of a
// compute action's input right before it and the send of its output right after it.
#include "train/pipeline_parallel/schedule.h"

#include <fmt/format.h>

#include <cassert>
#include <stdexcept>

namespace dtsim::train::pipeline {

const std::vector<ScheduleInfo>& schedules() {
  static const std::vector<ScheduleInfo> rows = {
      {ScheduleKind::kGpipe, "gpipe", "GPipe", "(p - 1)/(m + p - 1)", gpipe_order},
      {ScheduleKind::kOneFOneB, "1f1b", "1F1B (PipeDream-Flush)", "(p - 1)/(m + p - 1)",
       one_f_one_b_order},
      {ScheduleKind::kInterleaved, "interleaved", "interleaved 1F1B (Megatron-LM)",
       "(p - 1)/(v m + p - 1)", interleaved_order},
      {ScheduleKind::kZeroBubbleH1, "zb-h1", "ZB-H1 (zero bubble, split backward)",
       "(p - 1)/(3 m + p - 1)", zero_bubble_h1_order},
  };
  return rows;
}

const ScheduleInfo& info(ScheduleKind k) {
  for (const ScheduleInfo& row : schedules()) {
    if (row.kind == k) return row;
  }
  throw std::logic_error("pipeline::info: schedule kind without a registry row");
}

bool parse_schedule(const std::string& name, ScheduleKind* out) {
  for (const ScheduleInfo& row : schedules()) {
    if (name == row.name) {
      *out = row.kind;
      return true;
    }
  }
  return false;
}

const char* to_string(ScheduleKind k) { return info(k).name; }

std::vector<std::string> schedule_names() {
  std::vector<std::string> names;
  for (const ScheduleInfo& row : schedules()) names.push_back(row.name);
  return names;
}

bool is_compute(Op op) {
  return op == Op::kForward || op == Op::kBackward || op == Op::kBackwardInput ||
         op == Op::kBackwardWeight;
}
bool is_send(Op op) { return op == Op::kSendActivation || op == Op::kSendGradient; }
bool is_recv(Op op) { return op == Op::kRecvActivation || op == Op::kRecvGradient; }

const char* to_string(Op op) {
  switch (op) {
    case Op::kForward:
      return "forward";
    case Op::kBackward:
      return "backward";
    case Op::kBackwardInput:
      return "backward-input";
    case Op::kBackwardWeight:
      return "backward-weight";
    case Op::kSendActivation:
      return "send activation";
    case Op::kRecvActivation:
      return "recv activation";
    case Op::kSendGradient:
      return "send gradient";
    case Op::kRecvGradient:
      return "recv gradient";
  }
  return "?";
}

std::string label(const Action& a, int stages, int virtual_stages) {
  const std::string mb = virtual_stages > 1 ? fmt::format("{}.{}", a.micro_batch, a.chunk / stages)
                                            : std::to_string(a.micro_batch);
  switch (a.op) {
    case Op::kForward:
      return "F" + mb;
    case Op::kBackward:
    case Op::kBackwardInput:
      return "B" + mb;
    case Op::kBackwardWeight:
      return "W" + mb;
    case Op::kSendActivation:
      return fmt::format("send act {} -> {}", mb, a.peer);
    case Op::kRecvActivation:
      return fmt::format("recv act {} <- {}", mb, a.peer);
    case Op::kSendGradient:
      return fmt::format("send grad {} -> {}", mb, a.peer);
    case Op::kRecvGradient:
      return fmt::format("recv grad {} <- {}", mb, a.peer);
  }
  return "?";
}

std::string validate(const ScheduleSpec& s) {
  if (s.stages < 1) return fmt::format("--pp must be at least 1 (got {})", s.stages);
  if (s.micro_batches < 1) {
    return fmt::format("--micro-batches must be at least 1 (got {})", s.micro_batches);
  }
  if (s.virtual_stages < 1) {
    return fmt::format("--virtual-stages must be at least 1 (got {})", s.virtual_stages);
  }
  if (s.kind != ScheduleKind::kInterleaved) {
    if (s.virtual_stages != 1) {
      return fmt::format(
          "--virtual-stages {} needs --schedule interleaved (--schedule {} runs one chunk per "
          "rank)",
          s.virtual_stages, to_string(s.kind));
    }
    return "";
  }
  if (s.stages < 2) {
    return fmt::format("--schedule interleaved needs --pp 2 or more (got --pp {})", s.stages);
  }
  if (s.micro_batches % s.stages != 0) {
    return fmt::format(
        "--micro-batches {} must be a multiple of --pp {} for --schedule interleaved (Megatron "
        "runs micro-batches in groups of p)",
        s.micro_batches, s.stages);
  }
  return "";
}

Schedule make_schedule(const ScheduleSpec& spec) {
  if (const std::string why = validate(spec); !why.empty()) {
    throw std::invalid_argument("pipeline::make_schedule: " + why);
  }
  const int p = spec.stages, chunks = spec.stages * spec.virtual_stages;
  Schedule s{spec, {}};
  const std::vector<std::vector<Action>> order = info(spec.kind).compute_order(spec);
  assert(static_cast<int>(order.size()) == p);
  s.ranks.resize(p);
  for (int r = 0; r < p; ++r) {
    std::vector<Action>& out = s.ranks[r];
    for (const Action& a : order[r]) {
      const int i = a.micro_batch, c = a.chunk;
      const bool first = c == 0, last = c == chunks - 1;
      if (a.op == Op::kForward && !first)
        out.push_back({Op::kRecvActivation, i, c - 1, (c - 1) % p});
      const bool grad_in = a.op == Op::kBackward || a.op == Op::kBackwardInput;
      if (grad_in && !last) out.push_back({Op::kRecvGradient, i, c + 1, (c + 1) % p});
      out.push_back(a);
      if (a.op == Op::kForward && !last) out.push_back({Op::kSendActivation, i, c, (c + 1) % p});
      if (grad_in && !first) out.push_back({Op::kSendGradient, i, c, (c - 1) % p});
    }
  }
  return s;
}

}  // namespace dtsim::train::pipeline
