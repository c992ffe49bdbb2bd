#include "train/pipeline_parallel/schedule_check.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <map>
#include <numeric>
#include <tuple>

namespace dtsim::train::pipeline {
namespace {

// A channel: sender, receiver, and whether it carries activations (0) or gradients (1).
using Channel = std::tuple<int, int, int>;

int kind_of(Op op) { return op == Op::kSendActivation || op == Op::kRecvActivation ? 0 : 1; }
const char* kind_name(int kind) { return kind == 0 ? "activation" : "gradient"; }

std::string what(const Action& a) {
  return fmt::format("(micro-batch {}, chunk {})", a.micro_batch, a.chunk);
}

std::string check_channels(const Schedule& s) {
  const int p = s.spec.stages;
  std::map<Channel, std::vector<Action>> sends, recvs;
  for (int r = 0; r < p; ++r) {
    for (const Action& a : s.ranks[r]) {
      if (!is_send(a.op) && !is_recv(a.op)) continue;
      if (a.peer < 0 || a.peer >= p) {
        return fmt::format("rank {}: {} {} names peer {}, not a pipeline rank 0..{}", r,
                           to_string(a.op), what(a), a.peer, p - 1);
      }
      if (is_send(a.op)) sends[{r, a.peer, kind_of(a.op)}].push_back(a);
      if (is_recv(a.op)) recvs[{a.peer, r, kind_of(a.op)}].push_back(a);
    }
  }
  std::map<Channel, int> all;
  for (auto& [c, v] : sends) all[c] = 0;
  for (auto& [c, v] : recvs) all[c] = 0;
  for (const auto& [c, unused] : all) {
    const auto& [from, to, kind] = c;
    const std::vector<Action>& tx = sends[c];
    const std::vector<Action>& rx = recvs[c];
    // First what is missing on either side (by identity), then the order.
    std::map<std::pair<int, int>, int> balance;  // (micro-batch, chunk): sends - receives
    for (const Action& a : tx) ++balance[{a.micro_batch, a.chunk}];
    for (const Action& a : rx) --balance[{a.micro_batch, a.chunk}];
    for (const Action& a : tx) {
      if (balance[{a.micro_batch, a.chunk}] > 0) {
        return fmt::format(
            "unmatched send: rank {} sends {} {} to rank {}, which never receives it", from,
            kind_name(kind), what(a), to);
      }
    }
    for (const Action& a : rx) {
      if (balance[{a.micro_batch, a.chunk}] < 0) {
        return fmt::format(
            "unmatched recv: rank {} receives {} {} from rank {}, which never sends it", to,
            kind_name(kind), what(a), from);
      }
    }
    for (size_t k = 0; k < tx.size(); ++k) {
      if (tx[k].micro_batch != rx[k].micro_batch || tx[k].chunk != rx[k].chunk) {
        return fmt::format(
            "out of order: {} message #{} from rank {} to rank {} is sent as {} but received as {}",
            kind_name(kind), k, from, to, what(tx[k]), what(rx[k]));
      }
    }
  }
  return "";
}

// Per rank: one forward and one backward (or B then W) per (micro-batch, own chunk), inputs
// received before use, outputs sent after they exist.
std::string check_program(const Schedule& s) {
  const int p = s.spec.stages, m = s.spec.micro_batches;
  const int chunks = p * s.spec.virtual_stages;
  const bool split = s.spec.kind == ScheduleKind::kZeroBubbleH1;
  for (int r = 0; r < p; ++r) {
    // Per (micro-batch, chunk): how many of F, B (or Bi), W, recv act, recv grad were seen.
    std::map<std::pair<int, int>, std::array<int, 5>> seen;
    for (const Action& a : s.ranks[r]) {
      if (a.micro_batch < 0 || a.micro_batch >= m || a.chunk < 0 || a.chunk >= chunks) {
        return fmt::format("rank {}: {} {} is outside m = {}, {} chunks", r, to_string(a.op),
                           what(a), m, chunks);
      }
      std::array<int, 5>& n = seen[{a.micro_batch, a.chunk}];
      const int c = a.chunk;
      if (is_compute(a.op) && c % p != r) {
        return fmt::format("rank {}: {} {} belongs to rank {}", r, to_string(a.op), what(a), c % p);
      }
      const bool full = a.op == Op::kBackward;
      if (split ? full : (a.op == Op::kBackwardInput || a.op == Op::kBackwardWeight)) {
        return fmt::format("rank {}: {} {} in a schedule that {}", r, to_string(a.op), what(a),
                           split ? "splits backward into B and W" : "does not split backward");
      }
      switch (a.op) {
        case Op::kForward:
          if (c > 0 && seen[{a.micro_batch, c - 1}][3] == 0) {
            return fmt::format("rank {}: forward {} before receiving its input activation", r,
                               what(a));
          }
          if (n[0]++ > 0) return fmt::format("rank {}: forward {} twice", r, what(a));
          break;
        case Op::kBackward:
        case Op::kBackwardInput:
          if (n[0] == 0) return fmt::format("rank {}: backward {} before its forward", r, what(a));
          if (c < chunks - 1 && seen[{a.micro_batch, c + 1}][4] == 0) {
            return fmt::format("rank {}: backward {} before receiving its output gradient", r,
                               what(a));
          }
          if (n[1]++ > 0) return fmt::format("rank {}: backward {} twice", r, what(a));
          break;
        case Op::kBackwardWeight:
          if (n[1] == 0) return fmt::format("rank {}: W {} before its B", r, what(a));
          if (n[2]++ > 0) return fmt::format("rank {}: W {} twice", r, what(a));
          break;
        case Op::kSendActivation:
          if (n[0] == 0)
            return fmt::format("rank {}: sends activation {} before its forward", r, what(a));
          break;
        case Op::kSendGradient:
          if (n[1] == 0)
            return fmt::format("rank {}: sends gradient {} before its backward", r, what(a));
          break;
        case Op::kRecvActivation:
          ++n[3];
          break;
        case Op::kRecvGradient:
          ++n[4];
          break;
      }
    }
    for (int i = 0; i < m; ++i) {
      for (int c = r; c < chunks; c += p) {
        const std::array<int, 5>& n = seen[{i, c}];
        if (n[0] != 1 || n[1] != 1 || (split && n[2] != 1)) {
          return fmt::format("rank {}: (micro-batch {}, chunk {}) is missing its {}", r, i, c,
                             n[0] != 1   ? "forward"
                             : n[1] != 1 ? "backward"
                                         : "W");
        }
      }
    }
  }
  return "";
}

}  // namespace

Fraction Fraction::of(int64_t num, int64_t den) {
  const int64_t g = std::gcd(num, den);
  return g == 0 ? Fraction{0, 1} : Fraction{num / g, den / g};
}

std::string to_string(const Fraction& f) { return fmt::format("{}/{}", f.num, f.den); }

std::string check_structure(const Schedule& s) {
  if (static_cast<int>(s.ranks.size()) != s.spec.stages) {
    return fmt::format("the schedule has {} ranks, its spec says --pp {}", s.ranks.size(),
                       s.spec.stages);
  }
  if (std::string e = check_channels(s); !e.empty()) return e;
  return check_program(s);
}

DryRun dry_run(const Schedule& s) {
  DryRun d;
  d.error = check_structure(s);
  if (!d.error.empty()) return d;
  const int p = s.spec.stages;
  std::map<Channel, std::vector<int>> arrivals;  // per channel: slot each message is ready
  std::map<Channel, size_t> taken;
  std::vector<size_t> pc(p, 0);
  std::vector<int> clock(p, 0), in_flight(p, 0);
  d.timeline.assign(p, {});
  d.peak_in_flight.assign(p, 0);
  const bool split = s.spec.kind == ScheduleKind::kZeroBubbleH1;
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < p; ++r) {
      const std::vector<Action>& prog = s.ranks[r];
      for (; pc[r] < prog.size(); ++pc[r], progress = true) {
        const Action& a = prog[pc[r]];
        if (is_send(a.op)) {
          arrivals[{r, a.peer, kind_of(a.op)}].push_back(clock[r]);
        } else if (is_recv(a.op)) {
          const Channel c{a.peer, r, kind_of(a.op)};
          if (taken[c] >= arrivals[c].size()) break;  // blocked: not sent yet
          clock[r] = std::max(clock[r], arrivals[c][taken[c]++]);
        } else {
          d.timeline[r].resize(clock[r], -1);
          d.timeline[r].push_back(static_cast<int>(pc[r]));
          ++clock[r];
          if (a.op == Op::kForward) ++in_flight[r];
          if (a.op == (split ? Op::kBackwardInput : Op::kBackward)) --in_flight[r];
          d.peak_in_flight[r] = std::max(d.peak_in_flight[r], in_flight[r]);
        }
      }
    }
  }
  std::vector<std::string> waiting;
  for (int r = 0; r < p; ++r) {
    if (pc[r] < s.ranks[r].size()) {
      const Action& a = s.ranks[r][pc[r]];
      waiting.push_back(
          fmt::format("rank {} waits to {} {} from rank {}", r, to_string(a.op), what(a), a.peer));
    }
  }
  if (!waiting.empty()) {
    d.error = "deadlock: ";
    for (size_t k = 0; k < waiting.size(); ++k) d.error += (k ? "; " : "") + waiting[k];
    return d;
  }
  d.total_slots = *std::max_element(clock.begin(), clock.end());
  for (int r = 0; r < p; ++r) {
    d.timeline[r].resize(d.total_slots, -1);
    for (int t : d.timeline[r]) (t < 0 ? d.idle_slots : d.busy_slots) += 1;
  }
  d.bubble = Fraction::of(d.idle_slots, static_cast<int64_t>(p) * d.total_slots);
  return d;
}

