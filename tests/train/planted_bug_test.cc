// The check must fail a wrong run, not only pass correct ones (issue 32): bugs planted in a
// model's placement through ScopedModelSpec (a wrong tensor shard, a dropped gradient
// all-reduce, a sync over the wrong group) and in ZeRO's ownership through ScopedZeroOwner
// (an owner off by one, two owners of one shard) each fail the lockstep check or a guard.
#include <gtest/gtest.h>

#include <iostream>
#include <stdexcept>
#include <string>

#include "train/check.h"
#include "train/models/model_spec.h"
#include "train/placement.h"
#include "train_test_util.h"

namespace dtsim::train {
namespace {

// A spec that forwards to `base` except where a test overrides it.
class ForwardingSpec : public ModelSpec {
 public:
  explicit ForwardingSpec(const ModelSpec& base) : base_(base) {}
  ModelKind kind() const override { return base_.kind(); }
  const char* name() const override { return base_.name(); }
  std::vector<std::string> own_flags() const override { return base_.own_flags(); }
  void configure(const ModelFlags& f, TrainConfig& c) const override { base_.configure(f, c); }
  std::string describe(const TrainConfig& c) const override { return base_.describe(c); }
  std::vector<std::pair<std::string, double>> shape_fields(const TrainConfig& c) const override {
    return base_.shape_fields(c);
  }
  std::string validate(const TrainConfig& c) const override { return base_.validate(c); }
  std::string validate_mesh(const TrainConfig& c, const MeshShape& m) const override {
    return base_.validate_mesh(c, m);
  }
  int experts(const TrainConfig& c) const override { return base_.experts(c); }
  model::ParamLayout layout(const TrainConfig& c) const override { return base_.layout(c); }
  model::Layers layers(const TrainConfig& c, const MeshShape& shape, const MeshCoord& at,
                       RankComms comms) const override {
    return base_.layers(c, shape, at, comms);
  }
  bool copies_input(const TrainConfig& c, const MeshShape& m) const override {
    return base_.copies_input(c, m);
  }
  DpParts dp_parts(const TrainConfig& c, const MeshShape& m,
                   const model::ParamLayout& local) const override {
    return base_.dp_parts(c, m, local);
  }
  int pipeline_blocks(const TrainConfig& c) const override { return base_.pipeline_blocks(c); }
  int lead_layers() const override { return base_.lead_layers(); }
  bool splits_backward() const override { return base_.splits_backward(); }
  bool batch_coupled() const override { return base_.batch_coupled(); }
  int64_t activation_floats(const TrainConfig& c, int64_t rows, int tp, int share) const override {
    return base_.activation_floats(c, rows, tp, share);
  }
  std::string evaluate(const TrainConfig& c, std::span<const float> params) const override {
    return base_.evaluate(c, params);
  }
  std::unique_ptr<Objective> objective(const TrainConfig& c,
                                       model::MemoryLedger* ledger) const override {
    return base_.objective(c, ledger);
  }

