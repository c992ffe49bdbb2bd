// all_reduce_bound: the best busbw any all_reduce could reach on this machine, measured.
//
//   build/bench/all_reduce_bound -n 2,4,8 -b 1M -e 16M -f 16 [-t 5] [--trial-ms 20] [-k K] [-v]
//
// N float32 buffers of `size` bytes stand for the N ranks' buffers. T threads each take a
// contiguous share of the elements and do the least memory traffic an all_reduce needs:
// read the N buffers' elements once, write their rank-order sum into all N buffers once
// (N reads and N writes of S/T per thread, 2NS bytes per call for the job). No
// synchronisation inside a trial: each thread runs `iters` passes back to back; a trial's
// time is from the first thread's start to the last thread's end, divided by `iters` (the
// rule of bench/collective_harness.h). Several loops are tried (plain: one vector at a
// time; unrolled: 4 vectors, as Reducer::reduce_all; wide: 8; prefetch: unrolled with a
// software prefetch 2 KiB ahead in every buffer; blocked: an L1 block summed
// then copied out, as `shared` did before; stream: unrolled with non-temporal stores), with
// T = N and T = min(N, cores) threads (bound to cores when T <= cores), and with the
// buffers 4 KiB-aligned or staggered by 320 bytes (both cache-line aligned, as a caller's
// buffers may not be: the bound errs high). The data row is the fastest variant; -v
// prints every one. Each variant is verified once (#wrong) before timing.
//
// busbw = 2(N - 1)/N x size / time (nccl-tests' all_reduce factor), GB/s = 1e9 B/s, so the
// data rows read like nccl_table's (time column 5, busbw column 7).
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <immintrin.h>

#include "bench/collective_harness.h"

