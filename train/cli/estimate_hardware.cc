// dtsim estimate's hardware: a preset or a hardware file (JSON, what --calibrate writes)
// with the flags' overrides, and --calibrate itself (train/estimate/calibrate.h).
#include <fmt/format.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "runtime/job_start.h"
#include "runtime/process_model.h"
#include "train/cli/estimate_flags.h"
#include "train/cli/flags.h"
#include "train/cli/output_file.h"
#include "train/estimate/calibrate.h"
#include "train/estimate/hardware.h"

namespace dtsim::cli {

namespace est = train::estimator;

est::Hardware hardware_from_flags(const CLI::App& app, const EstimateFlags& f) {
  est::Hardware hw;
  if (const est::Hardware* preset = est::find_hardware(f.hardware)) {
    hw = *preset;
  } else {
    std::ifstream in(f.hardware);
    if (!in) {
      fail("estimate", "--hardware " + f.hardware +
                           " is neither a100, h100 nor a readable hardware file (dtsim estimate "
                           "--calibrate FILE writes one)");
    }
    std::stringstream text;
    text << in.rdbuf();
    const nlohmann::json j = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
    if (!j.is_object()) fail("estimate", "--hardware " + f.hardware + " is not a JSON object");
    hw.name = j.value("name", f.hardware);
    hw.source = "hardware file " + f.hardware;
    for (const est::HardwareField& field : est::hardware_fields()) {
      if (!j.contains(field.name) || !j[field.name].is_number() ||
          !field.set(hw, j[field.name].get<double>())) {
        fail("estimate", fmt::format("--hardware {}: \"{}\" must be a number in range (dtsim "
                                     "estimate --calibrate writes every field)",
                                     f.hardware, field.name));
      }
    }
  }
  if (given(app, "--peak-tflops")) hw.peak_flops = f.peak_tflops * 1e12;
  if (given(app, "--efficiency")) hw.efficiency = f.efficiency;
  if (given(app, "--devices-per-node")) hw.devices_per_node = f.devices_per_node;
  if (given(app, "--intra-gbps")) hw.intra.bandwidth = f.intra_gbps * 1e9;
  if (given(app, "--inter-gbps")) hw.inter.bandwidth = f.inter_gbps * 1e9;
  if (given(app, "--intra-latency-us")) hw.intra.latency = f.intra_latency_us * 1e-6;
  if (given(app, "--inter-latency-us")) hw.inter.latency = f.inter_latency_us * 1e-6;
  return hw;
}

// Under mpirun, the links and the ddp steps of the job's world (one rank a process, and two)
// are measured and compute comes from --hardware, a thread-world calibration: processes
// calibrating compute at once would share the cores they measure.
static int write_calibration(OutputFile& out, const est::Calibration& c);

int run_calibrate(const CLI::App& app, const EstimateFlags& f) {
  const ProcessModel job = ProcessModel::from_environment(0, 1);
  for (const char* flag : {"--model", "--preset", "--params", "--published"}) {
    if (given(app, flag)) fail("estimate", std::string(flag) + " does not apply to --calibrate");
  }
  if (!job.mpi && given(app, "--hardware")) {
    fail("estimate",
         "--hardware does not apply to --calibrate outside mpirun (it measures "
         "compute itself)");
  }
  if (job.mpi && (!given(app, "--hardware") || est::find_hardware(f.hardware) != nullptr)) {
    fail("estimate",
         "--calibrate under mpirun measures the links and ddp steps, not compute: give "
         "--hardware FILE, the file "
         "`dtsim estimate --calibrate FILE` wrote without mpirun, for compute");
  }
  if (job.mpi && job.processes < 2) {
    fail("estimate", "--calibrate under mpirun needs 2 or more processes (mpirun -np 2)");
  }
  if (f.calibrate == "-") {
    fail("estimate", "--calibrate - is standard output, where the measurements go; give a FILE");
  }
  const bool root = job.process == 0;
  const est::Hardware base = job.mpi ? hardware_from_flags(app, f) : est::Hardware{};
  OutputFile out("estimate", "--calibrate", f.calibrate, root);  // checked before any work
  begin_work();
  if (job.mpi) {
    const est::Calibration c = est::calibrate_links(base, job);
    if (!root) return 0;
    std::printf("compute: from %s\n", f.hardware.c_str());
    std::printf("ring all_gather, %d processes (%s): 1 float a rank in %s, %s in %s\n",
                c.link_ranks, job.describe().c_str(),
                fmt::format("{:.4g} us", c.gather_small_seconds * 1e6).c_str(),
                fmt::format("{:.4g} MB", c.large_bytes / 1e6).c_str(),
                fmt::format("{:.4g} ms", c.gather_large_seconds * 1e3).c_str());
    for (int k = 0; k < 2; ++k) {
      std::printf(
          "ddp on %d ranks (%d rank threads a process): a rank %.3gx slower, its gradients' "
          "all_reduce %.3g ms a MB\n",
          c.job_ranks[k], job.threads << k, c.job_slowdown[k], c.job_sync_seconds[k] * 1e9);
    }
    return write_calibration(out, c);
  }
  const est::Calibration c = est::calibrate();
  std::printf(
      "calibration runs (dtsim train --strategy single; none held out by "
      "bench/estimate_vs_train.py):\n");
  for (const est::CalibrationRun& r : c.runs) {
    std::printf(
        "  %-32s %7.3f ms on 1 core, %7.3f on %d, ddp x%d %7.3f, x%d %7.3f, x%d %7.3f, fit %7.3f "
        "ms\n",
        r.name.c_str(), r.seconds * 1e3, r.all_cores * 1e3, c.hw.cores, c.hw.cores,
        r.concurrent * 1e3, 2 * c.hw.cores, r.oversubscribed * 1e3, 4 * c.hw.cores, r.crowded * 1e3,
        r.fitted * 1e3);
  }
  std::printf(
      "compute on 1 core: GEMM %.4g GFLOP/s, %.3g ns an activation element (moe %.3g, gpt %.3g), "
      "%.3g ns a parameter, %.3g us a step; one rank on %d cores %.3gx faster\n"
      "ddp: a rank %.3gx slower on %d rank threads, %.3gx on %d, %.3gx on %d; its gradients' "
      "all_reduce %.3g, %.3g, %.3g ms a MB\n",
      c.hw.peak_flops / 1e9, c.hw.element_seconds * 1e9, c.hw.moe_element_seconds * 1e9,
      c.hw.gpt_element_seconds * 1e9, c.hw.param_seconds * 1e9, c.hw.step_seconds * 1e6, c.hw.cores,
      c.hw.parallel_speedup, c.hw.shared_slowdown, c.hw.cores, c.hw.oversubscribed_slowdown,
      2 * c.hw.cores, c.hw.crowded_slowdown, 4 * c.hw.cores, c.hw.shared_sync_seconds * 1e9,
      c.hw.oversubscribed_sync_seconds * 1e9, c.hw.crowded_sync_seconds * 1e9);
  std::printf(
      "2 rank threads: ring all_gather 1 float a rank in %s, %s in %s; shared all_reduce 4 B "
      "in %s, %s in %s\n",
      fmt::format("{:.4g} us", c.gather_small_seconds * 1e6).c_str(),
      fmt::format("{:.4g} MB", c.large_bytes / 1e6).c_str(),
      fmt::format("{:.4g} ms", c.gather_large_seconds * 1e3).c_str(),
      fmt::format("{:.4g} us", c.small_seconds * 1e6).c_str(),
      fmt::format("{:.4g} MB", c.large_bytes / 1e6).c_str(),
      fmt::format("{:.4g} ms", c.large_seconds * 1e3).c_str());
  std::printf("%s: %.3f ms a step, projected %.3f ms without its blocks: %.3g us a block\n",
              c.ring_name.c_str(), c.ring_seconds * 1e3, c.ring_projected * 1e3,
              c.hw.ring_block_seconds * 1e6);
  if (!c.expert_name.empty()) {
    std::printf("%s: %.3f ms a step, projected %.3f ms balanced: its expert compute +%.0f%%\n",
                c.expert_name.c_str(), c.expert_seconds * 1e3, c.expert_projected * 1e3,
                c.hw.expert_imbalance * 100);
  }
  std::printf("%d rank threads: all_gather 1 float a rank in %s\n", c.oversubscribed_ranks,
              fmt::format("{:.4g} us", c.oversubscribed_seconds * 1e6).c_str());
  return write_calibration(out, c);
}

static int write_calibration(OutputFile& out, const est::Calibration& c) {
  std::printf("channels: alpha %s, beta 1 / (%.4g GB/s)",
              fmt::format("{:.4g} us", c.hw.intra.latency * 1e6).c_str(),
              c.hw.intra.bandwidth / 1e9);
  if (c.hw.shared_bandwidth > 0) {
    std::printf("; shared buffer: alpha %s, beta 1 / (%.4g GB/s)",
                fmt::format("{:.4g} us", c.hw.shared_latency * 1e6).c_str(),
                c.hw.shared_bandwidth / 1e9);
  }
  std::printf("\n");
  nlohmann::ordered_json j;
  j["name"] = c.hw.name;
  for (const est::HardwareField& field : est::hardware_fields()) j[field.name] = field.get(c.hw);
  out.commit(json_with_generator(j.dump(2), "dtsim estimate --calibrate") + "\n");
  std::printf("wrote %s\n", out.name().c_str());
  return 0;
}

}  // namespace dtsim::cli
