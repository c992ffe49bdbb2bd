// Checkpoints of the GPT on its parallel meshes: a tensor-parallel rank holds each block's
// qkv.w and qkv.b as three TensorShards (its q, k and v rows), so saving and resharding go
// by name and shard as for the MLP. A save on one mesh resumed on another loads exactly the
// saved parameters and continues as single-rank training does, within fp32 tolerance.
// Context parallelism (cp ranks hold every parameter, as dp ranks do): a resume on the same
// mesh is bitwise the straight run, and one on another mesh passes the lockstep check.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <ostream>
#include <string>
#include <vector>

#include "tests/train/train_test_util.h"
#include "train/checkpoint/checkpointer.h"
#include "train/checkpoint/tools.h"
#include "train/strategies.h"

namespace dtsim::train {
namespace {

namespace fs = std::filesystem;
constexpr int kK = 2;  // steps before the save, and after the resume

struct GptMesh {
  int dp = 1, tp = 1, pp = 1, zero = 0;
  bool sp = false;
  int cp = 1;
};
std::ostream& operator<<(std::ostream& os, const GptMesh& m) {
  os << "dp" << m.dp << "_tp" << m.tp << "_pp" << m.pp << "_zero" << m.zero;
  if (m.cp > 1) os << "_cp" << m.cp;
  return os << (m.sp ? "_sp" : "");
}
struct Reshard {
  GptMesh from, to;
};
std::ostream& operator<<(std::ostream& os, const Reshard& r) {
  return os << r.from << "_to_" << r.to;
}

// A small GPT (S 8, V 7, 4 heads, F 32), SGD (Adam turns round-off into steps of lr).
TrainConfig gpt_on(const GptMesh& m, int steps) {
  TrainConfig c = small_gpt(8, {.dp = m.dp, .tp = m.tp, .pp = m.pp, .cp = m.cp}, steps);
  c.micro_batches = m.pp > 1 ? 2 : 1;
  c.zero = m.zero;
  c.sequence_parallel = m.sp;
  return c;
}

std::string fresh_dir() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string name = std::string(info->test_suite_name()) + "_" + info->name();
  for (char& ch : name) ch = std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
  const std::string path =
      (fs::temp_directory_path() / ("dtsim_gpt_ckpt_" + std::to_string(::getpid()) + "_" + name))
          .string();
  fs::remove_all(path);
  return path;
}

class GptReshard : public ::testing::TestWithParam<Reshard> {};

TEST_P(GptReshard, LoadsTheSavedStateAndContinuesAsSingleRankTraining) {
  const Reshard r = GetParam();
  const std::string dir = fresh_dir();
  TrainConfig save = gpt_on(r.from, kK);
  save.checkpoint.save_dir = dir;
  checkpoint::validate_save(save);
  const RunResult saved = run_training(save);
  TrainConfig load = gpt_on(r.to, kK);  // a resume of zero steps: the loaded parameters
  load.checkpoint.resume_dir = dir;
  const RunResult loaded = run_training(load);
  ASSERT_EQ(loaded.params.size(), saved.params.size());
  EXPECT_EQ(
      std::memcmp(loaded.params.data(), saved.params.data(), saved.params.size() * sizeof(float)),
      0);
  TrainConfig resume = gpt_on(r.to, 2 * kK);
  resume.checkpoint.resume_dir = dir;
  checkpoint::validate_resume(resume);
  const RunResult resumed = run_training(resume);
  RunResult straight = run_training(gpt_on({}, 2 * kK));
  straight.losses.erase(straight.losses.begin(), straight.losses.begin() + kK);
  const Comparison c = compare(resumed, straight, kFp32Rtol, kFp32Atol);
  EXPECT_TRUE(c.passed) << c;
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Meshes, GptReshard,
                         ::testing::Values(Reshard{{.tp = 2, .sp = true}, {.dp = 2}},
                                           Reshard{{.dp = 2, .zero = 3}, {.tp = 4, .sp = true}},
                                           Reshard{{.tp = 4}, {.tp = 2, .pp = 2}},
                                           Reshard{{.tp = 2, .pp = 2},
                                                   {.dp = 2, .tp = 2, .zero = 3, .sp = true}}),
                         [](const auto& info) { return ::testing::PrintToString(info.param); });

// The cp tests' runs: Adam (its moments are saved too) and the deterministic algorithms,
// whose sums do not depend on timing.
TrainConfig gpt_cp_on(const GptMesh& m, int steps) {
  TrainConfig c = with_adam(gpt_on(m, steps));
  c.algo = Algo::kDeterministic;
  return c;
}

class GptCpResume : public ::testing::TestWithParam<GptMesh> {};

TEST_P(GptCpResume, KStepsSaveResumeKIsBitwise2KStraight) {
  const GptMesh m = GetParam();
  const std::string dir = fresh_dir();
  const RunResult straight = run_training(gpt_cp_on(m, 2 * kK));
  const RunResult first = save_run(gpt_cp_on(m, kK), dir);
  const RunResult resumed = resume_run(gpt_cp_on(m, 2 * kK), dir, kK);
  ASSERT_EQ(first.losses.size(), size_t(kK));
  ASSERT_EQ(resumed.losses.size(), size_t(kK));
  EXPECT_TRUE(same_bits(resumed.params, straight.params));
  for (int s = 0; s < kK; ++s) {
    EXPECT_EQ(first.losses[s], straight.losses[s]) << "step " << s;
    EXPECT_EQ(resumed.losses[s], straight.losses[kK + s]) << "step " << kK + s;
  }
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Meshes, GptCpResume,
                         ::testing::Values(GptMesh{.cp = 2}, GptMesh{.dp = 2, .cp = 2},
                                           GptMesh{.tp = 2, .sp = true, .cp = 2}),
                         [](const auto& info) { return ::testing::PrintToString(info.param); });

// What the checkpoint says it was saved from names the cp width (its ranks count it).
TEST(GptCpCheckpoint, SavedFromNamesTheCpWidth) {
  const checkpoint::SavedFrom from = checkpoint::saved_from(gpt_cp_on({.dp = 2, .cp = 2}, 1));
  EXPECT_NE(from.mesh.find("dp 2 x tp 1 x pp 1 x cp 2"), std::string::npos) << from.mesh;
  EXPECT_EQ(from.ranks, 4);
}

class GptCpReshard : public ::testing::TestWithParam<Reshard> {};

// The resume on the new mesh starts from exactly the saved parameters (a resume of zero
// steps returns them) and passes the lockstep check, whose references resume from the same
// checkpoint; an error planted in one resumed step fails it.
TEST_P(GptCpReshard, LoadsTheSavedStateAndPassesTheLockstepCheck) {
  const Reshard r = GetParam();
  const std::string dir = fresh_dir();
  const RunResult saved = save_run(gpt_cp_on(r.from, kK), dir);
  const RunResult loaded = resume_run(gpt_cp_on(r.to, kK), dir, kK);
  EXPECT_TRUE(same_bits(loaded.params, saved.params));
  TrainConfig to = gpt_cp_on(r.to, 2 * kK);
  to.record_history = true;  // for the lockstep check (what dtsim train --check sets)
  const RunResult resumed = resume_run(to, dir, kK);
  ASSERT_EQ(resumed.losses.size(), size_t(kK));
  to.checkpoint.resume_dir = dir;
  const CheckResult ck = check(to, resumed);
  EXPECT_TRUE(ck.passed && ck.lockstep) << ck;
  RunResult planted = resumed;  // an error of 1e-3 in one parameter at one resumed step
  ASSERT_GE(planted.param_history.size(), 2u);
  planted.param_history[1][planted.param_history[1].size() / 2] += 1e-3f;
  EXPECT_FALSE(check(to, planted).passed) << "a planted 1e-3 error passed the check";
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Meshes, GptCpReshard,
                         ::testing::Values(Reshard{{.dp = 2, .cp = 2}, {}},
                                           Reshard{{.dp = 2, .cp = 2}, {.tp = 2}},
                                           Reshard{{.tp = 2, .sp = true, .cp = 2}, {.cp = 4}},
                                           Reshard{{.dp = 2}, {.tp = 2, .sp = true, .cp = 2}}),
                         [](const auto& info) { return ::testing::PrintToString(info.param); });

}  // namespace
}  // namespace dtsim::train
