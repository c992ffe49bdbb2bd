#include "runtime/stress/stress_plan.h"

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <cstring>
#include <new>
#include <numeric>

#include "common/huge_pages.h"
#include "common/splitmix.h"
#include "runtime/algorithms/registry.h"
#include "runtime/reduce_kernels.h"
#include "runtime/split.h"

namespace dtsim::stress {
namespace {

struct Rng {
  uint64_t s;
  uint64_t next() { return s = mix64(s, 1); }
  size_t below(size_t n) { return n ? next() % n : 0; }
  template <class T, size_t N>
  T pick(const T (&xs)[N]) {
    return xs[below(N)];
  }
};

bool reduces(OpKind op) {
  return op == OpKind::kAllReduce || op == OpKind::kReduceScatter || op == OpKind::kReduce;
}

size_t pick_numel(Rng& rng, int g, size_t max_numel) {
  switch (rng.below(10)) {
    case 0:
      return 0;
    case 1:
      return 1 + rng.below(7);
    case 2:
      return static_cast<size_t>(g) + rng.below(3) - 1;  // g - 1 .. g + 1: uneven chunks
    case 3:
      return 1 + rng.below(8 * max_numel);  // long: past the small-message threshold
    default:
      return 1 + rng.below(max_numel);
  }
}

template <class F>
void with_type(DType t, F&& f) {
  switch (t) {
    case DType::kFloat32:
      return f(float{});
    case DType::kFloat64:
      return f(double{});
    case DType::kInt32:
      return f(int32_t{});
    default:
      return f(int64_t{});
  }
}

template <class T>
T value(uint64_t seed, int iteration, int step, int rank, size_t i, bool fractional) {
  const uint64_t h =
      mix64(mix64(mix64(seed, static_cast<uint64_t>(iteration)), step * 4099ull + rank), i);
  if (fractional) return static_cast<T>(static_cast<double>(h >> 11) * 0x1p-52 - 1.0);
  return static_cast<T>(static_cast<int64_t>(h % 17) - 8);
}

template <class T>
T combine(ReduceOp op, T a, T b) {
  if (op == ReduceOp::kMax) return std::max(a, b);
  if (op == ReduceOp::kMin) return std::min(a, b);
  return static_cast<T>(a + b);
}

// Inserts the plan's kFailingLend step (stress_plan.h) at a random place.
void add_failing_lend(uint64_t seed, int iteration, int n, size_t max_numel, Plan& plan) {
  Rng rng{mix64(seed, 0xfa11ed00000ull + static_cast<uint64_t>(iteration))};
  Step s;
  s.kind = StepKind::kFailingLend;
  s.op = OpKind::kBroadcast;
  s.group = static_cast<int>(plan.groups.size());
  std::vector<int> all = plan.groups[0];
  for (int i = n - 1; i > 0; --i) std::swap(all[i], all[rng.below(i + 1)]);
  all.resize(2 + rng.below(n - 1));
  s.members = all;
  plan.groups.push_back(all);
  s.root = static_cast<int>(rng.below(all.size()));
  s.dtype = rng.pick({DType::kFloat32, DType::kFloat64, DType::kInt32, DType::kInt64});
  s.fractional = s.dtype == DType::kFloat32 || s.dtype == DType::kFloat64;
  s.chunks = 1 + static_cast<int>(rng.below(8));
  // At least 16 elements (64 bytes) a chunk: lent whenever WorldOptions::lend_bytes is 64.
  s.numel = static_cast<size_t>(s.chunks) * (16 + rng.below(std::max<size_t>(1, max_numel / 8)));
  const size_t at = rng.below(plan.steps.size() + 1);
  plan.steps.insert(plan.steps.begin() + static_cast<std::ptrdiff_t>(at), std::move(s));
}

// What a plan's call names when the draw fell on the baseline slot: the rule `auto` had
// when the mutant budgets of tests/stress were set (README's mutant table). Plans name an
// algorithm rather than pass kAuto so that a change of auto's rule (registry.cc) moves no
// plan: not the calls' code paths, not the scheduling points PCT draws its change points
// from, not the schedules a mutant takes to find. auto's own choice is tested in
// tests/runtime/registry_test.cc.
Algo baseline_algo(OpKind op, size_t bytes) {
  Algo a = Algo::kRing;
  switch (op) {
    case OpKind::kAllReduce:
      a = bytes <= 32 * 1024 ? Algo::kRecursiveDoubling : Algo::kRing;
      break;
    case OpKind::kBroadcast:
    case OpKind::kReduce:
      a = Algo::kTree;
      break;
    case OpKind::kAllToAll:
      a = Algo::kDirect;
      break;
    case OpKind::kBarrier:
      a = Algo::kDissemination;
      break;
    default:
      break;
  }
  if (find_algorithm(op, a) != nullptr) return a;
  for (const AlgoRow* row : algorithms_of(op)) {  // a collective added since: its first row
    if (row->needs == kWorldBasic) return row->algo;
  }
  return a;
}

}  // namespace

Plan make_plan(uint64_t seed, int iteration, int n, int calls, size_t max_numel) {
  Rng rng{mix64(seed, 0x5eed0000ull + static_cast<uint64_t>(iteration))};
  Plan plan;
  plan.groups.push_back(std::vector<int>(n));
  std::iota(plan.groups[0].begin(), plan.groups[0].end(), 0);
  for (int c = 0; c < calls;) {
    Step s;
    if (n > 1 && plan.groups.size() < 8 && rng.below(8) == 0) {
      s.group = static_cast<int>(plan.groups.size());
      if (rng.below(2) == 0) {
        s.kind = StepKind::kNewGroup;
        std::vector<int> all = plan.groups[0];
        for (int i = n - 1; i > 0; --i) std::swap(all[i], all[rng.below(i + 1)]);
        all.resize(1 + rng.below(n));
        s.members = all;
        plan.groups.push_back(all);
      } else {
        s.kind = StepKind::kSplit;
        std::vector<std::vector<std::pair<int, int>>> by_color(3);
        for (int r = 0; r < n; ++r) {
          s.colors.push_back(static_cast<int>(rng.below(4)) - 1);
          s.keys.push_back(static_cast<int>(rng.below(5)));
          if (s.colors[r] >= 0) by_color[s.colors[r]].emplace_back(s.keys[r], r);
        }
        for (auto& members : by_color) {
          std::sort(members.begin(), members.end());
          plan.groups.emplace_back();
          for (auto& m : members) plan.groups.back().push_back(m.second);
        }
      }
      plan.steps.push_back(std::move(s));
      continue;
    }
    ++c;
    do {
      s.group = rng.below(3) == 0 ? 0 : static_cast<int>(rng.below(plan.groups.size()));
    } while (plan.groups[s.group].empty());
    const int g = static_cast<int>(plan.groups[s.group].size());
    const OpKind ops[] = {OpKind::kAllReduce,     OpKind::kAllReduce, OpKind::kAllReduce,
                          OpKind::kReduceScatter, OpKind::kAllGather, OpKind::kBroadcast,
                          OpKind::kReduce,        OpKind::kAllToAll,  OpKind::kAllToAll,
                          OpKind::kBarrier};
    s.op = rng.pick(ops);
    s.dtype = rng.pick({DType::kFloat32, DType::kFloat64, DType::kInt32, DType::kInt64});
    s.reduce =
        rng.pick({ReduceOp::kSum, ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin});
    s.root = static_cast<int>(rng.below(g));
    s.numel = pick_numel(rng, g, max_numel);
    // Any algorithm the registry lists for the op (that the thread world runs) but `shared`
    // (drawn below), or the op's baseline (in the draw's first slot, where kAuto once was).
    std::vector<Algo> algos = {Algo::kAuto};
    for (const AlgoRow* row : algorithms_of(s.op)) {
      if (row->needs == kWorldBasic && row->algo != Algo::kShared) algos.push_back(row->algo);
    }
    s.algo = algos[rng.below(algos.size())];
    // `shared` takes half of `deterministic`'s draws (the same sums, bitwise): a new row must
    // not reshuffle every later choice of the seeded plans the mutant budgets were set on.
    if (s.algo == Algo::kDeterministic && s.op == OpKind::kAllReduce && c % 2) {
      s.algo = Algo::kShared;
    }
    switch (s.op) {
      case OpKind::kAllToAll:
        s.single = rng.below(2) == 0;
        if (s.single) {
          for (int k = 0; k < g * g; ++k) {
            s.counts.push_back(rng.below(3) == 0 ? 0 : rng.below(max_numel / g + 3));
          }
        }
        break;
      case OpKind::kBarrier:
        s.numel = 0;
        break;
      default:
        break;
    }
    if (s.algo == Algo::kAuto) s.algo = baseline_algo(s.op, s.numel * dtype_size(s.dtype));
    const AlgoRow* row = find_algorithm(s.op, s.algo);
    const bool ordered = row != nullptr && row->deterministic;
    s.fractional =
        (s.dtype == DType::kFloat32 || s.dtype == DType::kFloat64) && (!reduces(s.op) || ordered);
    s.repeats = reduces(s.op) && ordered ? 2 : 1;
    plan.steps.push_back(std::move(s));
  }
  if (n > 1) add_failing_lend(seed, iteration, n, max_numel, plan);
  return plan;
}

size_t input_count(const Step& s, int g, int r) {
  switch (s.op) {
    case OpKind::kAllGather:
      return split_size(s.numel, g, r);
    case OpKind::kAllToAll:
      if (s.single) {
        return std::accumulate(s.counts.begin() + r * g, s.counts.begin() + (r + 1) * g, size_t{0});
      }
      return s.numel;
    default:
      return s.numel;
  }
}

size_t output_count(const Step& s, int g, int r) {
  switch (s.op) {
    case OpKind::kReduceScatter:
      return split_size(s.numel, g, r);
    case OpKind::kAllToAll:
      if (s.single) {
        size_t c = 0;
        for (int i = 0; i < g; ++i) c += s.counts[i * g + r];
        return c;
      }
      return g * split_size(s.numel, g, r);
    default:
      return s.numel;
  }
}

Work work(const Step& s, int g) {
  const uint64_t n = static_cast<uint64_t>(g);
  const uint64_t es = dtype_size(s.dtype);
  if (s.kind == StepKind::kFailingLend) {
    const uint64_t lent = (n - 1) * s.numel * es;
    return {(n - 1) * static_cast<uint64_t>(s.chunks + 1), lent, lent};
  }
  uint64_t per_rank = 0, in = 0, out = 0;  // elements
  for (int r = 0; r < g; ++r) {
    per_rank =
        std::max({per_rank, uint64_t{input_count(s, g, r)}, uint64_t{output_count(s, g, r)}});
    in += input_count(s, g, r);
    out += output_count(s, g, r);
  }
  uint64_t buffers = 2;  // buffers a rank sends: ring, tree, direct and shared send at most 2
  uint64_t in_flight = std::max(in, out);
  if (s.op == OpKind::kAllReduce && s.algo == Algo::kDirect) {
    buffers = n - 1;
    in_flight = (n - 1) * in;
  }
  if (s.op == OpKind::kAllReduce && s.algo == Algo::kRecursiveDoubling) {
    buffers = static_cast<uint64_t>(std::bit_width(n - 1)) + 2;
  }
  return {2 * n * n, buffers * n * per_rank * es, in_flight * es};
}

void fill_input(uint64_t seed, int iteration, int step, const Step& s, int g, int r, void* out) {
  const size_t base = s.op == OpKind::kAllGather ? split_offset(s.numel, g, r) : 0;
  with_type(s.dtype, [&](auto zero) {
    using T = decltype(zero);
    T* p = static_cast<T*>(out);
    const size_t n = input_count(s, g, r);
    for (size_t i = 0; i < n; ++i)
      p[i] = value<T>(seed, iteration, step, r, base + i, s.fractional);
  });
}

Bytes::Bytes(size_t n) : size_(n) {
  void* p = n >= 2 * kHugePage ? allocate_huge_pages(n)
                               : std::aligned_alloc(64, std::max<size_t>(64, (n + 63) / 64 * 64));
  if (p == nullptr) throw std::bad_alloc();
  p_.reset(static_cast<std::byte*>(p));
}

void Bytes::Free::operator()(std::byte* p) const { std::free(p); }

std::vector<Bytes> reference(uint64_t seed, int iteration, int step, const Step& s, int g) {
  std::vector<Bytes> out;
  out.reserve(g);
  with_type(s.dtype, [&](auto zero) {
    using T = decltype(zero);
    constexpr size_t es = sizeof(T);
    std::vector<Bytes> in;
    in.reserve(g);
    for (int r = 0; r < g; ++r) {
      in.emplace_back(input_count(s, g, r) * es);
      fill_input(seed, iteration, step, s, g, r, in[r].data());
    }
    Bytes red;  // reduction in rank order 0..g-1, then AVG's division
    if (reduces(s.op)) {
      red = Bytes(in[0].size());
      T* acc = reinterpret_cast<T*>(red.data());
      std::memcpy(acc, in[0].data(), red.size());
      const size_t n = red.size() / es;
      for (int r = 1; r < g; ++r) {
        const T* x = reinterpret_cast<const T*>(in[r].data());
        for (size_t i = 0; i < n; ++i) acc[i] = combine(s.reduce, acc[i], x[i]);
      }
      if (s.reduce == ReduceOp::kAvg) reducer_for(s.dtype, s.reduce).divide(acc, n, g);
    }
    for (int r = 0; r < g; ++r) {
      // Copies `n` elements of `src` from element `from` to the output's element `at`.
      Bytes& o = out.emplace_back(output_count(s, g, r) * es);
      auto put = [&](size_t at, const Bytes& src, size_t from, size_t n) {
        if (n) std::memcpy(o.data() + at * es, src.data() + from * es, n * es);
      };
      switch (s.op) {
        case OpKind::kAllReduce:
          put(0, red, 0, s.numel);
          break;
        case OpKind::kReduce:
          put(0, r == s.root ? red : in[r], 0, s.numel);
          break;
        case OpKind::kReduceScatter:
          put(0, red, split_offset(s.numel, g, r), split_size(s.numel, g, r));
          break;
        case OpKind::kAllGather:
          for (int i = 0; i < g; ++i) put(split_offset(s.numel, g, i), in[i], 0, in[i].size() / es);
          break;
        case OpKind::kBroadcast:
          put(0, in[s.root], 0, s.numel);
          break;
        case OpKind::kAllToAll: {
          size_t at = 0;
          for (int i = 0; i < g; ++i) {
            size_t off = 0, len = 0;
            if (s.single) {
              for (int j = 0; j < r; ++j) off += s.counts[i * g + j];
              len = s.counts[i * g + r];
            } else {
              off = split_offset(s.numel, g, r);
              len = split_size(s.numel, g, r);
            }
            put(at, in[i], off, len);
            at += len;
          }
          break;
        }
        default:
          break;
      }
    }
  });
  return out;
}

std::string first_difference(DType t, const std::byte* got, const std::byte* want, size_t n) {
  std::string msg;
  with_type(t, [&](auto zero) {
    using T = decltype(zero);
    for (size_t i = 0; i < n; ++i) {
      T a, b;
      std::memcpy(&a, got + i * sizeof(T), sizeof(T));
      std::memcpy(&b, want + i * sizeof(T), sizeof(T));
      if (std::memcmp(&a, &b, sizeof(T)) != 0) {
        msg = "element " + std::to_string(i) + " is " + std::to_string(a) +
              " but the reference is " + std::to_string(b);
        return;
      }
    }
  });
  return msg;
}

std::string describe(const Step& s) {
  if (s.kind == StepKind::kFailingLend) {
    return "failing_lend(numel=" + std::to_string(s.numel) + ", dtype=" + to_string(s.dtype) +
           ", chunks=" + std::to_string(s.chunks) + ", lender=" + std::to_string(s.root) + ")";
  }
  std::string d = to_string(s.op);
  if (s.single) d += "_single";
  d += "(numel=" + std::to_string(s.numel) + ", dtype=" + to_string(s.dtype);
  if (reduces(s.op)) d += std::string(", op=") + to_string(s.reduce);
  if (s.op != OpKind::kAllToAll && s.op != OpKind::kBarrier)
    d += std::string(", algo=") + to_string(s.algo);
  if (s.op == OpKind::kBroadcast || s.op == OpKind::kReduce)
    d += ", root=" + std::to_string(s.root);
  return d + ")";
}

}  // namespace dtsim::stress
