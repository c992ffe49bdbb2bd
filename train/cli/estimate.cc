// dtsim estimate: the analytical estimator (train/estimate.h) as a table: static memory per
// device by category and bytes sent per device per step, for each ZeRO stage (or one).
// Every number is computed by train::estimate(); nothing here is a typed-in constant.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "runtime/job_start.h"
#include "train/cli/commands.h"
#include "train/cli/estimate_flags.h"
#include "train/cli/flags.h"
#include "train/cli/report_json.h"
#include "train/cli/table.h"
#include "train/estimate.h"
#include "train/estimate/architecture.h"
#include "train/estimate/collective_cost.h"

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

// Flags that only the architecture's projection reads.
const char* kArchitectureFlags[] = {"--layers",
                                    "--hidden",
                                    "--heads",
                                    "--kv-heads",
                                    "--ffn",
                                    "--vocab",
                                    "--seq",
                                    "--dim",
                                    "--experts",
                                    "--top-k",
                                    "--micro-batch",
                                    "--global-batch",
                                    "--ep",
                                    "--cp",
                                    "--sequence-parallel",
                                    "--recompute",
                                    "--no-dropout",
                                    "--memory",
                                    "--hardware",
                                    "--algo",
                                    "--peak-tflops",
                                    "--efficiency",
                                    "--intra-gbps",
                                    "--inter-gbps",
                                    "--intra-latency-us",
                                    "--inter-latency-us",
                                    "--devices-per-node"};

std::string preset_names() {
  std::string names;
  for (const train::estimator::Preset& p : train::estimator::presets()) {
    names += (names.empty() ? "" : "|") + std::string(p.name);
  }
  return names;
}

const char* kMeshFlags[] = {
    "--dp",         "--tp", "--pp", "--zero", "--micro-batches", "--schedule", "--virtual-stages",
    "--activations"};

// One table row of a device's model state: the categories, total, B/param, sent/step.
std::vector<std::string> state_row(std::string first, const train::Estimate& e, double params) {
  std::vector<std::string> row{std::move(first)};
  for (int c = 0; c < model::kNumMemoryCategories; ++c) {
    if (c != static_cast<int>(model::MemoryCategory::kActivations)) {
      row.push_back(decimal_bytes(e.bytes[c]));
    }
  }
  row.push_back(decimal_bytes(e.static_bytes));
  row.push_back(fmt::format("{:.4g}", e.static_bytes / params));
  row.push_back(decimal_bytes(e.bytes_sent_per_step));
  return row;
}

std::vector<std::string> state_header(const char* first, const char* sent) {
  std::vector<std::string> header{first};
  for (int c = 0; c < model::kNumMemoryCategories; ++c) {
    if (c != static_cast<int>(model::MemoryCategory::kActivations)) {
      header.push_back(category_short_name(c));
    }
  }
  header.insert(header.end(), {"total", "B/param", sent});
  return header;
}

