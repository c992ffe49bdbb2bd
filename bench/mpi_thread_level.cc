// mpi_thread_level: OpenMPI's 8-byte message rate between two processes when one thread per
// process makes every MPI call (what MPI_THREAD_FUNNELED allows, and what dtsim's progress
// thread does) against T threads per process calling MPI at once (MPI_THREAD_MULTIPLE, what
// rank threads calling MPI directly would need). For bench/mpi_thread_level.sh; built there
// with mpicxx (not by CMake).
//
//   mpirun -np 2 mpi_thread_level --level funneled|multiple --callers one|each --streams T
//
// T streams of messages run from process 0 to process 1. A stream sends windows of W
// messages (tag = stream) and waits for one acknowledgement per window, as nonblocking
// sends progressing under a receiver would. With --callers one a single thread drives all T
// streams; with --callers each (needs --level multiple) thread s drives stream s. Prints one
// line: level, callers, streams, median messages per second over the trials (each trial
// about 0.3 s: its window count is calibrated on process 0 and broadcast; process 1 cuts a
// trial off at 3 s, for a rate that collapses).
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace {

constexpr int kWindow = 64;
constexpr int kAckTag = 1 << 20;
constexpr double kTrialSeconds = 0.3;
constexpr double kTrialCutoffSeconds = 3.0;  // 10x the aim: a collapsed rate still ends

struct Options {
  std::string level = "funneled";
  std::string callers = "one";
  int streams = 1;
  int windows = 0;  // 0: calibrated so that a trial takes about kTrialSeconds
  int trials = 5;
};

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr,
               "mpi_thread_level: %s\nusage: mpi_thread_level --level funneled|multiple "
               "--callers one|each --streams T [--windows N] [--trials K]\n",
               why);
  std::exit(2);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--level")
      o.level = v;
    else if (k == "--callers")
      o.callers = v;
    else if (k == "--streams")
      o.streams = std::atoi(v.c_str());
    else if (k == "--windows")
      o.windows = std::atoi(v.c_str());
    else if (k == "--trials")
      o.trials = std::atoi(v.c_str());
    else
      usage(("unknown flag " + k).c_str());
  }
  if (o.level != "funneled" && o.level != "multiple") usage("--level is funneled or multiple");
  if (o.callers != "one" && o.callers != "each") usage("--callers is one or each");
  if (o.callers == "each" && o.level != "multiple") usage("--callers each needs --level multiple");
  if (o.streams < 1 || o.windows < 0 || o.trials < 1) usage("counts must be at least 1");
  return o;
}

using Clock = std::chrono::steady_clock;

// One window of the given streams, from `rank`'s side: process 0 sends kWindow messages per
// stream and waits for each stream's acknowledgement; process 1 receives them and acks. The
// acknowledgement says whether to go on: process 1 ends the trial at `cutoff`, so a trial
// whose message rate collapses still ends, after the same number of windows on both sides.
// Returns false when the trial is over.
bool window(int rank, int first_stream, int streams, Clock::time_point cutoff,
            std::vector<MPI_Request>& reqs, std::vector<double>& payload) {
  reqs.clear();
  for (int s = first_stream; s < first_stream + streams; ++s) {
    double* msg = &payload[static_cast<size_t>(s) * kWindow];
    for (int m = 0; m < kWindow; ++m) {
      reqs.emplace_back();
      if (rank == 0) {
        MPI_Isend(msg + m, 1, MPI_DOUBLE, 1, s, MPI_COMM_WORLD, &reqs.back());
      } else {
        MPI_Irecv(msg + m, 1, MPI_DOUBLE, 0, s, MPI_COMM_WORLD, &reqs.back());
      }
    }
  }
  MPI_Waitall(static_cast<int>(reqs.size()), reqs.data(), MPI_STATUSES_IGNORE);
  double go_on = rank == 1 && Clock::now() < cutoff ? 1 : 0;
  for (int s = first_stream; s < first_stream + streams; ++s) {
    if (rank == 0) {
      MPI_Recv(&go_on, 1, MPI_DOUBLE, 1, kAckTag + s, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    } else {
      MPI_Send(&go_on, 1, MPI_DOUBLE, 0, kAckTag + s, MPI_COMM_WORLD);
    }
  }
  return go_on != 0;
}

// Drives `streams` streams from `first_stream` for up to `windows` windows; returns how
// many windows it ran.
long drive(int rank, int first_stream, int streams, int windows, Clock::time_point cutoff) {
  std::vector<MPI_Request> reqs;
  reqs.reserve(static_cast<size_t>(streams) * kWindow);
  std::vector<double> payload(static_cast<size_t>(first_stream + streams) * kWindow, 1.0);
  long done = 0;
  while (done < windows) {
    ++done;
    if (!window(rank, first_stream, streams, cutoff, reqs, payload)) break;
  }
  return done;
}

// One trial between two barriers: its seconds and the messages process 0 sent.
std::pair<double, double> trial(const Options& o, int rank) {
  MPI_Barrier(MPI_COMM_WORLD);
  const auto start = Clock::now();
  const auto cutoff = start + std::chrono::duration_cast<Clock::duration>(
                                  std::chrono::duration<double>(kTrialCutoffSeconds));
  long windows = 0;  // stream-windows
  if (o.callers == "one") {
    windows = drive(rank, 0, o.streams, o.windows, cutoff) * o.streams;
  } else {
    std::vector<long> done(o.streams);
    std::vector<std::thread> threads;
    for (int s = 0; s < o.streams; ++s) {
      threads.emplace_back([&, s] { done[s] = drive(rank, s, 1, o.windows, cutoff); });
    }
    for (auto& t : threads) t.join();
    for (long d : done) windows += d;
  }
  MPI_Barrier(MPI_COMM_WORLD);
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return {seconds, static_cast<double>(windows) * kWindow};
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  const int wanted = o.level == "multiple" ? MPI_THREAD_MULTIPLE : MPI_THREAD_FUNNELED;
  int provided = 0;
  MPI_Init_thread(&argc, &argv, wanted, &provided);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size != 2 || provided < wanted) {
    if (rank == 0) {
      std::fprintf(stderr, "mpi_thread_level: needs -np 2 and the thread level %s (got %d)\n",
                   o.level.c_str(), provided);
    }
    MPI_Finalize();
    return 2;
  }
  Options run = o;
  run.windows = o.windows > 0 ? o.windows : 16;
  double seconds = trial(run, rank).first;  // warm-up (connections, eager buffers)
  if (o.windows == 0) {                     // calibrate
    seconds = trial(run, rank).first;
    long windows = static_cast<long>(run.windows * kTrialSeconds / std::max(seconds, 1e-6));
    windows = std::clamp(windows, 16L, 1L << 20);
    MPI_Bcast(&windows, 1, MPI_LONG, 0, MPI_COMM_WORLD);  // both sides run the same count
    run.windows = static_cast<int>(windows);
  }
  std::vector<double> rates;
  for (int t = 0; t < o.trials; ++t) {
    const auto [seconds, messages] = trial(run, rank);
    rates.push_back(messages / seconds);
  }
  std::sort(rates.begin(), rates.end());
  if (rank == 0) {
    std::printf("%s %s %d %.0f\n", o.level.c_str(), o.callers.c_str(), o.streams,
                rates[rates.size() / 2]);
  }
  MPI_Finalize();
  return 0;
}
