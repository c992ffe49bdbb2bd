// Liveness across processes (issue 37, defect 6; docs/reliability.md): a process that is
// slow but progressing, before or inside a run, is waited for; one that makes no progress
// is named as lost. Run under mpiexec at 2 processes (ctest: mpi_liveness_test.*).
//
//   mpiexec --allow-run-as-root --oversubscribe -np 2 build/tests/mpi/mpi_liveness_test
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "runtime/communicator.h"
#include "runtime/world.h"

namespace dtsim::testing {
namespace {

ProcessModel job_model() {
  const char* v = std::getenv("DTSIM_THREADS_PER_PROCESS");
  return ProcessModel::from_environment(1, v ? std::atoi(v) : 1);
}

class MpiLivenessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!ProcessModel::launched_by_mpi()) GTEST_SKIP() << "run under mpiexec";
  }
};

// A process that is slow but progressing (oversubscribed) is not taken for a lost one
// (issue 37, defect 6): process 0 finishes the run at once, the last process keeps calling
// collectives among its own ranks for longer than the deadline plus the grace (1 + 3 s).
TEST_F(MpiLivenessTest, ASlowProgressingProcessIsNotLost) {
  WorldOptions o;
  o.timeout = std::chrono::milliseconds(1000);
  World w(job_model(), o);
  if (w.model().processes < 2) GTEST_SKIP() << "needs 2 processes";
  const int last_process = w.model().processes - 1;
  EXPECT_NO_THROW(w.run([&](Communicator& c) {
    const int process = w.model().process_of(c.rank());
    auto mine = c.split(process, c.rank());
    if (process != last_process) return;
    // A fixed count (not a per-rank clock), so both ranks make the same calls: ~5 s.
    for (int i = 0; i < 250; ++i) {
      mine->barrier();
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }));
}

// Busy (it uses CPU, so it beats) for `d`, as a process building its World or its data.
void work_for(std::chrono::milliseconds d) {
  const auto until = std::chrono::steady_clock::now() + d;
  volatile uint64_t x = 0;
  while (std::chrono::steady_clock::now() < until) {
    for (int i = 0; i < 1000; ++i) x = x + i;
  }
}

// A process that is still getting ready (issue 37, defect 6: 256 rank threads to start)
// for three deadlines after the others began the run is not lost, and no rank of the
// others times out waiting for it: the run begins on every process together.
TEST_F(MpiLivenessTest, AProcessSlowToReachTheRunIsWaitedFor) {
  WorldOptions o;
  o.timeout = std::chrono::milliseconds(2000);
  World w(job_model(), o);
  if (w.model().processes < 2) GTEST_SKIP() << "needs 2 processes";
  if (w.model().process == w.model().processes - 1) work_for(3 * o.timeout);
  EXPECT_NO_THROW(w.run([&](Communicator& c) {
    std::vector<float> x(16, 1.0f);
    c.all_reduce(std::span<float>(x), ReduceOp::kSum, Algo::kRing);
    EXPECT_EQ(x[0], static_cast<float>(c.size()));
  }));
}

// Its counterpart: a process that makes no progress before the run (blocked, here asleep;
// stopped or stuck alike) is named as lost one deadline after its latest beat. Disabled in
// the suite (the job is left in a failed state); its own ctest entry runs it at np 2.
TEST_F(MpiLivenessTest, DISABLED_AProcessBlockedBeforeTheRunIsLost) {
  WorldOptions o;
  o.timeout = std::chrono::milliseconds(2000);
  World w(job_model(), o);
  if (w.model().processes < 2) GTEST_SKIP() << "needs 2 processes";
  const int last = w.model().processes - 1;
  const auto start = std::chrono::steady_clock::now();
  if (w.model().process == last) std::this_thread::sleep_for(3 * o.timeout);
  try {
    w.run([&](Communicator&) {});
    ADD_FAILURE() << "no RankFailure";
  } catch (const RankFailure& f) {
    if (w.model().process != last) {
      EXPECT_NE(std::string(f.what()).find("lost process " + std::to_string(last)),
                std::string::npos)
          << f.what();
      EXPECT_NE(std::string(f.what()).find("did not begin the run"), std::string::npos) << f.what();
      EXPECT_LT(std::chrono::steady_clock::now() - start, 2 * o.timeout);
    }
  }
}

}  // namespace
}  // namespace dtsim::testing