namespace {

using dtsim::bench::median;
using dtsim::bench::parse_bytes;

using Clock = std::chrono::steady_clock;
// Eight floats: one AVX register, or two SSE halves in a portable build. V8u is the
// unaligned, may-alias view that loads and stores go through (vmovups).
using V8 = float __attribute__((vector_size(32)));
using V8u = float __attribute__((vector_size(32), aligned(4), may_alias));
constexpr size_t kLanes = 8;
constexpr size_t kAlignFloats = 16;    // thread shares start on 64-byte lines
constexpr size_t kBlockFloats = 2048;  // the L1 block of kernel "blocked" (8 KiB)

enum class Kernel { kPlain, kUnrolled, kWide, kPrefetch, kBlocked, kStream };
constexpr Kernel kKernels[] = {Kernel::kPlain,    Kernel::kUnrolled, Kernel::kWide,
                               Kernel::kPrefetch, Kernel::kBlocked,  Kernel::kStream};
const char* kernel_name(Kernel k) {
  switch (k) {
    case Kernel::kPlain:
      return "plain";
    case Kernel::kUnrolled:
      return "unrolled";
    case Kernel::kWide:
      return "wide";
    case Kernel::kPrefetch:
      return "prefetch";
    case Kernel::kBlocked:
      return "blocked";
    case Kernel::kStream:
      return "stream";
  }
  return "?";
}

inline V8 load(const float* p) { return *reinterpret_cast<const V8u*>(p); }
inline void store(float* p, V8 v) { *reinterpret_cast<V8u*>(p) = v; }
inline void stream(float* p, V8 v) {  // p is 32-byte aligned (shares start on lines)
#ifdef __AVX__
  _mm256_stream_ps(p, reinterpret_cast<__m256>(v));
#else
  using V4 = float __attribute__((vector_size(16)));
  _mm_stream_ps(p, reinterpret_cast<__m128>(V4{v[0], v[1], v[2], v[3]}));
  _mm_stream_ps(p + 4, reinterpret_cast<__m128>(V4{v[4], v[5], v[6], v[7]}));
#endif
}

// Elements [lo, hi) of the N buffers: sum in rank order, write the sum to all N.
void scalar_tail(float* const* b, int n, size_t lo, size_t hi) {
  for (size_t i = lo; i < hi; ++i) {
    float s = b[0][i];
    for (int p = 1; p < n; ++p) s += b[p][i];
    for (int p = 0; p < n; ++p) b[p][i] = s;
  }
}

void pass_plain(float* const* b, int n, size_t lo, size_t hi) {
  size_t i = lo;
  for (; i + kLanes <= hi; i += kLanes) {
    V8 s = load(b[0] + i);
    for (int p = 1; p < n; ++p) s += load(b[p] + i);
    for (int p = 0; p < n; ++p) store(b[p] + i, s);
  }
  scalar_tail(b, n, i, hi);
}

// kVecs vectors of eight floats at a time (a strip of 32 kVecs bytes held in registers).
// kPrefetch: also asks for the lines 2 KiB ahead in every buffer (software prefetch).
template <size_t kVecs, bool kNonTemporal, bool kPrefetch = false>
void pass_unrolled(float* const* b, int n, size_t lo, size_t hi) {
  size_t i = lo;
  for (; i + kVecs * kLanes <= hi; i += kVecs * kLanes) {
    if constexpr (kPrefetch) {
      for (int p = 0; p < n; ++p) {
        for (size_t l = 0; l < kVecs * kLanes; l += 16) {
          _mm_prefetch(reinterpret_cast<const char*>(b[p] + i + l + 512), _MM_HINT_T0);
        }
      }
    }
    V8 s[kVecs];
    for (size_t v = 0; v < kVecs; ++v) s[v] = load(b[0] + i + v * kLanes);
    for (int p = 1; p < n; ++p) {
      for (size_t v = 0; v < kVecs; ++v) s[v] += load(b[p] + i + v * kLanes);
    }
    for (int p = 0; p < n; ++p) {
      for (size_t v = 0; v < kVecs; ++v) {
        if constexpr (kNonTemporal) {
          stream(b[p] + i + v * kLanes, s[v]);
        } else {
          store(b[p] + i + v * kLanes, s[v]);
        }
      }
    }
  }
  if constexpr (kNonTemporal) _mm_sfence();
  scalar_tail(b, n, i, hi);
}

void pass_blocked(float* const* b, int n, size_t lo, size_t hi, float* tmp) {
  for (size_t at = lo; at < hi; at += kBlockFloats) {
    const size_t len = std::min(kBlockFloats, hi - at);
    for (size_t i = 0; i < len; ++i) tmp[i] = b[0][at + i] + b[1][at + i];
    for (int p = 2; p < n; ++p) {
      const float* src = b[p] + at;
      for (size_t i = 0; i < len; ++i) tmp[i] += src[i];
    }
    for (int p = 0; p < n; ++p) std::memcpy(b[p] + at, tmp, len * sizeof(float));
  }
}

void pass(Kernel k, float* const* b, int n, size_t lo, size_t hi, float* tmp) {
  switch (k) {
    case Kernel::kPlain:
      return pass_plain(b, n, lo, hi);
    case Kernel::kUnrolled:
      return pass_unrolled<4, false>(b, n, lo, hi);
    case Kernel::kWide:
      return pass_unrolled<8, false>(b, n, lo, hi);
    case Kernel::kPrefetch:
      return pass_unrolled<4, false, true>(b, n, lo, hi);
    case Kernel::kBlocked:
      if (n == 1) return;  // one buffer is its own sum
      return pass_blocked(b, n, lo, hi, tmp);
    case Kernel::kStream:
      return pass_unrolled<4, true>(b, n, lo, hi);
  }
}

struct Options {
  std::vector<int> ranks = {2, 4, 8};
  size_t min_bytes = size_t{1} << 20;
  size_t max_bytes = size_t{16} << 20;
  size_t factor = 16;
  int trials = 5;
  double trial_ms = 20;
  bool verbose = false;
  std::vector<Kernel> kernels{std::begin(kKernels), std::end(kKernels)};
};

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr,
               "all_reduce_bound: %s\n"
               "usage: all_reduce_bound [-n 2[,4,8]] [-b 1M] [-e 16M] [-f 16] [-t trials]\n"
               "                        [--trial-ms 20] [-k "
               "plain|unrolled|wide|prefetch|blocked|stream] [-v]\n",
               why);
  std::exit(2);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage(("missing value after " + a).c_str());
      return argv[++i];
    };
    if (a == "-n") {
      o.ranks.clear();
      std::stringstream ss(value());
      for (std::string s; std::getline(ss, s, ',');) o.ranks.push_back(std::atoi(s.c_str()));
    } else if (a == "-b" || a == "-e") {
      if (!parse_bytes(value(), a == "-b" ? &o.min_bytes : &o.max_bytes)) {
        usage("bad size (use 8, 1K, 64M)");
      }
    } else if (a == "-f") {
      o.factor = static_cast<size_t>(std::atoi(value().c_str()));
    } else if (a == "-t") {
      o.trials = std::atoi(value().c_str());
    } else if (a == "--trial-ms") {
      o.trial_ms = std::atof(value().c_str());
    } else if (a == "-k") {
      const std::string k = value();
      o.kernels.clear();
      for (Kernel x : kKernels) {
        if (k == kernel_name(x)) o.kernels.push_back(x);
      }
      if (o.kernels.empty())
        usage("unknown kernel (plain, unrolled, wide, prefetch, blocked, stream)");
    } else if (a == "-v") {
      o.verbose = true;
    } else {
      usage(("unknown flag " + a).c_str());
    }
  }
  if (o.factor < 2 || o.trials < 1 || o.min_bytes < 4 || o.max_bytes < o.min_bytes ||
      o.trial_ms <= 0) {
    usage("need -f >= 2, -t >= 1, --trial-ms > 0, 4 <= -b <= -e");
  }
  for (int n : o.ranks) {
    if (n < 1 || n > 256) usage("ranks must be in [1, 256]");
  }
  return o;
}

