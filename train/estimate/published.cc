#include "train/estimate/published.h"

namespace dtsim::train::estimator {

const std::vector<PublishedRun>& narayanan_2021_table1() {
  // Transcribed from Table 1 (the image in Megatron-LM's README, images/cases_april2021.png).
  static const std::vector<PublishedRun> kRows = {
      {1.7, 24, 2304, 24, 1, 1, 32, 512, 137},
      {3.6, 32, 3072, 30, 2, 1, 64, 512, 138},
      {7.5, 32, 4096, 36, 4, 1, 128, 512, 142},
      {18.4, 48, 6144, 40, 8, 1, 256, 1024, 135},
      {39.1, 64, 8192, 48, 8, 2, 512, 1536, 138},
      {76.1, 80, 10240, 60, 8, 4, 1024, 1792, 140},
      {145.6, 96, 12288, 80, 8, 8, 1536, 2304, 148},
      {310.1, 128, 16384, 96, 8, 16, 1920, 2160, 155},
      {529.6, 128, 20480, 105, 8, 35, 2520, 2520, 163},
      {1008.0, 160, 25600, 128, 8, 64, 3072, 3072, 163},
  };
  return kRows;
}

ProjectionInput published_input(const PublishedRun& run, const Hardware& hw) {
  ProjectionInput in;
  in.arch.kind = ArchKind::kGpt;
  in.arch.gpt = {
      .layers = run.layers, .hidden = run.hidden, .heads = run.heads, .vocab = 51200, .seq = 2048};
  in.tp = run.tp;
  in.pp = run.pp;
  in.dp = run.gpus / (run.tp * run.pp);
  in.micro_batch = 1;
  in.global_batch = run.batch;
  in.recompute = Recompute::kFull;
  in.hw = hw;
  return in;
}

}  // namespace dtsim::train::estimator
