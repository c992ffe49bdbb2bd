// dtsim estimate: the analytical estimator (train/estimate.h) as a table: static memory per
// device by category and bytes sent per device per step, for each ZeRO stage (or one).
// Every number is computed by train::estimate(); nothing here is a typed-in constant.
#include <cstdio>
#include <string>

#include "train/cli/args.h"
#include "train/cli/commands.h"
#include "train/cli/report_json.h"
#include "train/cli/table.h"
#include "train/estimate.h"

namespace dtsim::cli {
namespace {

const char* kHelp =
    "usage: dtsim estimate --params P [--ranks N] [--stage 0..3] [--precision bf16|fp32]\n"
    "                      [--optimizer adam|sgd]\n"
    "\n"
    "Static memory per device by category (weights, gradients, fp32 master weights, Adam m\n"
    "and v; activations are not estimated) and bytes each device sends per step with ring\n"
    "collectives, for ZeRO stage 0 (DDP) to 3, or only --stage. GB are 10^9 bytes.\n"
    "\n"
    "  --params     parameter count Psi, e.g. 7e9\n"
    "  --ranks      data-parallel devices N (default 8)\n"
    "  --stage      0 | 1 | 2 | 3 (default: all four)\n"
    "  --precision  bf16 (mixed: bf16 weights and gradients, fp32 master) | fp32\n"
    "               (default bf16)\n"
    "  --optimizer  adam | sgd (default adam)\n"
    "\n"
    "example: dtsim estimate --params 7e9 --ranks 8\n";

const char* kStageNames[] = {"0 (DDP)", "1 (opt state)", "2 (+ grads)", "3 (+ weights)"};

// Decimal units, as the lesson writes memory: "112 GB", "24.5 GB", "36.4 kB".
std::string decimal_bytes(double b) {
  if (b == 0) return "0";
  if (b >= 1e9) return format("%.4g GB", b / 1e9);
  if (b >= 1e6) return format("%.4g MB", b / 1e6);
  if (b >= 1e3) return format("%.4g kB", b / 1e3);
  return format("%.4g B", b);
}

}  // namespace

int estimate_main(const Words& words) {
  Args a("estimate", words, {"params", "ranks", "stage", "precision", "optimizer"}, {"help"});
  if (a.on("help")) {
    std::fputs(kHelp, stdout);
    return 0;
  }
  if (!a.has("params")) fail("estimate", "--params is required (a parameter count, e.g. 7e9)");
  train::EstimateInput in;
  in.params = a.number("params", 0, 1, 1e15);
  in.ranks = static_cast<int>(a.integer("ranks", 8, 1, 1000000));
  const bool bf16 = a.choice("precision", "bf16", {"bf16", "fp32"}) == "bf16";
  in.precision = bf16 ? model::Precision::kMixedBf16 : model::Precision::kFp32;
  const bool adam = a.choice("optimizer", "adam", {"adam", "sgd"}) == "adam";
  in.optimizer = adam ? model::OptimizerKind::kAdam : model::OptimizerKind::kSgd;
  const int only = a.has("stage") ? static_cast<int>(a.integer("stage", 0, 0, 3)) : -1;

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
    row.push_back(format("%.4g", e.static_bytes / in.params));
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

}  // namespace dtsim::cli
