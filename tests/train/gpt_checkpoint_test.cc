// Checkpoints of the GPT on its parallel meshes: a tensor-parallel rank holds each block's
// qkv.w and qkv.b as three TensorShards (its q, k and v rows), so saving and resharding go
// by name and shard as for the MLP. A save on one mesh resumed on another loads exactly the
// saved parameters and continues as single-rank training does, within fp32 tolerance.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <ostream>
#include <string>

#include "tests/train/train_test_util.h"
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

}  // namespace
}  // namespace dtsim::train