// N aligned buffers of `count` floats and T threads that run passes over them on demand.
class Machine {
 public:
  // stagger: buffer p starts p x 320 bytes past a page (else every one on a page boundary).
  Machine(int n, int threads, size_t count, bool stagger) : n_(n), count_(count) {
    for (int p = 0; p < n; ++p) {
      const size_t skip = stagger ? static_cast<size_t>(p) * 320 : 0;
      const size_t bytes = (count * sizeof(float) + skip + 4095) / 4096 * 4096;
      std::byte* raw = static_cast<std::byte*>(std::aligned_alloc(4096, bytes));
      if (!raw) usage("out of memory");
      raws_.push_back(raw);
      bufs_.push_back(reinterpret_cast<float*>(raw + skip));
    }
    const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
    const bool bind = threads <= static_cast<int>(cores);
    const size_t lines = count / kAlignFloats;
    for (int t = 0; t < threads; ++t) {
      const size_t lo = lines * static_cast<size_t>(t) / static_cast<size_t>(threads);
      const size_t hi = lines * static_cast<size_t>(t + 1) / static_cast<size_t>(threads);
      Worker& w = workers_.emplace_back();
      w.lo = lo * kAlignFloats;
      w.hi = t + 1 == threads ? count : hi * kAlignFloats;
      w.tmp.resize(kBlockFloats);
    }
    for (int t = 0; t < threads; ++t) {
      threads_.emplace_back([this, t] { loop(workers_[static_cast<size_t>(t)]); });
      if (bind) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(static_cast<unsigned>(t) % cores, &set);
        pthread_setaffinity_np(threads_.back().native_handle(), sizeof set, &set);
      }
    }
  }
  ~Machine() {
    stop_ = true;
    gen_.fetch_add(1);
    gen_.notify_all();
    for (std::thread& t : threads_) t.join();
    for (std::byte* b : raws_) std::free(b);
  }
  Machine(const Machine&) = delete;
  Machine& operator=(const Machine&) = delete;

  // Elements that differ from the rank-order sum after one pass of `k` from known inputs;
  // leaves every buffer zero (sums of zeros stay zero in the timed passes).
  int64_t verify(Kernel k) {
    for (int p = 0; p < n_; ++p) {
      for (size_t i = 0; i < count_; ++i) bufs_[p][i] = float(p + 1) + float(i % 7);
    }
    run(k, 1);
    int64_t wrong = 0;
    for (int p = 0; p < n_; ++p) {
      for (size_t i = 0; i < count_; ++i) {
        float want = 1.0f + float(i % 7);
        for (int q = 1; q < n_; ++q) want += float(q + 1) + float(i % 7);
        wrong += bufs_[p][i] != want;
      }
      std::memset(bufs_[p], 0, count_ * sizeof(float));
    }
    return wrong;
  }

  // Seconds per pass: every thread runs `iters` passes of `k`; first start to last end.
  double run(Kernel k, int64_t iters) {
    kernel_ = k;
    iters_ = iters;
    done_.store(0);
    gen_.fetch_add(1, std::memory_order_release);
    gen_.notify_all();
    // Blocks (futex) rather than spins: a spinning main thread would take a core's time.
    for (int d; (d = done_.load(std::memory_order_acquire)) < static_cast<int>(workers_.size());) {
      done_.wait(d, std::memory_order_acquire);
    }
    Clock::time_point first = workers_[0].start, last = workers_[0].end;
    for (const Worker& w : workers_) {
      first = std::min(first, w.start);
      last = std::max(last, w.end);
    }
    return std::chrono::duration<double>(last - first).count() / static_cast<double>(iters);
  }

 private:
  struct Worker {
    size_t lo = 0, hi = 0;
    std::vector<float> tmp;
    Clock::time_point start, end;
  };
  void loop(Worker& w) {
    uint64_t seen = 0;
    for (;;) {
      uint64_t g;
      while ((g = gen_.load(std::memory_order_acquire)) == seen) gen_.wait(seen);
      seen = g;
      if (stop_) return;
      w.start = Clock::now();
      for (int64_t i = 0; i < iters_; ++i)
        pass(kernel_, bufs_.data(), n_, w.lo, w.hi, w.tmp.data());
      w.end = Clock::now();
      done_.fetch_add(1, std::memory_order_acq_rel);
      done_.notify_one();
    }
  }

  int n_;
  size_t count_;
  std::vector<std::byte*> raws_;
  std::vector<float*> bufs_;
  std::vector<Worker> workers_;
  std::vector<std::thread> threads_;
  std::atomic<uint64_t> gen_{0};
  std::atomic<int> done_{0};
  Kernel kernel_ = Kernel::kPlain;
  int64_t iters_ = 0;
  bool stop_ = false;
};