namespace {

// Peak per local chunk of (forwards run) - (`done` actions run), in program order.
std::vector<int> peak_until(const Schedule& s, int rank, Op done) {
  const int p = s.spec.stages;
  std::vector<int> now(s.spec.virtual_stages, 0), peak(s.spec.virtual_stages, 0);
  for (const Action& a : s.ranks[rank]) {
    const int j = a.chunk / p;
    if (a.op == Op::kForward) peak[j] = std::max(peak[j], ++now[j]);
    if (a.op == done) --now[j];
  }
  return peak;
}

}  // namespace

std::vector<int> peak_in_flight_per_chunk(const Schedule& s, int rank) {
  const bool zb = s.spec.kind == ScheduleKind::kZeroBubbleH1;
  return peak_until(s, rank, zb ? Op::kBackwardInput : Op::kBackward);
}

std::vector<int> peak_held_per_chunk(const Schedule& s, int rank) {
  const bool zb = s.spec.kind == ScheduleKind::kZeroBubbleH1;
  return peak_until(s, rank, zb ? Op::kBackwardWeight : Op::kBackward);
}

Fraction bubble_formula(const ScheduleSpec& spec) {
  const int64_t p = spec.stages, m = spec.micro_batches, v = spec.virtual_stages;
  switch (spec.kind) {
    case ScheduleKind::kInterleaved:
      return Fraction::of(p - 1, v * m + p - 1);
    case ScheduleKind::kZeroBubbleH1:
      return Fraction::of(p - 1, 3 * m + p - 1);
    default:
      return Fraction::of(p - 1, m + p - 1);
  }
}

int held_bound(const ScheduleSpec& spec, int rank) {
  if (spec.kind != ScheduleKind::kZeroBubbleH1) return in_flight_bound(spec, rank);
  return std::min(2 * spec.stages - 1 - rank, spec.micro_batches);
}

int in_flight_bound(const ScheduleSpec& spec, int rank) {
  const int p = spec.stages, m = spec.micro_batches, v = spec.virtual_stages;
  switch (spec.kind) {
    case ScheduleKind::kGpipe:
      return m;
    case ScheduleKind::kInterleaved:
      return m == p ? v * m : std::min((p - rank - 1) * 2 + (v - 1) * p + 1, v * m);
    default:
      return std::min(p - rank, m);
  }
}

}  // namespace dtsim::train::pipeline
