// Checkpoints (train/checkpoint/): K steps, save, resume for K steps is bitwise 2K straight on
// the same mesh (--algo deterministic); a resume on another mesh loads exactly the saved
// parameters and continues as the new mesh does (within the stated tolerance); a checkpoint of
// another model shape is refused naming the tensor and both shapes.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <string>

#include "runtime/types.h"
#include "tests/train/train_test_util.h"
#include "train/check.h"
#include "train/checkpoint/format.h"
#include "train/checkpoint/store.h"
#include "train/checkpoint/tools.h"
#include "train/strategies.h"

namespace dtsim::train {
namespace {

namespace fs = std::filesystem;

constexpr int kK = 3;  // steps before the save, and after the resume

struct MeshSpec {
  int dp = 1, tp = 1, pp = 1, ep = 1, zero = 0;
  bool moe = false;
  model::Precision precision = model::Precision::kFp32;
};

std::string mesh_name(const MeshSpec& m) {
  std::string s = m.moe ? "moe" : "mlp";
  for (auto [axis, v] : {std::pair{"_dp", m.dp}, {"_tp", m.tp}, {"_pp", m.pp}, {"_ep", m.ep}}) {
    if (v > 1) s += axis + std::to_string(v);
  }
  if (m.zero > 0) s += "_zero" + std::to_string(m.zero);
  if (m.precision == model::Precision::kMixedBf16) s += "_bf16";
  return s;
}

void PrintTo(const MeshSpec& m, std::ostream* os) { *os << mesh_name(m); }

TrainConfig mesh_config(const MeshSpec& m, int steps) {
  TrainConfig c = with_adam(make_config({.strategy = Strategy::kMesh,
                                         .model = m.moe ? ModelKind::kMoe : ModelKind::kMlp,
                                         .ranks = m.dp * m.tp * m.pp,
                                         .steps = steps,
                                         .micro_batches = m.pp > 1 ? 2 : 1,
                                         .precision = m.precision,
                                         .algo = Algo::kDeterministic}));
  c.widths.dp = m.dp;
  c.widths.tp = m.tp;
  c.widths.pp = m.pp;
  c.widths.ep = m.ep;
  c.zero = m.zero;
  return c;
}

// A fresh directory for one test's checkpoints, removed afterwards.
class CheckpointDir {
 public:
  CheckpointDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = std::string(info->test_suite_name()) + "_" + info->name();
    for (char& ch : name) ch = std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
    path_ = (fs::temp_directory_path() / ("dtsim_ckpt_" + std::to_string(::getpid()) + "_" + name))
                .string();
    fs::remove_all(path_);
  }
  ~CheckpointDir() { fs::remove_all(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

class SameMeshResume : public ::testing::TestWithParam<MeshSpec> {};

TEST_P(SameMeshResume, KStepsSaveResumeKIsBitwise2KStraight) {
  const MeshSpec m = GetParam();
  CheckpointDir dir;
  const RunResult straight = run_training(mesh_config(m, 2 * kK));
  const RunResult first = save_run(mesh_config(m, kK), dir.path());
  const RunResult resumed = resume_run(mesh_config(m, 2 * kK), dir.path(), kK);
  ASSERT_EQ(resumed.losses.size(), static_cast<size_t>(kK));
  EXPECT_TRUE(same_bits(resumed.params, straight.params));
  for (int s = 0; s < kK; ++s) {
    EXPECT_EQ(first.losses[s], straight.losses[s]) << "step " << s;
    EXPECT_EQ(resumed.losses[s], straight.losses[kK + s]) << "step " << kK + s;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Meshes, SameMeshResume,
    ::testing::Values(MeshSpec{.dp = 4}, MeshSpec{.dp = 4, .zero = 3},
                      MeshSpec{.dp = 2, .tp = 2, .pp = 2}, MeshSpec{.dp = 4, .ep = 2, .moe = true},
                      MeshSpec{.dp = 2, .tp = 2, .zero = 1},
                      MeshSpec{.tp = 2, .pp = 2, .precision = model::Precision::kMixedBf16},
                      MeshSpec{.dp = 4, .ep = 4, .zero = 3, .moe = true},
                      // ZeRO-2 of a non-contiguous dense part: its packed copy on resume
                      MeshSpec{.dp = 4, .ep = 2, .zero = 2, .moe = true}),
    [](const auto& info) { return mesh_name(info.param); });

struct ReshardCase {
  MeshSpec from, to;
};

void PrintTo(const ReshardCase& r, std::ostream* os) {
  *os << mesh_name(r.from) << " to " << mesh_name(r.to);
}

class Resharding : public ::testing::TestWithParam<ReshardCase> {};

// The resume on the new mesh starts from exactly the saved parameters (a resume of zero
// steps returns them), and its K steps match both K straight steps on the old mesh and 2K
// on the new one within the stated fp32 tolerance (the meshes differ only in summation order).
TEST_P(Resharding, LoadsTheSavedStateAndContinuesAsTheNewMesh) {
  const ReshardCase r = GetParam();
  CheckpointDir dir;
  const RunResult saved = save_run(mesh_config(r.from, kK), dir.path());
  const RunResult loaded = resume_run(mesh_config(r.to, kK), dir.path(), kK);
  EXPECT_TRUE(same_bits(loaded.params, saved.params));
  TrainConfig to = mesh_config(r.to, 2 * kK);
  to.record_history = true;  // for the lockstep check (what dtsim train --check sets)
  const RunResult resumed = resume_run(to, dir.path(), kK);
  // --check across the resume: the references resume from the same checkpoint.
  to.checkpoint.resume_dir = dir.path();
  const CheckResult ck = check(to, resumed);
  EXPECT_TRUE(ck.passed && ck.lockstep) << ck.verdict_text;
  RunResult planted = resumed;  // an error of 1e-3 in one parameter at one resumed step
  planted.param_history[1][planted.param_history[1].size() / 2] += 1e-3f;
  EXPECT_FALSE(check(to, planted).passed) << "a planted 1e-3 error passed the check";
  for (const MeshSpec& reference : {r.from, r.to}) {
    RunResult straight = run_training(mesh_config(reference, 2 * kK));
    straight.losses.erase(straight.losses.begin(), straight.losses.begin() + kK);
    const Comparison c = compare(resumed, straight, kFp32Rtol, kFp32Atol);
    EXPECT_TRUE(c.passed) << "against " << mesh_name(reference) << ": max |dparam| "
                          << c.max_abs_diff << ", max |dloss| " << c.max_loss_diff;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Meshes, Resharding,
    ::testing::Values(ReshardCase{{.dp = 4, .zero = 3}, {.dp = 2, .tp = 2}},
                      ReshardCase{{.tp = 2, .pp = 2}, {.dp = 1}},
                      ReshardCase{{.dp = 2, .tp = 2, .pp = 2}, {.dp = 4, .zero = 2}},
                      // An MoE's capacity drops tokens per data-parallel micro-batch: dp stays.
                      ReshardCase{{.dp = 4, .ep = 4, .moe = true},
                                  {.dp = 4, .ep = 2, .zero = 3, .moe = true}}),
    [](const auto& info) {
      return mesh_name(info.param.from) + "_to_" + mesh_name(info.param.to);
    });

TEST(CheckpointSingleRank, SingleAndAccumSaveAndResumeBitwise) {
  for (const Strategy strategy : {Strategy::kSingle, Strategy::kAccum}) {
    CheckpointDir dir;
    const auto config = [&](int steps) {
      return with_adam(make_config(
          {.strategy = strategy, .ranks = strategy == Strategy::kAccum ? 4 : 1, .steps = steps}));
    };
    const RunResult straight = run_training(config(2 * kK));
    save_run(config(kK), dir.path());
    const RunResult resumed = resume_run(config(2 * kK), dir.path(), kK);
    EXPECT_TRUE(same_bits(resumed.params, straight.params)) << to_string(strategy);
  }
}

TEST(Checksum, Mix64SeesEveryBitFlipAndVersionOneIsFnv1a) {
  std::vector<std::byte> bytes(203);  // four lanes, a word tail and a byte tail
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = std::byte(i * 37 + 11);
  const uint64_t sum = checkpoint::mix64(bytes);
  for (size_t i = 0; i < bytes.size() * 8; ++i) {
    bytes[i / 8] ^= std::byte(1 << (i % 8));
    EXPECT_NE(checkpoint::mix64(bytes), sum) << "bit " << i;
    bytes[i / 8] ^= std::byte(1 << (i % 8));
  }
  EXPECT_EQ(checkpoint::mix64(bytes), sum);
  bytes.push_back(std::byte(0));  // a trailing zero is another length
  EXPECT_NE(checkpoint::mix64(bytes), sum);
  checkpoint::Checksum pieces(2);  // 32-byte blocks, then the rest: the same sum
  pieces.update(std::span(bytes).first(64));
  pieces.update(std::span(bytes).subspan(64));
  EXPECT_EQ(pieces.finish(), checkpoint::mix64(bytes));
  EXPECT_THROW(pieces.update(std::span(bytes).first(32)), Error);  // after a partial block
  const std::byte a[1] = {std::byte('a')};
  EXPECT_EQ(checkpoint::checksum(1, a), 0xaf63dc4c8601ec8cull);  // FNV-1a 64 of "a"
  EXPECT_EQ(checkpoint::checksum(2, a), checkpoint::mix64(a));
}

// commit_save checks by intervals that the shards' chunks tile every tensor.
TEST(CheckpointCommit, ChunksMustTileEachTensorExactlyOnce) {
  const std::vector<float> values(16, 1.0f);
  const auto chunk = [&](int64_t row0, int64_t col0, int64_t rows, int64_t cols) {
    return checkpoint::ShardEntry{checkpoint::entry_name("params/w", row0, col0),
                                  {rows, cols},
                                  std::span<const float>(values).first(rows * cols)};
  };
  std::map<std::string, checkpoint::TensorMeta> expected;
  expected["params/w"].rows = 4;
  expected["params/w"].cols = 4;
  struct Case {
    std::vector<std::vector<checkpoint::ShardEntry>> shards;
    const char* error;  // nullptr: a tiling
  };
  const std::vector<Case> cases = {
      {{{chunk(0, 0, 2, 4)}, {chunk(2, 0, 2, 2), chunk(2, 2, 2, 2)}}, nullptr},
      {{{chunk(0, 0, 4, 1), chunk(0, 1, 4, 3)}}, nullptr},
      {{{chunk(0, 0, 3, 4)}, {chunk(2, 0, 2, 4)}}, "two ranks wrote the same element"},
      {{{chunk(0, 0, 4, 2)}, {chunk(1, 1, 1, 1), chunk(0, 2, 4, 2)}}, "the same element"},
      {{{chunk(0, 0, 2, 4)}, {chunk(3, 0, 1, 4)}}, "no rank wrote part of params/w"},
      {{{chunk(0, 0, 4, 4)}, {chunk(3, 3, 1, 2)}}, "lies outside its shape"},
  };
  for (size_t k = 0; k < cases.size(); ++k) {
    CheckpointDir dir;
    fs::create_directories(dir.path());
    const std::string partial = checkpoint::begin_save(dir.path(), 1);
    for (size_t r = 0; r < cases[k].shards.size(); ++r) {
      const checkpoint::ShardHead head = checkpoint::safetensors_head(cases[k].shards[r]);
      checkpoint::write_synced(
          (fs::path(partial) / checkpoint::shard_file(static_cast<int>(r), 2)).string(),
          checkpoint::safetensors_pieces(head, cases[k].shards[r]));
    }
    checkpoint::Metadata meta;
    meta.step = 1;
    try {
      checkpoint::commit_save(dir.path(), meta, expected);
      EXPECT_EQ(cases[k].error, nullptr) << "case " << k << " was committed";
    } catch (const Error& e) {
      ASSERT_NE(cases[k].error, nullptr) << "case " << k << ": " << e.what();
      EXPECT_NE(std::string(e.what()).find(cases[k].error), std::string::npos) << e.what();
    }
  }
}

TEST(CheckpointShape, AnotherModelShapeIsRefusedNamingTheTensorAndBothShapes) {
  CheckpointDir dir;
  save_run(mesh_config({.dp = 2}, kK), dir.path());
  TrainConfig wider = mesh_config({.dp = 2}, 2 * kK);
  wider.mlp.hidden_dim = 32;
  wider.checkpoint.resume_dir = dir.path();
  try {
    checkpoint::validate_resume(wider);
    FAIL() << "a checkpoint of hidden 24 resumed with hidden 32";
  } catch (const UsageError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("block0.b1"), std::string::npos) << what;
    EXPECT_NE(what.find("[24]"), std::string::npos) << what;
    EXPECT_NE(what.find("[32]"), std::string::npos) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace dtsim::train