 protected:
  const ModelSpec& base_;
};

// Runs `c` and expects it caught: by the check (a FAIL), or by a guard of the run or its
// assembly whose message contains `guard`; never a PASS.
void expect_caught(const TrainConfig& c, const std::string& label, const std::string& guard) {
  try {
    const CheckResult r = run_and_check(c);
    std::cout << "[" << label << "] " << r << "\n";
    EXPECT_FALSE(r.passed) << label << ": " << r;
  } catch (const std::exception& e) {
    std::cout << "[" << label << "] " << e.what() << "\n";
    EXPECT_NE(std::string(e.what()).find(guard), std::string::npos) << label << ": " << e.what();
  }
}

// Expert tensor parallelism where every tp rank believes it holds shard 0 of each expert's
// hidden width: half of every expert is computed twice, the other half never held.
class WrongExpertShard : public ForwardingSpec {
 public:
  using ForwardingSpec::ForwardingSpec;
  model::Layers layers(const TrainConfig& c, const MeshShape& shape, const MeshCoord& at,
                       RankComms comms) const override {
    MeshCoord wrong = at;
    wrong.tp = 0;
    return base_.layers(c, shape, wrong, comms);
  }
};

// A dropped gradient all-reduce: the data-parallel wrapper is told the head is not
// replicated, so its gradients are never summed over dp (each replica steps on its own).
class HeadNotSynced : public ForwardingSpec {
 public:
  using ForwardingSpec::ForwardingSpec;
  DpParts dp_parts(const TrainConfig&, const MeshShape&,
                   const model::ParamLayout& local) const override {
    const size_t head = local.layer_range(local.num_layers() - 1).begin;
    return {{{0, head}}, {}};
  }
};

// Experts synced over the wrong group: every data-parallel rank instead of the ranks that
// hold the same experts, so different experts' gradients are summed together.
class ExpertsSyncedOverDp : public ForwardingSpec {
 public:
  using ForwardingSpec::ForwardingSpec;
  DpParts dp_parts(const TrainConfig&, const MeshShape&,
                   const model::ParamLayout& local) const override {
    return DpParts::whole(local);
  }
};

TEST(PlantedBug, DroppedHeadAllReduceIsCaught) {
  for (int zero : {0, 1}) {
    TrainConfig c = mlp_config(Strategy::kMesh, 4);
    c.widths.dp = 4;
    c.widths.tp = 1;
    c.zero = zero;
    const HeadNotSynced wrong(model_spec(ModelKind::kMlp));
    const ScopedModelSpec planted(ModelKind::kMlp, wrong);
    expect_caught(c, "mlp dp4 zero" + std::to_string(zero) + ", head not all-reduced",
                  "diverged from rank 0's");
  }
}

TEST(PlantedBug, ExpertsSyncedOverTheWrongGroupFailTheCheck) {
  TrainConfig c = moe_config(Strategy::kMesh, 4);
  c.widths.dp = 4;
  c.widths.tp = 1;
  c.widths.ep = 2;
  EXPECT_TRUE(run_and_check(c).passed);
  const ExpertsSyncedOverDp wrong(model_spec(ModelKind::kMoe));
  const ScopedModelSpec planted(ModelKind::kMoe, wrong);
  const CheckResult r = run_and_check(c);
  std::cout << "[moe dp4 ep2, experts synced over dp] " << r << "\n";
  EXPECT_FALSE(r.passed) << r;
}

TEST(PlantedBug, WrongExpertShardIsCaught) {
  TrainConfig c = moe_config(Strategy::kMesh, 4);
  c.widths.dp = 2;
  c.widths.tp = 2;
  const CheckResult right = run_and_check(c);
  EXPECT_TRUE(right.passed) << right;
  const WrongExpertShard wrong(model_spec(ModelKind::kMoe));
  const ScopedModelSpec planted(ModelKind::kMoe, wrong);
  expect_caught(c, "moe dp2 x tp2, every rank on expert shard 0", "(a wrong shard offset)");
}

// ZeRO ownership off by one: rank r of every group keeps and updates shard r + 1, a
// permutation, so each shard still has one owner and only the check can tell.
int next_owner(int rank, int size) { return (rank + 1) % size; }
// Two owners of one shard: rank 1 believes it owns shard 0, as rank 0 does.
int rank1_on_shard0(int rank, int) { return rank == 1 ? 0 : rank; }

TEST(PlantedBug, ZeroOwnerOffByOneFailsTheCheck) {
  for (int zero : {1, 2, 3}) {
    TrainConfig c = mlp_config(Strategy::kMesh, 4);
    c.widths.dp = 4;
    c.widths.tp = 1;
    c.zero = zero;
    const CheckResult right = run_and_check(c);
    EXPECT_TRUE(right.passed) << "zero " << zero << ": " << right;
    const ScopedZeroOwner planted(&next_owner);
    const std::string label = "mlp dp4 zero" + std::to_string(zero) + ", ZeRO owner off by one";
    const CheckResult r = run_and_check(c);
    std::cout << "[" << label << "] " << r << "\n";
    EXPECT_FALSE(r.passed) << label << ": " << r;
  }
}

TEST(PlantedBug, TwoOwnersOfOneZeroShardAreCaught) {
  for (int zero : {1, 3}) {
    TrainConfig c = moe_config(Strategy::kMesh, 4);
    c.widths.dp = 4;
    c.widths.tp = 1;
    c.widths.ep = 2;
    c.zero = zero;
    const ScopedZeroOwner planted(&rank1_on_shard0);
    expect_caught(c, "moe dp4 ep2 zero" + std::to_string(zero) + ", ranks 0 and 1 on shard 0",
                  "ranks 0 and 1 of a group of 4 both own shard 0");
  }
}

}  // namespace
}  // namespace dtsim::train
