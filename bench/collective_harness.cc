#include "bench/collective_harness.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <span>
#include <thread>

#include "runtime/algorithms/registry.h"
#include "runtime/communicator.h"
#include "runtime/split.h"

namespace dtsim::bench {
namespace {

using Clock = std::chrono::steady_clock;

// Values whose sums stay exact in float32: rank r contributes (r + 1) + (i mod 7).
float contribution(int r, size_t i) {
  return static_cast<float>(r + 1) + static_cast<float>(i % 7);
}
float sum_of(int n, size_t i) {
  return static_cast<float>(n * (n + 1) / 2) + static_cast<float>(n) * static_cast<float>(i % 7);
}

float pattern(size_t i) { return static_cast<float>(i % 1000) + 1.0f; }

bool chunked(Coll c) {
  return c == Coll::kReduceScatter || c == Coll::kAllGather || c == Coll::kAllToAll;
}

// Sizes the rank's buffers for `c` (input and output, in elements).
void size_buffers(const CollCase& c, int r, std::vector<float>* in, std::vector<float>* out) {
  const size_t n = c.elements();
  const size_t parts = static_cast<size_t>(c.ranks);
  const size_t mine = split_size(n, parts, static_cast<size_t>(r));
  switch (c.coll) {
    case Coll::kAllReduce:
    case Coll::kBroadcast:
    case Coll::kReduce:
      in->resize(n);
      out->resize(0);
      break;
    case Coll::kReduceScatter:
      in->resize(n);
      out->resize(mine);
      break;
    case Coll::kAllGather:
      in->resize(mine);
      out->resize(n);
      break;
    case Coll::kAllToAll:
      in->resize(n);
      out->resize(parts * mine);
      break;
  }
}

void call(Communicator& comm, const CollCase& c, std::vector<float>& in, std::vector<float>& out) {
  switch (c.coll) {
    case Coll::kAllReduce:
      comm.all_reduce(std::span<float>(in), ReduceOp::kSum, c.algo);
      break;
    case Coll::kReduceScatter:
      comm.reduce_scatter(std::span<const float>(in), std::span<float>(out), ReduceOp::kSum,
                          c.algo);
      break;
    case Coll::kAllGather:
      comm.all_gather(std::span<const float>(in), std::span<float>(out), c.algo);
      break;
    case Coll::kBroadcast:
      comm.broadcast(std::span<float>(in), 0, c.algo);
      break;
    case Coll::kReduce:
      comm.reduce(std::span<float>(in), 0, ReduceOp::kSum, c.algo);
      break;
    case Coll::kAllToAll:
      comm.all_to_all(std::span<const float>(in), std::span<float>(out), c.algo);
      break;
  }
}

// Fills rank r's input with the values verify() expects to see combined.
void fill(const CollCase& c, int r, std::vector<float>& in) {
  const size_t n = c.elements();
  const size_t parts = static_cast<size_t>(c.ranks);
  switch (c.coll) {
    case Coll::kAllReduce:
    case Coll::kReduceScatter:
    case Coll::kReduce:
      for (size_t i = 0; i < in.size(); ++i) in[i] = contribution(r, i);
      break;
    case Coll::kAllGather: {
      const size_t off = split_offset(n, parts, static_cast<size_t>(r));
      for (size_t i = 0; i < in.size(); ++i) in[i] = pattern(off + i);
      break;
    }
    case Coll::kBroadcast:
      for (size_t i = 0; i < in.size(); ++i) in[i] = r == 0 ? pattern(i) : 0.0f;
      break;
    case Coll::kAllToAll:
      for (size_t j = 0; j < parts; ++j) {
        const size_t off = split_offset(n, parts, j);
        const size_t len = split_size(n, parts, j);
        for (size_t k = 0; k < len; ++k) in[off + k] = static_cast<float>(r * c.ranks + int(j));
      }
      break;
  }
}

// Elements of rank r's result that differ from the hand-computed expectation.
int64_t count_wrong(const CollCase& c, int r, const std::vector<float>& in,
                    const std::vector<float>& out) {
  const size_t n = c.elements();
  const size_t parts = static_cast<size_t>(c.ranks);
  int64_t wrong = 0;
  switch (c.coll) {
    case Coll::kAllReduce:
      for (size_t i = 0; i < in.size(); ++i) wrong += in[i] != sum_of(c.ranks, i);
      break;
    case Coll::kReduce:
      if (r == 0) {
        for (size_t i = 0; i < in.size(); ++i) wrong += in[i] != sum_of(c.ranks, i);
      }
      break;
    case Coll::kReduceScatter: {
      const size_t off = split_offset(n, parts, static_cast<size_t>(r));
      for (size_t i = 0; i < out.size(); ++i) wrong += out[i] != sum_of(c.ranks, off + i);
      break;
    }
    case Coll::kAllGather:
    case Coll::kBroadcast: {
      const std::vector<float>& v = c.coll == Coll::kAllGather ? out : in;
      for (size_t i = 0; i < v.size(); ++i) wrong += v[i] != pattern(i);
      break;
    }
    case Coll::kAllToAll: {
      const size_t len = split_size(n, parts, static_cast<size_t>(r));
      for (size_t i = 0; i < parts; ++i) {
        for (size_t k = 0; k < len; ++k) {
          wrong += out[i * len + k] != static_cast<float>(int(i) * c.ranks + r);
        }
      }
      break;
    }
  }
  return wrong;
}

}  // namespace

const char* coll_name(Coll c) {
  switch (c) {
    case Coll::kAllReduce:
      return "all_reduce";
    case Coll::kReduceScatter:
      return "reduce_scatter";
    case Coll::kAllGather:
      return "all_gather";
    case Coll::kBroadcast:
      return "broadcast";
    case Coll::kReduce:
      return "reduce";
    case Coll::kAllToAll:
      return "all_to_all";
  }
  return "?";
}

bool parse_coll(const std::string& s, Coll* out) {
  for (Coll c : kAllColls) {
    if (s == coll_name(c)) {
      *out = c;
      return true;
    }
  }
  return false;
}

double bus_factor(Coll c, int n) {
  switch (c) {
    case Coll::kAllReduce:
      return 2.0 * (n - 1) / n;
    case Coll::kReduceScatter:
    case Coll::kAllGather:
    case Coll::kAllToAll:
      return static_cast<double>(n - 1) / n;
    case Coll::kBroadcast:
    case Coll::kReduce:
      return 1.0;
  }
  return 1.0;
}

OpKind op_of(Coll c) {
  switch (c) {
    case Coll::kAllReduce:
      return OpKind::kAllReduce;
    case Coll::kReduceScatter:
      return OpKind::kReduceScatter;
    case Coll::kAllGather:
      return OpKind::kAllGather;
    case Coll::kBroadcast:
      return OpKind::kBroadcast;
    case Coll::kReduce:
      return OpKind::kReduce;
    case Coll::kAllToAll:
      return OpKind::kAllToAll;
  }
  return OpKind::kAllReduce;
}

std::vector<Algo> algos_of(Coll c) {
  std::vector<Algo> out = {Algo::kAuto};
  for (const AlgoRow* row : algorithms_of(op_of(c))) {
    if (row->needs == kWorldBasic) out.push_back(row->algo);
  }
  return out;
}

const char* redop_of(Coll c) {
  return c == Coll::kAllReduce || c == Coll::kReduceScatter || c == Coll::kReduce ? "sum" : "none";
}

size_t CollCase::elements() const {
  const size_t e = std::max<size_t>(bytes / sizeof(float), 1);
  if (!chunked(coll)) return e;
  const size_t n = static_cast<size_t>(ranks);
  return std::max<size_t>(e / n, 1) * n;
}

size_t CollCase::count() const {
  return chunked(coll) ? elements() / static_cast<size_t>(ranks) : elements();
}

CollectiveHarness::~CollectiveHarness() = default;

World& CollectiveHarness::world(const CollCase& c) {
  // A fresh world per (N, collective, algorithm): payload pools sized by one algorithm
  // (the direct ones hold N - 1 full buffers per rank) are freed before the next.
  const auto key = std::make_tuple(c.ranks, int(c.coll), int(c.algo));
  if (!world_ || key != world_key_) {
    world_key_ = key;
    const int n = c.ranks;
    world_.reset();
    buffers_.clear();
    WorldOptions o = options_;
    // As mpirun binds ranks to cores when there are enough of them (and not when
    // oversubscribed), so that OpenMPI and dtsim run side by side under the same rule.
    o.bind_to_cores = n <= static_cast<int>(std::thread::hardware_concurrency());
    world_ = std::make_unique<World>(n, o);
    buffers_.resize(static_cast<size_t>(n));
  }
  return *world_;
}

CollResult CollectiveHarness::run(const CollCase& c, int64_t iters, int trials, bool verify) {
  World& w = world(c);
  const size_t n = static_cast<size_t>(c.ranks);
  std::vector<int64_t> wrong(n, 0);
  std::vector<std::vector<Clock::time_point>> start(n), stop(n);
  w.run([&](Communicator& comm) {
    const int r = comm.rank();
    RankBuffers& b = buffers_[static_cast<size_t>(r)];
    size_buffers(c, r, &b.in, &b.out);
    if (verify) {
      fill(c, r, b.in);
      call(comm, c, b.in, b.out);
      wrong[static_cast<size_t>(r)] = count_wrong(c, r, b.in, b.out);
    }
    std::fill(b.in.begin(), b.in.end(), 0.0f);  // sums of zeros never overflow
    call(comm, c, b.in, b.out);                 // warm the payload pools
    for (int t = 0; t < trials; ++t) {
      comm.barrier();
      start[static_cast<size_t>(r)].push_back(Clock::now());
      for (int64_t i = 0; i < iters; ++i) {
        call(comm, c, b.in, b.out);
      }
      stop[static_cast<size_t>(r)].push_back(Clock::now());
    }
  });
  CollResult res;
  for (int64_t x : wrong) res.wrong += x;
  for (int t = 0; t < trials; ++t) {
    Clock::time_point first = start[0][t], last = stop[0][t];
    for (size_t r = 1; r < n; ++r) {
      first = std::min(first, start[r][t]);
      last = std::max(last, stop[r][t]);
    }
    const double s = std::chrono::duration<double>(last - first).count();
    res.seconds_per_call.push_back(s / static_cast<double>(iters));
  }
  return res;
}

int64_t CollectiveHarness::calibrate(const CollCase& c, double target_seconds) {
  int64_t iters = 1;
  for (;;) {
    const double s = run(c, iters, 1, false).seconds_per_call[0] * static_cast<double>(iters);
    if (s >= target_seconds / 8 || iters >= (1 << 20)) {
      const double per = s / static_cast<double>(iters);
      return std::max<int64_t>(1, static_cast<int64_t>(target_seconds / std::max(per, 1e-9)));
    }
    iters *= 8;
  }
}

double memcpy_seconds(size_t bytes, int trials) {
  std::vector<std::byte> a(bytes, std::byte{1}), b(bytes, std::byte{2});
  // Enough copies per trial to last a few milliseconds.
  const int64_t reps =
      std::max<int64_t>(1, static_cast<int64_t>((8u << 20) / std::max<size_t>(bytes, 1)));
  std::vector<double> per;
  for (int t = 0; t < trials; ++t) {
    const auto t0 = Clock::now();
    for (int64_t i = 0; i < reps; ++i) {
      std::memcpy(b.data(), a.data(), bytes);
      asm volatile("" : : "r"(b.data()) : "memory");  // keep every copy
    }
    per.push_back(std::chrono::duration<double>(Clock::now() - t0).count() / double(reps));
  }
  return median(per);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
}

bool parse_bytes(const std::string& s, size_t* out) {
  if (s.empty()) return false;
  size_t pos = 0;
  unsigned long long v = 0;
  try {
    v = std::stoull(s, &pos);
  } catch (...) {
    return false;
  }
  const std::string suffix = s.substr(pos);
  const unsigned long long mult = suffix.empty() || suffix == "B" ? 1
                                  : suffix == "K"                 ? 1ull << 10
                                  : suffix == "M"                 ? 1ull << 20
                                  : suffix == "G"                 ? 1ull << 30
                                                                  : 0;
  if (mult == 0) return false;
  *out = static_cast<size_t>(v * mult);
  return true;
}

}  // namespace dtsim::bench
