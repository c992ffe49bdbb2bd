// dtsim estimate: the analytical estimator (train/estimate.h) as a table: static memory per
// device by category and bytes sent per device per step, for each ZeRO stage (or one).
// Every number is computed by train::estimate(); nothing here is a typed-in constant.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>

#include "train/cli/commands.h"
#include "train/cli/flags.h"
#include "train/cli/report_json.h"
#include "train/cli/table.h"
#include "train/estimate.h"

namespace dtsim::cli {
namespace {

const char* kStageNames[] = {"0 (DDP)", "1 (opt state)", "2 (+ grads)", "3 (+ weights)"};

// Decimal units, as the lesson writes memory: "112 GB", "24.5 GB", "36.4 kB".
std::string decimal_bytes(double b) {
  if (b == 0) return "0";
  if (b >= 1e9) return fmt::format("{:.4g} GB", b / 1e9);
  if (b >= 1e6) return fmt::format("{:.4g} MB", b / 1e6);
  if (b >= 1e3) return fmt::format("{:.4g} kB", b / 1e3);
  return fmt::format("{:.4g} B", b);
}

struct EstimateFlags {
  double params = 0;
  int ranks = 8, stage = -1;
  std::string precision = "bf16", optimizer = "adam";
};

int run_estimate(const EstimateFlags& f) {
  train::EstimateInput in;
  in.params = f.params;
  in.ranks = f.ranks;
  const bool bf16 = f.precision == "bf16";
  in.precision = bf16 ? model::Precision::kMixedBf16 : model::Precision::kFp32;
  const bool adam = f.optimizer == "adam";
  in.optimizer = adam ? model::OptimizerKind::kAdam : model::OptimizerKind::kSgd;
  const int only = f.stage;

  std::printf("dtsim estimate: %.4g params, %d ranks, %s, %s\n\n", in.params, in.ranks,
              bf16 ? "mixed precision (bf16 weights and gradients, fp32 master)" : "fp32",
              optimizer_name(in.optimizer));
  std::vector<std::string> header{"stage"};
  for (int c = 0; c < model::kNumMemoryCategories; ++c) {
    if (c != static_cast<int>(model::MemoryCategory::kActivations)) {
      header.push_back(category_short_name(c));
    }
  }
  header.insert(header.end(), {"total", "B/param", "sent/step"});
  std::vector<bool> right(header.size(), true);
  right[0] = false;
  Table t(header, right);
  for (int stage = 0; stage <= 3; ++stage) {
    if (only >= 0 && stage != only) continue;
    in.zero_stage = stage;
    const train::Estimate e = train::estimate(in);
    std::vector<std::string> row{kStageNames[stage]};
    for (int c = 0; c < model::kNumMemoryCategories; ++c) {
      if (c != static_cast<int>(model::MemoryCategory::kActivations)) {
        row.push_back(decimal_bytes(e.bytes[c]));
      }
    }
    row.push_back(decimal_bytes(e.static_bytes));
    row.push_back(fmt::format("{:.4g}", e.static_bytes / in.params));
    row.push_back(decimal_bytes(e.bytes_sent_per_step));
    t.add(row);
  }
  t.print(stdout, "  ");

  in.zero_stage = 0;
  const train::Estimate ddp = train::estimate(in);
  std::printf(
      "\nstage 0 (DDP): %.4g bytes/param x %.4g params = %s per device; one gradient is %s "
      "(%s);\na ring all-reduce of it sends 2(N - 1)/N x %s = %s per device per step.\n",
      ddp.static_bytes / in.params, in.params, decimal_bytes(ddp.static_bytes).c_str(),
      decimal_bytes(ddp.gradient_bytes).c_str(), bf16 ? "bf16" : "fp32",
      decimal_bytes(ddp.gradient_bytes).c_str(), decimal_bytes(ddp.bytes_sent_per_step).c_str());
  return 0;
}

}  // namespace

Command add_estimate(CLI::App& dtsim) {
  CLI::App* app = dtsim.add_subcommand(
      "estimate", "memory per device and bytes per step for ZeRO stages 0-3 (analytical)");
  describe(app,
           "Static memory per device by category (weights, gradients, fp32 master weights, Adam m\n"
           "and v; activations are not estimated) and bytes each device sends per step with ring\n"
           "collectives, for ZeRO stage 0 (DDP) to 3, or only --stage. GB are 10^9 bytes.");
  app->option_defaults()->always_capture_default();
  app->fallthrough();  // --config belongs to dtsim
  auto f = std::make_shared<EstimateFlags>();
  app->add_option("--params", f->params, "parameter count Psi, e.g. 7e9")
      ->check(Number(1, 1e15))
      ->required()
      ->default_str("");
  app->add_option("--ranks", f->ranks, "data-parallel devices N")->transform(Integer(1, 1000000));
  app->add_option("--stage", f->stage, "ZeRO stage [default: all four]")
      ->transform(Integer(0, 3))
      ->default_str("");
  app->add_option("--precision", f->precision,
                  "bf16: mixed, bf16 weights and gradients with an fp32 master copy")
      ->check(OneOf({"bf16", "fp32"}));
  app->add_option("--optimizer", f->optimizer)->check(OneOf({"adam", "sgd"}));
  app->footer("example: dtsim estimate --params 7e9 --ranks 8");
  return {app, [f] { return run_estimate(*f); }};
}

}  // namespace dtsim::cli
