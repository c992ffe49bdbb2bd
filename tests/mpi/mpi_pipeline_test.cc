// dp x pp training with the ranks as MPI processes (and processes of rank threads): the
// point-to-point activations and gradients cross processes, and the result is bitwise
// equal to single-rank accumulation over the same micro-batches, as with rank threads.
//
//   mpiexec --allow-run-as-root --oversubscribe -np 4 build/tests/mpi/mpi_pipeline_test
//   DTSIM_THREADS_PER_PROCESS=2 mpiexec ... -np 2 build/tests/mpi/mpi_pipeline_test
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "runtime/process_model.h"
#include "train/pipeline_parallel/pipeline_parallel.h"
#include "train/strategies.h"

namespace dtsim::train::pipeline {
namespace {

int threads_per_process() {
  const char* v = std::getenv("DTSIM_THREADS_PER_PROCESS");
  return v ? std::atoi(v) : 1;
}

struct Case {
  const char* name;
  ScheduleKind kind;
  int dp, v;
};

class MpiPipeline : public ::testing::TestWithParam<Case> {};

TEST_P(MpiPipeline, BitwiseEqualToAccumulation) {
  if (!ProcessModel::launched_by_mpi()) GTEST_SKIP() << "run under mpiexec";
  const ProcessModel job = ProcessModel::from_environment(1, threads_per_process());
  const int world = job.world_size();
  const Case c = GetParam();
  if (world % c.dp != 0 || world / c.dp < 2) GTEST_SKIP() << "needs a pipeline of 2 or more";
  const int p = world / c.dp;
  TrainConfig config;
  config.strategy = Strategy::kMesh;
  config.widths.dp = c.dp;
  config.widths.pp = p;
  config.schedule = c.kind;
  config.virtual_stages = c.v;
  config.widths.tp = 1;
  config.model = ModelKind::kMlp;
  config.ranks = world;
  config.threads_per_process = threads_per_process();
  config.mlp = {.input_dim = 8, .hidden_dim = 16, .num_blocks = p * c.v, .output_dim = 4};
  config.micro_batches = 2 * p;
  config.global_batch = 4 * c.dp * config.micro_batches;
  config.steps = 3;
  config.algo = Algo::kDeterministic;
  config.optimizer = model::OptimizerKind::kAdam;
  config.lr = 0.01f;
  const std::optional<RunResult> got = launch_training(config);
  if (!got) return;  // the result lives in the process of global rank 0
  TrainConfig accum = config;
  accum.strategy = Strategy::kAccum;
  accum.ranks = c.dp;
  const RunResult want = run_accum(accum);
  ASSERT_EQ(got->params.size(), want.params.size());
  EXPECT_EQ(std::memcmp(got->params.data(), want.params.data(), want.params.size() * 4), 0);
}

INSTANTIATE_TEST_SUITE_P(Pipeline, MpiPipeline,
                         ::testing::Values(Case{"one_f_one_b", ScheduleKind::kOneFOneB, 1, 1},
                                           Case{"gpipe_dp2", ScheduleKind::kGpipe, 2, 1},
                                           Case{"interleaved_v2", ScheduleKind::kInterleaved, 1, 2},
                                           Case{"zb_h1_dp2", ScheduleKind::kZeroBubbleH1, 2, 1}),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace dtsim::train::pipeline