int run_mesh_estimate(const CLI::App& app, const EstimateFlags& f) {
  for (const char* flag : {"--ranks", "--stage"}) {
    if (given(app, flag)) {
      fail("estimate", std::string(flag) + (flag[2] == 'r' ? " is the flat estimate's data-parallel"
                                                             " size; with the mesh give --dp"
                                                           : " is the flat estimate's ZeRO stage;"
                                                             " with the mesh give --zero"));
    }
  }
  train::MeshEstimateInput in;
  in.params = f.params;
  in.dp = f.dp;
  in.tp = f.tp;
  in.zero_stage = f.zero;
  const bool bf16 = f.precision == "bf16";
  in.precision = bf16 ? model::Precision::kMixedBf16 : model::Precision::kFp32;
  in.optimizer = f.optimizer == "adam" ? model::OptimizerKind::kAdam : model::OptimizerKind::kSgd;
  train::pipeline::parse_schedule(f.schedule, &in.schedule.kind);  // OneOf accepted it
  in.schedule.stages = f.pp;
  in.schedule.micro_batches = f.micro_batches;
  in.schedule.virtual_stages = f.virtual_stages;
  if (const std::string why = train::pipeline::validate(in.schedule); !why.empty()) {
    fail("estimate", why);
  }
  in.activation_bytes = f.activations;
  const train::MeshEstimate m = train::estimate_mesh(in);
  const train::pipeline::ScheduleSpec& s = in.schedule;
  begin_work();

  std::printf(
      "dtsim estimate: %.4g params on a mesh of dp %d x tp %d x pp %d = %d device%s, %s, %s\n",
      in.params, in.dp, in.tp, s.stages, m.devices, m.devices == 1 ? "" : "s",
      bf16 ? "mixed precision (bf16 weights and gradients, fp32 master)" : "fp32",
      optimizer_name(in.optimizer));
  std::printf("pipeline: %s, %d micro-batches", train::pipeline::info(s.kind).title,
              s.micro_batches);
  if (s.virtual_stages > 1) std::printf(", %d virtual stages", s.virtual_stages);
  std::printf(
      "\n\nmodel state per device: %.4g params (Psi / (tp pp)), ZeRO-%d over the dp %d "
      "ranks of its stage\n",
      m.params_per_device, in.zero_stage, in.dp);
  std::vector<std::string> header = state_header("", "dp sent/step");
  std::vector<bool> right(header.size(), true);
  right[0] = false;
  Table t(header, right);
  t.add(state_row(fmt::format("ZeRO-{}", in.zero_stage), m.state, m.params_per_device));
  t.print(stdout, "  ");

  if (s.stages == 1) {
    std::printf("\npipeline bubble: none (one stage; --pp P cuts the model into P stages)\n");
  } else {
    std::printf("\npipeline bubble: %s of the slots idle (%.1f%%), %s; formula %s = %s\n",
                train::pipeline::to_string(m.bubble).c_str(), 100 * m.bubble.value(),
                m.dry_run ? "from the schedule's dry run"
                          : "by the formula (the schedule is too large to dry-run)",
                train::pipeline::info(s.kind).formula,
                train::pipeline::to_string(m.bubble_formula).c_str());
  }
  const bool chunks = s.virtual_stages > 1;
  if (f.activations > 0) {
    std::printf(
        "activations per device at the peak (A = %s per micro-batch through the whole "
        "model on one tp rank; a %s holds A/%d):\n",
        decimal_bytes(f.activations).c_str(), chunks ? "chunk" : "stage",
        s.stages * s.virtual_stages);
  } else {
    std::printf(
        "activations per device at the peak, in-flight %s (give --activations A, the "
        "bytes one micro-batch saves through the whole model, for bytes):\n",
        chunks ? "chunk micro-batches (each A/(p v))" : "micro-batches (each A/p)");
  }
  for (int r = 0; r < s.stages; ++r) {
    std::printf("  stage %d: %d in flight", r, m.in_flight[r]);
    if (m.held[r] != m.in_flight[r]) std::printf(", %d held until their W", m.held[r]);
    if (f.activations > 0) std::printf(" = %s", decimal_bytes(m.activation_bytes[r]).c_str());
    std::printf("\n");
  }
  const double peak_activations =
      *std::max_element(m.activation_bytes.begin(), m.activation_bytes.end());
  if (f.activations > 0) {
    std::printf("\nlargest device: %s of model state + %s of activations = %s\n",
                decimal_bytes(m.state.static_bytes).c_str(),
                decimal_bytes(peak_activations).c_str(),
                decimal_bytes(m.state.static_bytes + peak_activations).c_str());
  }
  return 0;
}