// One loop on one thread count: its calls per trial and its trials' seconds per call.
struct Variant {
  Machine* machine;
  Kernel kernel;
  int threads;
  bool stagger;
  int64_t iters;
  std::vector<double> seconds;
};

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  int failed = 0;
  for (int n : o.ranks) {
    std::printf(
        "#\n# all_reduce bound: %d buffers, the least traffic (N reads + N writes of "
        "each element), no synchronisation, best of kernels x threads x layouts, float32, "
        "median of %d trials\n#\n",
        n, o.trials);
    std::printf("# %10s %12s %8s %6s %11s %12s %12s %7s %9s %7s %9s\n", "size", "count", "type",
                "redop", "time(us)", "algbw(GB/s)", "busbw(GB/s)", "#wrong", "kernel", "threads",
                "layout");
    std::vector<int> thread_counts = {n};
    if (std::min(n, cores) != n) thread_counts.push_back(std::min(n, cores));
    std::vector<size_t> sizes;
    for (size_t b = o.min_bytes; b <= o.max_bytes; b *= o.factor) sizes.push_back(b);
    if (sizes.back() != o.max_bytes) sizes.push_back(o.max_bytes);
    for (size_t bytes : sizes) {
      const size_t count = bytes / sizeof(float);
      // Every variant is verified and calibrated, then the trials run interleaved
      // (variant 1, 2, ..., 1, 2, ...) so that a slow spell of the host hits them alike.
      std::vector<std::unique_ptr<Machine>> machines;
      std::vector<Variant> vs;
      int64_t wrong = 0;
      for (int threads : thread_counts) {
        for (bool stagger : {false, true}) {
          machines.push_back(std::make_unique<Machine>(n, threads, count, stagger));
          Machine& m = *machines.back();
          for (Kernel k : o.kernels) {
            wrong += m.verify(k);
            // Calls per trial: about --trial-ms (as nccl_table calibrates).
            int64_t iters = 1;
            while (m.run(k, iters) * double(iters) < o.trial_ms / 8e3) iters *= 4;
            iters = std::max<int64_t>(1, int64_t(o.trial_ms / 1e3 / m.run(k, iters)));
            vs.push_back({&m, k, threads, stagger, iters, {}});
          }
        }
      }
      for (int t = 0; t < o.trials; ++t) {
        for (Variant& v : vs) v.seconds.push_back(v.machine->run(v.kernel, v.iters));
      }
      const Variant* best = nullptr;
      for (const Variant& v : vs) {
        const double s = median(v.seconds);
        if (o.verbose) {
          std::printf("#   %10zu %-9s threads %d %-9s: %11.2f us  busbw %8.3f GB/s\n", bytes,
                      kernel_name(v.kernel), v.threads, v.stagger ? "staggered" : "page", s * 1e6,
                      2.0 * (n - 1) / n * double(bytes) / s / 1e9);
        }
        if (!best || s < median(best->seconds)) best = &v;
      }
      const double s = median(best->seconds);
      const double algbw = double(bytes) / s / 1e9;
      std::printf("  %10zu %12zu %8s %6s %11.2f %12.3f %12.3f %7lld %9s %7d %9s\n", bytes, count,
                  "float", "sum", s * 1e6, algbw, algbw * 2.0 * (n - 1) / n,
                  static_cast<long long>(wrong), kernel_name(best->kernel), best->threads,
                  best->stagger ? "staggered" : "page");
      std::fflush(stdout);
      failed |= wrong != 0;
    }
  }
  return failed;
}
