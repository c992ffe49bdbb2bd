// A RankFailure carries every rank's last collectives, so the error report shows what each
// rank was doing when the run failed.
#include <gtest/gtest.h>

#include <chrono>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "runtime/communicator.h"
#include "runtime/world.h"

namespace dtsim {
namespace {

TEST(FlightRecorder, RankFailureReportsEveryRanksLastCalls) {
  WorldOptions o;
  o.timeout = std::chrono::milliseconds(2000);
  World w(3, o);
  try {
    w.run([](Communicator& c) {
      std::vector<float> x(16, 1.0f);
      c.all_reduce(std::span<float>(x));
      c.barrier();
      // Leaving the barrier on rank 1 does not mean 0 and 2 have left it too, so rank 1
      // throws only once both have said (by a buffered send) that they are past it. Nothing
      // between their send and broadcast() checks for the abort, so both are in broadcast.
      if (c.rank() == 1) {
        float ready = 0.0f;
        c.recv(std::span<float>(&ready, 1), 0);
        c.recv(std::span<float>(&ready, 1), 2);
        throw std::runtime_error("rank one gives up");
      }
      c.send(std::span<const float>(x.data(), 1), 1);
      c.broadcast(std::span<float>(x), 0);
    });
    FAIL() << "the run should have failed";
  } catch (const RankFailure& e) {
    EXPECT_EQ(e.rank(), 1);
    EXPECT_NE(std::string(e.what()).find("rank one gives up"), std::string::npos) << e.what();
    const std::string& report = e.flight_report();
    for (int r = 0; r < 3; ++r) {
      EXPECT_NE(report.find("rank " + std::to_string(r) + ":"), std::string::npos) << report;
    }
    EXPECT_NE(report.find("all_reduce(numel=16"), std::string::npos) << report;
    EXPECT_NE(report.find("barrier"), std::string::npos) << report;
    EXPECT_NE(report.find("broadcast"), std::string::npos) << report;  // 0 and 2 were in it
  }
}

}  // namespace
}  // namespace dtsim