int run_estimate(const CLI::App& app, const EstimateFlags& f) {
  if (f.published) return run_published(app, f);
  if (given(app, "--calibrate")) return run_calibrate(app, f);
  if (given(app, "--model") || given(app, "--preset")) return run_model_estimate(app, f);
  for (const char* flag : kArchitectureFlags) {
    if (given(app, flag)) {
      fail("estimate", std::string(flag) +
                           " describes an architecture: add --model gpt|mlp|moe "
                           "or --preset");
    }
  }
  if (!given(app, "--params")) {
    fail("estimate",
         "--params is required (or describe the model: --model gpt|mlp|moe, or "
         "--preset " +
             preset_names() + ")");
  }
  // --zero alone is the flat estimate's --stage (dp = --ranks); with any other mesh flag,
  // the mesh.
  for (const char* flag : kMeshFlags) {
    if (std::string(flag) != "--zero" && given(app, flag)) return run_mesh_estimate(app, f);
  }
  if (given(app, "--zero") && given(app, "--stage")) {
    fail("estimate", "--zero and --stage both pick the ZeRO stage; give one of them");
  }
  train::EstimateInput in;
  in.params = f.params;
  in.ranks = f.ranks;
  const bool bf16 = f.precision == "bf16";
  in.precision = bf16 ? model::Precision::kMixedBf16 : model::Precision::kFp32;
  const bool adam = f.optimizer == "adam";
  in.optimizer = adam ? model::OptimizerKind::kAdam : model::OptimizerKind::kSgd;
  const int only = given(app, "--zero") ? f.zero : f.stage;
  begin_work();

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
      "estimate",
      "memory, traffic and step time per device, from a parameter count or an architecture");
  describe(app,
           "Static memory per device by category (weights, gradients, fp32 master weights, Adam m\n"
           "and v; activations are not estimated) and bytes each device sends per step with ring\n"
           "collectives, for ZeRO stage 0 (DDP) to 3, or only --stage. GB are 10^9 bytes.\n"
           "With --dp, --tp or --pp (or any pipeline flag): one device of a 3D mesh, ZeRO --zero\n"
           "along dp, the pipeline bubble from the schedule and activations per stage.\n"
           "With --model gpt|mlp|moe or --preset: the architecture gives the parameters by layer\n"
           "kind, activations (Korthikanti et al. 2022 for gpt), traffic per axis and collective,\n"
           "the step time on --hardware and whether it fits --memory (docs/estimate.md).");
  app->option_defaults()->always_capture_default();
  app->fallthrough();  // --config belongs to dtsim
  auto f = std::make_shared<EstimateFlags>();
  app->add_option("--params", f->params, "parameter count Psi, e.g. 7e9 or 7B (K, M, B, T)")
      ->transform(CLI::Validator(
          [](std::string& s) {
            // 7B -> 7e9: the suffixes model cards use (K, M, B or G, T), any case.
            static const std::string kSuffix = "kmbgt";
            static const char* kExp[] = {"e3", "e6", "e9", "e9", "e12"};
            if (s.size() < 2) return std::string();
            const size_t i = kSuffix.find(static_cast<char>(std::tolower(s.back())));
            if (i != std::string::npos &&
                std::isdigit(static_cast<unsigned char>(s[s.size() - 2]))) {
              s = s.substr(0, s.size() - 1) + kExp[i];
            }
            return std::string();
          },
          "", "suffix"))
      ->check(Number(1, 1e15))
      ->default_str("");
  app->add_option("--ranks", f->ranks, "data-parallel devices N")->transform(Integer(1, 1000000));
  app->add_option("--stage", f->stage, "ZeRO stage [default: all four]")
      ->transform(Integer(0, 3))
      ->default_str("");
  app->add_option("--precision", f->precision,
                  "bf16: mixed, bf16 weights and gradients with an fp32 master copy")
      ->check(OneOf({"bf16", "fp32"}));
  app->add_option("--optimizer", f->optimizer)->check(OneOf({"adam", "sgd"}));
  app->add_option("--dp", f->dp, "mesh: data-parallel size")->transform(Integer(1, 1000000));
  app->add_option("--tp", f->tp, "mesh: tensor-parallel size")->transform(Integer(1, 1024));
  app->add_option("--pp", f->pp, "mesh: pipeline stages")->transform(Integer(1, 1024));
  app->add_option("--zero", f->zero, "mesh: ZeRO stage along dp (alone: the table's --stage)")
      ->transform(Integer(0, 3));
  app->add_option("--micro-batches", f->micro_batches, "mesh: micro-batches per step")
      ->transform(Integer(1, 4096));
  app->add_option("--schedule", f->schedule, "mesh: pipeline schedule")
      ->check(OneOf(train::pipeline::schedule_names()));
  app->add_option("--virtual-stages", f->virtual_stages,
                  "mesh: model chunks per stage (--schedule interleaved)")
      ->transform(Integer(1, 64));
  app->add_option("--activations", f->activations,
                  "mesh: bytes of activations one micro-batch saves through the whole model")
      ->check(Number(0, 1e18))
      ->default_str("");
  // The architecture's projection (train/estimate/projection.h).
  std::vector<std::string> preset_list;
  for (const train::estimator::Preset& p : train::estimator::presets())
    preset_list.push_back(p.name);
  app->add_option("--model", f->model, "architecture: gpt (a decoder), or dtsim's mlp or moe")
      ->check(OneOf({"gpt", "mlp", "moe"}))
      ->default_str("");
  app->add_option("--preset", f->preset, "a named gpt shape with its source")
      ->check(OneOf(preset_list))
      ->default_str("");
  app->add_option("--layers", f->layers, "gpt: L; mlp: blocks; moe: MoE layers")
      ->transform(Integer(1, 100000))
      ->default_str("");
  app->add_option("--hidden", f->hidden, "gpt: h; mlp: hidden width H; moe: expert width F")
      ->transform(Integer(1, 1 << 20))
      ->default_str("");
  app->add_option("--heads", f->heads, "gpt: attention heads a")
      ->transform(Integer(1, 65536))
      ->default_str("");
  app->add_option("--kv-heads", f->kv_heads, "gpt: key/value heads (grouped-query) [default: a]")
      ->transform(Integer(1, 65536))
      ->default_str("");
  app->add_option("--ffn", f->ffn, "gpt: MLP width f [default: 4h]")
      ->transform(Integer(1, 1 << 22))
      ->default_str("");
  app->add_option("--vocab", f->vocab, "gpt: vocabulary V")
      ->transform(Integer(1, 1 << 24))
      ->default_str("");
  app->add_option("--seq", f->seq, "gpt: sequence length s")
      ->transform(Integer(1, 1 << 24))
      ->default_str("");
  app->add_option("--dim", f->dim, "mlp, moe: model width D")->transform(Integer(1, 1 << 20));
  app->add_option("--experts", f->experts, "moe: experts E")->transform(Integer(1, 1 << 16));
  app->add_option("--top-k", f->top_k, "moe: experts per token")->transform(Integer(1, 2));
  app->add_option("--micro-batch", f->micro_batch, "sequences (gpt) or samples per micro-batch b")
      ->transform(Integer(1, 1 << 20));
  app->add_option("--global-batch", f->global_batch,
                  "sequences or samples per step B [default: the preset's, else dp b m]")
      ->transform(Integer(1, 1 << 30))
      ->default_str("");
  app->add_option("--ep", f->ep, "mesh: expert-parallel width inside dp (moe)")
      ->transform(Integer(1, 1 << 16));
  app->add_option("--cp", f->cp, "mesh: context-parallel width (gpt)")->transform(Integer(1, 4096));
  app->add_flag("--sequence-parallel", f->sequence_parallel,
                "gpt: shard norms and dropout over tp (Korthikanti et al. 2022)");
  app->add_option("--recompute", f->recompute, "gpt: activation recomputation")
      ->check(OneOf({"none", "selective", "full"}));
  app->add_flag("--no-dropout", f->no_dropout, "gpt: no dropout masks (Llama presets have none)");
  app->add_option("--memory", f->memory,
                  "device memory to fit, e.g. 80GB [default: the hardware's]")
      ->default_str("");
  app->add_option("--hardware", f->hardware,
                  "a100, h100, or a hardware file (--calibrate writes one)");
  app->add_option("--algo", f->algo, "all_reduce algorithm of tp and dp")
      ->check(OneOf(train::estimator::algorithm_names()));
  app->add_option("--peak-tflops", f->peak_tflops, "override: peak TFLOP/s per device")
      ->check(Number(1e-9, 1e9))
      ->default_str("");
  app->add_option("--efficiency", f->efficiency, "override: fraction of peak the layers reach")
      ->check(Number(1e-6, 1))
      ->default_str("");
  app->add_option("--intra-gbps", f->intra_gbps, "override: GB/s per device inside a node")
      ->check(Number(1e-9, 1e9))
      ->default_str("");
  app->add_option("--inter-gbps", f->inter_gbps, "override: GB/s per device between nodes")
      ->check(Number(1e-9, 1e9))
      ->default_str("");
  app->add_option("--intra-latency-us", f->intra_latency_us, "override: alpha inside a node")
      ->check(Number(0, 1e9))
      ->default_str("");
  app->add_option("--inter-latency-us", f->inter_latency_us, "override: alpha between nodes")
      ->check(Number(0, 1e9))
      ->default_str("");
  app->add_option("--devices-per-node", f->devices_per_node, "override: devices in a node")
      ->transform(Integer(1, 1 << 20))
      ->default_str("");
  app->add_flag("--published", f->published,
                "Narayanan et al. 2021's Table 1 (Megatron-LM, up to 3072 A100s) beside the "
                "projection");
  app->add_option("--calibrate", f->calibrate,
                  "measure this machine (compute rate, all_reduce alpha and beta) into FILE")
      ->default_str("");
  app->footer(
      "example: dtsim estimate --params 7e9 --ranks 8\n"
      "         dtsim estimate --params 7e9 --dp 2 --tp 2 --pp 4 --zero 1 --micro-batches 8\n"
      "         dtsim estimate --preset llama-70b --tp 8 --pp 4 --dp 32 --zero 1 --memory 80GB\n"
      "         dtsim estimate --model gpt --layers 24 --hidden 2048 --heads 16 --seq 2048 \\\n"
      "             --vocab 50257 --micro-batch 4 --global-batch 512 --dp 16 --tp 2\n"
      "         dtsim estimate --published\n"
      "         dtsim estimate --calibrate here.hw");
  return {app, [f, app] { return run_estimate(*app, *f); }};
}

}  // namespace dtsim::cli
