// nccl_table: dtsim's collectives in the nccl-tests table layout.
//
//   build/bench/nccl_table -o all_reduce -n 2 -b 8 -e 64M -f 4 [-a ring] [-t 5] [--memcpy]
//
// For every size: verify once (#wrong), calibrate the calls per trial to about
// --trial-ms, run -t trials, and print the median trial's time per call, algbw = size /
// time and busbw = algbw * nccl-tests' factor (GB/s = 1e9 B/s). --memcpy adds a column
// with memcpy's bandwidth at the same size, measured in the same run. --spin sets
// WorldOptions::spin (busy-poll iterations before a waiting rank yields).
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench/collective_harness.h"
#include "runtime/algorithms/registry.h"

namespace dtsim::bench {
namespace {

struct Options {
  std::vector<Coll> colls = {Coll::kAllReduce};
  std::vector<int> ranks = {2};
  Algo algo = Algo::kAuto;
  size_t min_bytes = 8;
  size_t max_bytes = size_t{64} << 20;
  size_t factor = 4;
  int trials = 5;
  double trial_ms = 20;
  bool memcpy = false;
  int spin = -1;  // WorldOptions::spin (-1: the runtime's default policy)
};

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr,
               "nccl_table: %s\n"
               "usage: nccl_table [-o all_reduce[,reduce_scatter,...]|all] [-n 2[,4,8]]\n"
               "                  [-a auto|ALGO (one every -o collective has)] [-b 8] [-e 64M]\n"
               "                  [-f 4] [-t trials] [--trial-ms 20] [--memcpy] [--spin N]\n",
               why);
  std::exit(2);
}

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');) out.push_back(item);
  return out;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage(("missing value after " + a).c_str());
      return argv[++i];
    };
    if (a == "-o") {
      const std::string v = value();
      o.colls.clear();
      if (v == "all") {
        o.colls.assign(std::begin(kAllColls), std::end(kAllColls));
        continue;
      }
      for (const std::string& s : split_commas(v)) {
        Coll c;
        if (!parse_coll(s, &c)) usage(("unknown collective " + s).c_str());
        o.colls.push_back(c);
      }
    } else if (a == "-n") {
      o.ranks.clear();
      for (const std::string& s : split_commas(value())) o.ranks.push_back(std::atoi(s.c_str()));
    } else if (a == "-a") {
      if (!parse_algo(value(), &o.algo)) usage("unknown algorithm");
    } else if (a == "-b" || a == "-e") {
      size_t* dst = a == "-b" ? &o.min_bytes : &o.max_bytes;
      if (!parse_bytes(value(), dst)) usage("bad size (use 8, 1K, 64M)");
    } else if (a == "-f") {
      o.factor = static_cast<size_t>(std::atoi(value().c_str()));
    } else if (a == "-t") {
      o.trials = std::atoi(value().c_str());
    } else if (a == "--trial-ms") {
      o.trial_ms = std::atof(value().c_str());
    } else if (a == "--spin") {
      o.spin = std::atoi(value().c_str());
    } else if (a == "--memcpy") {
      o.memcpy = true;
    } else {
      usage(("unknown flag " + a).c_str());
    }
  }
  if (o.factor < 2 || o.trials < 1 || o.min_bytes < 1 || o.max_bytes < o.min_bytes) {
    usage("need -f >= 2, -t >= 1, 1 <= -b <= -e");
  }
  for (int n : o.ranks) {
    if (n < 1 || n > 4096) usage("ranks must be in [1, 4096]");
  }
  for (Coll c : o.colls) {  // before any run: the registry says what each collective has
    const std::string why = algorithm_error(op_of(c), o.algo);
    if (!why.empty()) usage(why.c_str());
  }
  return o;
}

void print_table(CollectiveHarness& h, const Options& o, Coll coll, int ranks) {
  const bool bound = ranks <= static_cast<int>(std::thread::hardware_concurrency());
  std::printf("#\n# dtsim %s: %d ranks (threads%s), algo %s, float32, median of %d trials\n#\n",
              coll_name(coll), ranks, bound ? ", bound to cores" : "", to_string(o.algo), o.trials);
  std::printf("# %10s %12s %8s %6s %11s %12s %12s %7s%s\n", "size", "count", "type", "redop",
              "time(us)", "algbw(GB/s)", "busbw(GB/s)", "#wrong", o.memcpy ? " memcpy(GB/s)" : "");
  int64_t total_wrong = 0;
  double busbw_sum = 0;
  int rows = 0;
  std::vector<size_t> sizes;
  for (size_t b = o.min_bytes; b <= o.max_bytes; b *= o.factor) sizes.push_back(b);
  if (sizes.back() != o.max_bytes) sizes.push_back(o.max_bytes);  // -e is always a row
  for (size_t b : sizes) {
    CollCase c{coll, o.algo, ranks, b};
    const int64_t iters = h.calibrate(c, o.trial_ms / 1e3);
    const CollResult r = h.run(c, iters, o.trials, true);
    const double s = median(r.seconds_per_call);
    const double bytes = static_cast<double>(c.size_bytes());
    const double algbw = bytes / s / 1e9;
    const double busbw = algbw * bus_factor(coll, ranks);
    std::printf("  %10zu %12zu %8s %6s %11.2f %12.3f %12.3f %7lld", c.size_bytes(), c.count(),
                "float", redop_of(coll), s * 1e6, algbw, busbw, static_cast<long long>(r.wrong));
    if (o.memcpy) std::printf(" %12.3f", bytes / memcpy_seconds(c.size_bytes(), 5) / 1e9);
    std::printf("\n");
    std::fflush(stdout);
    total_wrong += r.wrong;
    busbw_sum += busbw;
    ++rows;
  }
  std::printf("# Out of bounds values : %lld %s\n", static_cast<long long>(total_wrong),
              total_wrong ? "FAILED" : "OK");
  std::printf("# Avg bus bandwidth    : %.3f\n", rows ? busbw_sum / rows : 0.0);
}

}  // namespace
}  // namespace dtsim::bench

int main(int argc, char** argv) {
  using namespace dtsim::bench;
  const Options o = parse(argc, argv);
  CollectiveHarness h;
  dtsim::WorldOptions wo;
  wo.spin = o.spin;
  h.set_world_options(wo);
  int failed = 0;
  for (int n : o.ranks) {
    for (Coll c : o.colls) {
      try {
        print_table(h, o, c, n);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "nccl_table: %s with %d ranks failed: %s\n", coll_name(c), n,
                     e.what());
        failed = 1;
      }
    }
  }
  return failed;
}
