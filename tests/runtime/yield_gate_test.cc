// YieldGate (runtime/transport/yield_gate.h): when a waiting rank may yield. Only
// its logic, on made-up times: whether the gate helps on a loaded machine is measured in
// bench/results_notes.md, never asserted here.
#include "runtime/transport/yield_gate.h"

#include <gtest/gtest.h>

#include <cstdint>

#include "runtime/transport/transport_wait.h"

namespace dtsim::testing {
namespace {

constexpr int64_t kT0 = 1'000'000'000;  // an arbitrary start on the steady clock (ns)
constexpr int64_t kMs = 1'000'000;

TEST(YieldGate, FastYieldsKeepItOpen) {
  YieldGate g;
  EXPECT_TRUE(g.open(kT0));
  for (int64_t i = 0; i < 1000; ++i) {
    EXPECT_TRUE(g.note(kT0 + i * 1000, kT0 + i * 1000 + YieldGate::kSlowYieldNs - 1));
  }
  EXPECT_TRUE(g.open(kT0 + 1000 * 1000));
}

TEST(YieldGate, OneSlowYieldEndsThatWaitsYieldsButLeavesItOpen) {
  YieldGate g;
  EXPECT_FALSE(g.note(kT0, kT0 + YieldGate::kSlowYieldNs));
  EXPECT_TRUE(g.open(kT0 + YieldGate::kSlowYieldNs));
}

TEST(YieldGate, SlowYieldsPastTheBurstCloseItUntilPaidOff) {
  YieldGate g;
  int64_t t = kT0;
  const int64_t slice = 3 * kMs;
  for (int i = 0; i < 1000 && g.open(t); ++i) {
    EXPECT_FALSE(g.note(t, t + slice));
    t += slice;
  }
  ASSERT_FALSE(g.open(t));
  // Back to back, the slow yields themselves pay off 1/kShare of their debt.
  EXPECT_GE(t - kT0, YieldGate::kBurstNs) << "open for a burst";
  EXPECT_LE(t - kT0, YieldGate::kBurstNs * YieldGate::kShare / (YieldGate::kShare - 1) + slice)
      << "closed soon after";
  // Paid off kShare times the yields' time after the first one ended: open again once
  // what is left is within the burst, and not before.
  const int64_t paid_off = kT0 + slice + (t - kT0) * YieldGate::kShare;
  const int64_t reopens = paid_off - YieldGate::kBurstNs * YieldGate::kShare;
  EXPECT_FALSE(g.open(reopens - 1));
  EXPECT_TRUE(g.open(reopens));
}

TEST(YieldGate, UnderSustainedLoadSlowYieldsTakeAboutTheirShareOfTheTime) {
  // One rank that yields whenever the gate is open, every yield a 3 ms slice given away,
  // and otherwise sleeps 1 ms, for 10 simulated seconds.
  YieldGate g;
  const int64_t end = kT0 + 10'000 * kMs;
  int64_t yielded = 0;
  for (int64_t t = kT0; t < end;) {
    if (g.open(t)) {
      g.note(t, t + 3 * kMs);
      yielded += 3 * kMs;
      t += 3 * kMs;
    } else {
      t += kMs;
    }
  }
  EXPECT_LE(yielded, (end - kT0) / YieldGate::kShare + YieldGate::kBurstNs + 3 * kMs);
  EXPECT_GE(yielded, (end - kT0) / (YieldGate::kShare + 1) - 3 * kMs) << "it reopens";
}

TEST(YieldGate, RanksChargeTheSharedBudgetTogether) {
  YieldGate g;
  // Two ranks' slow yields overlap in time; both are charged.
  const int64_t d = YieldGate::kBurstNs * 3 / 4;
  g.note(kT0, kT0 + d);
  EXPECT_TRUE(g.open(kT0 + d));
  g.note(kT0 + 1, kT0 + d + 1);
  EXPECT_FALSE(g.open(kT0 + d + 1));
}

TEST(YieldGate, FastYieldsPayOffTheDebtSooner) {
  YieldGate g;
  const int64_t d = 2 * YieldGate::kBurstNs;  // closes it
  g.note(kT0, kT0 + d);
  const int64_t t = kT0 + d;
  ASSERT_FALSE(g.open(t));
  // The debt beyond the burst, paid off in fast yields (at the same instant).
  const int64_t excess = (d - YieldGate::kBurstNs) * YieldGate::kShare;
  const int64_t yields = excess / (YieldGate::kCreditNs * YieldGate::kShare);
  for (int64_t i = 0; i + 1 < yields; ++i) EXPECT_TRUE(g.note(t - 1000, t));
  EXPECT_FALSE(g.open(t));
  EXPECT_TRUE(g.note(t - 1000, t));
  EXPECT_TRUE(g.open(t));
}

TEST(YieldGate, FastYieldsBankNoCreditWithoutDebt) {
  YieldGate g;
  for (int i = 0; i < 100'000; ++i) g.note(kT0 - 1000, kT0);
  const int64_t d = YieldGate::kBurstNs + YieldGate::kSlowYieldNs;  // one burst and a bit
  g.note(kT0, kT0 + d);
  EXPECT_FALSE(g.open(kT0 + d));
}

TEST(YieldPoll, ClosedGateSkipsTheYieldsButStillLooksOnce) {
  YieldGate g;
  const int64_t now = FastClock::now_ns();
  g.note(now, now + 3600 * 1000 * kMs);  // an hour-long yield: closed for now
  int looks = 0;
  EXPECT_FALSE(yield_poll([&] { return ++looks, false; }, g));
  EXPECT_EQ(looks, 1);
  EXPECT_TRUE(yield_poll([] { return true; }, g));
}

}  // namespace
}  // namespace dtsim::testing
