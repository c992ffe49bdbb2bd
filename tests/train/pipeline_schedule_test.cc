// Pipeline schedules, checked before they run: every send has its receive in order, the
// unit-slot dry run finishes, the bubble is the paper's formula as an exact fraction of slots,
// and peak in-flight activations are the schedule's bound; broken schedules are rejected
// with a message that names what is wrong.
#include <gtest/gtest.h>

#include <algorithm>
#include <ostream>
#include <string>
#include <vector>

#include "pipeline_test_util.h"
#include "train/pipeline_parallel/schedule.h"
#include "train/pipeline_parallel/schedule_check.h"

namespace dtsim::train::pipeline {

namespace {

std::vector<ScheduleSpec> all_specs() {
  std::vector<ScheduleSpec> specs;
  for (int p : {1, 2, 3, 4, 8, 16}) {
    for (int m : {1, 3, 4, 8, 16}) {  // below, at and above p
      for (ScheduleKind k :
           {ScheduleKind::kGpipe, ScheduleKind::kOneFOneB, ScheduleKind::kZeroBubbleH1}) {
        specs.push_back({k, p, m, 1});
      }
    }
    if (p == 1) continue;
    for (int v : {1, 2, 4}) {
      for (int groups : {1, 2}) specs.push_back({ScheduleKind::kInterleaved, p, groups * p, v});
    }
  }
  specs.push_back({ScheduleKind::kInterleaved, 4, 16, 4});  // several groups per chunk
  specs.push_back({ScheduleKind::kInterleaved, 16, 64, 2});
  specs.push_back({ScheduleKind::kOneFOneB, 16, 64, 1});
  return specs;
}

class EverySchedule : public ::testing::TestWithParam<ScheduleSpec> {};

TEST_P(EverySchedule, SendsMatchAndTheDryRunFinishes) {
  const Schedule s = make_schedule(GetParam());
  EXPECT_EQ(check_structure(s), "");
  const DryRun d = dry_run(s);
  ASSERT_EQ(d.error, "");
  const int p = s.spec.stages, chunks = p * s.spec.virtual_stages;
  const int passes = s.spec.kind == ScheduleKind::kZeroBubbleH1 ? 3 : 2;
  EXPECT_EQ(d.busy_slots, int64_t{passes} * s.spec.micro_batches * chunks);
  EXPECT_EQ(d.busy_slots + d.idle_slots, int64_t{p} * d.total_slots);
}

TEST_P(EverySchedule, BubbleIsThePapersFormula) {
  const ScheduleSpec spec = GetParam();
  const DryRun d = dry_run(make_schedule(spec));
  ASSERT_EQ(d.error, "");
  const Fraction f = bubble_formula(spec);
  if (spec.kind == ScheduleKind::kZeroBubbleH1 && spec.micro_batches < spec.stages) {
    // The paper's formula assumes m >= p; below it, the bound on in-flight micro-batches
    // leaves more idle slots. Still never worse than 1F1B.
    const DryRun one_f_one_b =
        dry_run(make_schedule({ScheduleKind::kOneFOneB, spec.stages, spec.micro_batches, 1}));
    EXPECT_GE(d.bubble.value(), f.value()) << to_string(d.bubble) << " vs " << to_string(f);
    EXPECT_LE(d.bubble.value(), one_f_one_b.bubble.value());
    return;
  }
  EXPECT_EQ(d.bubble, f) << "measured " << to_string(d.bubble) << ", formula " << to_string(f);
  const int v = spec.virtual_stages, m = spec.micro_batches, p = spec.stages;
  if (spec.kind == ScheduleKind::kZeroBubbleH1) {
    EXPECT_EQ(d.total_slots, 3 * m + p - 1);
  } else {
    EXPECT_EQ(d.total_slots, 2 * (v * m + p - 1));
  }
}

TEST_P(EverySchedule, PeakInFlightIsTheSchedulesBound) {
  const ScheduleSpec spec = GetParam();
  const DryRun d = dry_run(make_schedule(spec));
  ASSERT_EQ(d.error, "");
  for (int r = 0; r < spec.stages; ++r) {
    if (spec.kind == ScheduleKind::kZeroBubbleH1) {
      EXPECT_LE(d.peak_in_flight[r], std::min(spec.stages - r, spec.micro_batches)) << "rank " << r;
      // Kept until W: bounded by 2p - 1 - r whatever m, and reached once m allows.
      const int held = peak_held_per_chunk(make_schedule(spec), r)[0];
      EXPECT_LE(held, held_bound(spec, r)) << "rank " << r;
      if (spec.micro_batches >= 2 * spec.stages) {
        EXPECT_EQ(held, held_bound(spec, r)) << "rank " << r;
      }
    } else {
      EXPECT_EQ(d.peak_in_flight[r], in_flight_bound(spec, r)) << "rank " << r;
    }
  }
  if (spec.kind == ScheduleKind::kGpipe) {
    EXPECT_EQ(d.peak_in_flight[0], spec.micro_batches);
  }
  if (spec.kind == ScheduleKind::kOneFOneB) {
    EXPECT_EQ(d.peak_in_flight[0], std::min(spec.stages, spec.micro_batches));
  }
}

TEST_P(EverySchedule, BackwardsRunInMicroBatchOrderPerChunk) {
  // Weight gradients accumulate in single-rank order, which bitwise checks rely on.
  const Schedule s = make_schedule(GetParam());
  for (const std::vector<Action>& rank : s.ranks) {
    std::vector<int> last(s.spec.stages * s.spec.virtual_stages, -1);
    for (const Action& a : rank) {
      if (a.op != Op::kBackward && a.op != Op::kBackwardWeight) continue;
      EXPECT_EQ(a.micro_batch, last[a.chunk] + 1) << label(a, s.spec.stages, 2);
      last[a.chunk] = a.micro_batch;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Pipeline, EverySchedule, ::testing::ValuesIn(all_specs()),
                         [](const auto& info) { return test_name(info.param); });

TEST(ScheduleExamples, OneFOneBOnFourStagesIsTheFigure) {
  // Narayanan et al. 2021, figure 4 (top), 4 stages, 8 micro-batches: stage 0 runs four
  // forwards, waits for the first gradient, then alternates; the bubble is 3/11.
  const Schedule s = make_schedule({ScheduleKind::kOneFOneB, 4, 8, 1});
  const DryRun d = dry_run(s);
  ASSERT_EQ(d.error, "");
  std::string stage0, stage3;
  for (int t = 0; t < d.total_slots; ++t) {
    const int a0 = d.timeline[0][t], a3 = d.timeline[3][t];
    stage0 += (a0 < 0 ? "." : label(s.ranks[0][a0], 4, 1)) + " ";
    stage3 += (a3 < 0 ? "." : label(s.ranks[3][a3], 4, 1)) + " ";
  }
  EXPECT_EQ(stage0, "F0 F1 F2 F3 . . . B0 F4 B1 F5 B2 F6 B3 F7 B4 . B5 . B6 . B7 ");
  EXPECT_EQ(stage3, ". . . F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7 . . . ");
  EXPECT_EQ(to_string(d.bubble), "3/11");
  EXPECT_EQ(d.peak_in_flight, (std::vector<int>{4, 3, 2, 1}));
}

TEST(ScheduleExamples, GpipeHoldsEveryMicroBatch) {
  const DryRun d = dry_run(make_schedule({ScheduleKind::kGpipe, 4, 8, 1}));
  ASSERT_EQ(d.error, "");
  EXPECT_EQ(to_string(d.bubble), "3/11");
  EXPECT_EQ(d.peak_in_flight, (std::vector<int>{8, 8, 8, 8}));
}

TEST(ScheduleExamples, InterleavedShrinksTheBubbleByV) {
  const DryRun d = dry_run(make_schedule({ScheduleKind::kInterleaved, 4, 8, 2}));
  ASSERT_EQ(d.error, "");
  EXPECT_EQ(to_string(d.bubble), "3/19");
  // Megatron's warm-up (p - r - 1) 2 + (v - 1) p, plus the steady state's forward.
  EXPECT_EQ(d.peak_in_flight, (std::vector<int>{11, 9, 7, 5}));
}

// Broken schedules: each edit of a good 1F1B schedule must be caught, with its reason.
Schedule good() { return make_schedule({ScheduleKind::kOneFOneB, 3, 4, 1}); }

std::vector<Action>::iterator find(Schedule& s, int rank, Op op, int micro_batch) {
  auto& v = s.ranks[rank];
  return std::find_if(v.begin(), v.end(),
                      [&](const Action& a) { return a.op == op && a.micro_batch == micro_batch; });
}

TEST(BrokenSchedule, TheGoodOneIsAccepted) { EXPECT_EQ(dry_run(good()).error, ""); }

TEST(BrokenSchedule, DroppedRecvLeavesASendUnmatched) {
  Schedule s = good();
  s.ranks[2].erase(find(s, 2, Op::kRecvActivation, 1));
  EXPECT_EQ(check_structure(s),
            "unmatched send: rank 1 sends activation (micro-batch 1, chunk 1) to rank 2, which "
            "never receives it");
}

TEST(BrokenSchedule, DroppedSendLeavesARecvUnmatched) {
  Schedule s = good();
  s.ranks[0].erase(find(s, 0, Op::kSendActivation, 3));
  EXPECT_EQ(dry_run(s).error,
            "unmatched recv: rank 1 receives activation (micro-batch 3, chunk 0) from rank 0, "
            "which never sends it");
}

TEST(BrokenSchedule, UnreceivedSendIsUnmatched) {
  Schedule s = good();
  s.ranks[1].push_back({Op::kSendGradient, 0, 1, 0});
  EXPECT_EQ(check_structure(s),
            "unmatched send: rank 1 sends gradient (micro-batch 0, chunk 1) to rank 0, which "
            "never receives it");
}

TEST(BrokenSchedule, SwappedSendsAreOutOfOrder) {
  Schedule s = good();
  auto first = find(s, 0, Op::kSendActivation, 0), second = find(s, 0, Op::kSendActivation, 1);
  std::swap(first->micro_batch, second->micro_batch);
  EXPECT_EQ(check_structure(s),
            "out of order: activation message #0 from rank 0 to rank 1 is sent as (micro-batch "
            "1, chunk 0) but received as (micro-batch 0, chunk 0)");
}

TEST(BrokenSchedule, SendBeforeTheForwardThatMakesIt) {
  Schedule s = good();
  const auto send = find(s, 1, Op::kSendActivation, 0);
  std::rotate(send - 1, send, send + 1);  // the send moves before forward 0
  EXPECT_EQ(check_structure(s),
            "rank 1: sends activation (micro-batch 0, chunk 1) before its forward");
}

TEST(BrokenSchedule, BackwardBeforeItsGradientArrives) {
  Schedule s = good();
  const auto recv = find(s, 0, Op::kRecvGradient, 0);
  std::rotate(recv, recv + 1, recv + 2);  // backward 0 now runs before the receive
  EXPECT_EQ(check_structure(s),
            "rank 0: backward (micro-batch 0, chunk 0) before receiving its output gradient");
}

TEST(BrokenSchedule, CycleIsADeadlockNamingTheWaitingRanks) {
  // Rank 0 first waits for micro-batch 0's gradient, which needs its own forward: a cycle.
  Schedule s = make_schedule({ScheduleKind::kGpipe, 2, 1, 1});
  ASSERT_EQ(s.ranks[0].front().op, Op::kForward);
  const Action recv = *find(s, 0, Op::kRecvGradient, 0);
  s.ranks[0].erase(find(s, 0, Op::kRecvGradient, 0));
  s.ranks[0].insert(s.ranks[0].begin(), recv);
  ASSERT_EQ(check_structure(s), "");
  EXPECT_EQ(dry_run(s).error,
            "deadlock: rank 0 waits to recv gradient (micro-batch 0, chunk 1) from rank 1; rank 1 "
            "waits to recv activation (micro-batch 0, chunk 0) from rank 0");
}

TEST(BrokenSchedule, ComputeOnTheWrongRank) {
  Schedule s = good();
  find(s, 1, Op::kForward, 2)->chunk = 2;
  EXPECT_NE(check_structure(s).find("rank 1: forward (micro-batch 2, chunk 2) belongs to rank 2"),
            std::string::npos);
}

struct BadSpec {
  const char* name;
  ScheduleSpec spec;
  const char* message;
};

class InvalidSpec : public ::testing::TestWithParam<BadSpec> {};

TEST_P(InvalidSpec, NamesTheFlag) {
  EXPECT_EQ(validate(GetParam().spec), GetParam().message);
  EXPECT_THROW(make_schedule(GetParam().spec), std::invalid_argument);
}

INSTANTIATE_TEST_SUITE_P(
    Pipeline, InvalidSpec,
    ::testing::Values(
        BadSpec{"no_stages", {ScheduleKind::kGpipe, 0, 4, 1}, "--pp must be at least 1 (got 0)"},
        BadSpec{"no_micro_batches",
                {ScheduleKind::kOneFOneB, 2, 0, 1},
                "--micro-batches must be at least 1 (got 0)"},
        BadSpec{"virtual_stages_without_interleaved",
                {ScheduleKind::kOneFOneB, 4, 8, 2},
                "--virtual-stages 2 needs --schedule interleaved (--schedule 1f1b runs one "
                "chunk per rank)"},
        BadSpec{"interleaved_m_not_multiple_of_p",
                {ScheduleKind::kInterleaved, 4, 6, 2},
                "--micro-batches 6 must be a multiple of --pp 4 for --schedule interleaved "
                "(Megatron runs micro-batches in groups of p)"},
        BadSpec{"interleaved_one_stage",
                {ScheduleKind::kInterleaved, 1, 4, 2},
                "--schedule interleaved needs --pp 2 or more (got --pp 1)"}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(ScheduleRegistry, NamesRoundTrip) {
  for (const std::string& name : schedule_names()) {
    ScheduleKind k;
    ASSERT_TRUE(parse_schedule(name, &k)) << name;
    EXPECT_EQ(to_string(k), name);
  }
  ScheduleKind k;
  EXPECT_FALSE(parse_schedule("pipedream", &k));
}

}  // namespace
}  // namespace dtsim::train::pipeline
