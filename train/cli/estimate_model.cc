// dtsim estimate --model / --preset: parameters by layer kind, model state and activations
// per device, traffic per axis, step time and whether it fits (train/estimate/projection.h);
// --published: Narayanan et al. 2021's Table 1 beside the projection. Every number printed
// is computed; nothing here is a typed-in result.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "runtime/job_start.h"
#include "train/cli/estimate_flags.h"
#include "train/cli/flags.h"
#include "train/cli/report_json.h"
#include "train/cli/table.h"
#include "train/estimate/projection.h"
#include "train/estimate/published.h"

namespace dtsim::cli {
namespace {

namespace est = train::estimator;

std::string bytes_str(double b) {
  if (b == 0) return "0";
  if (b >= 1e12) return fmt::format("{:.4g} TB", b / 1e12);
  if (b >= 1e9) return fmt::format("{:.4g} GB", b / 1e9);
  if (b >= 1e6) return fmt::format("{:.4g} MB", b / 1e6);
  if (b >= 1e3) return fmt::format("{:.4g} kB", b / 1e3);
  return fmt::format("{:.4g} B", b);
}

std::string seconds_str(double s) {
  if (s == 0) return "0";
  if (s >= 1) return fmt::format("{:.4g} s", s);
  if (s >= 1e-3) return fmt::format("{:.4g} ms", s * 1e3);
  return fmt::format("{:.4g} us", s * 1e6);
}

std::string count_str(double n) {
  if (n >= 1e9) return fmt::format("{:.4g}B", n / 1e9);
  if (n >= 1e6) return fmt::format("{:.4g}M", n / 1e6);
  if (n >= 1e3) return fmt::format("{:.4g}k", n / 1e3);
  return fmt::format("{:.4g}", n);
}

// "80GB", "80 GB", "24GiB", "1e9": bytes, or fail().
double parse_memory(const std::string& text) {
  std::string s;
  for (char ch : text) {
    if (ch != ' ') s += ch;
  }
  size_t unit = s.find_first_not_of("0123456789.eE+-");
  const std::string number = s.substr(0, unit),
                    suffix = unit == std::string::npos ? "" : s.substr(unit);
  char* end = nullptr;
  const double v = std::strtod(number.c_str(), &end);
  const struct {
    const char* name;
    double scale;
  } kUnits[] = {{"", 1},
                {"B", 1},
                {"kB", 1e3},
                {"KB", 1e3},
                {"MB", 1e6},
                {"GB", 1e9},
                {"TB", 1e12},
                {"KiB", 1024.0},
                {"MiB", 1024.0 * 1024},
                {"GiB", 1024.0 * 1024 * 1024}};
  if (!number.empty() && *end == '\0' && v > 0) {
    for (const auto& u : kUnits) {
      if (suffix == u.name) return v * u.scale;
    }
  }
  fail("estimate", "--memory must be a size such as 80GB, 24GiB or 8e10 (got " + text + ")");
}

const char* kParamFlags[] = {"--params", "--ranks", "--stage", "--activations"};

est::ProjectionInput input_from_flags(const CLI::App& app, const EstimateFlags& f,
                                      const est::Preset** preset) {
  for (const char* flag : kParamFlags) {
    if (given(app, flag)) {
      fail("estimate", std::string(flag) +
                           " belongs to the parameter-count estimate; with --model or --preset "
                           "the architecture gives the counts (mesh: --dp, ZeRO: --zero)");
    }
  }
  est::ProjectionInput in;
  *preset = nullptr;
  std::string model = f.model.empty() ? "gpt" : f.model;
  if (!f.preset.empty()) {
    *preset = est::find_preset(f.preset);  // OneOf accepted it
    if (given(app, "--model") && model != "gpt") {
      fail("estimate", "--preset " + f.preset + " is a gpt shape; drop --model " + model);
    }
    in.arch.gpt = (*preset)->shape;
    in.global_batch = (*preset)->global_batch;
  }
  const bool gpt = model == "gpt";
  in.arch.kind = gpt              ? est::ArchKind::kGpt
                 : model == "mlp" ? est::ArchKind::kMlp
                                  : est::ArchKind::kMoe;
  for (const char* flag : {"--heads", "--kv-heads", "--ffn", "--vocab", "--seq", "--cp",
                           "--sequence-parallel", "--recompute", "--no-dropout"}) {
    if (!gpt && given(app, flag)) fail("estimate", std::string(flag) + " applies to --model gpt");
  }
  for (const char* flag : {"--dim", "--experts", "--top-k"}) {
    if (gpt && given(app, flag)) {
      fail("estimate", std::string(flag) + " applies to --model mlp or moe (gpt: --hidden)");
    }
  }
  if (gpt) {
    est::GptShape& g = in.arch.gpt;
    if (given(app, "--layers")) g.layers = f.layers;
    if (given(app, "--hidden")) g.hidden = f.hidden;
    if (given(app, "--heads")) g.heads = f.heads;
    if (given(app, "--kv-heads")) g.kv_heads = f.kv_heads;
    if (given(app, "--ffn")) g.ffn = f.ffn;
    if (given(app, "--vocab")) g.vocab = f.vocab;
    if (given(app, "--seq")) g.seq = f.seq;
    in.precision = model::Precision::kMixedBf16;
  } else if (model == "mlp") {  // dtsim train's shapes and defaults
    in.arch.mlp = {.input_dim = f.dim,
                   .hidden_dim = given(app, "--hidden") ? f.hidden : 64,
                   .num_blocks = given(app, "--layers") ? f.layers : 2,
                   .output_dim = 4};
  } else {
    in.arch.moe.input_dim = f.dim;
    in.arch.moe.num_classes = 4;
    in.arch.moe.moe.d_model = f.dim;
    in.arch.moe.moe.d_ff = given(app, "--hidden") ? f.hidden : 32;
    in.arch.moe.moe.num_experts = f.experts;
    in.arch.moe.moe.top_k = f.top_k;
    in.arch.moe.num_blocks = given(app, "--layers") ? f.layers : 1;
  }
  in.dp = f.dp, in.tp = f.tp, in.pp = f.pp, in.ep = f.ep, in.cp = f.cp, in.zero = f.zero;
  train::pipeline::parse_schedule(f.schedule, &in.schedule);  // OneOf accepted it
  in.virtual_stages = f.virtual_stages;
  in.sequence_parallel = f.sequence_parallel;
  in.recompute = f.recompute == "full"        ? est::Recompute::kFull
                 : f.recompute == "selective" ? est::Recompute::kSelective
                                              : est::Recompute::kNone;
  in.dropout = !f.no_dropout && !(*preset != nullptr && in.arch.gpt.llama);
  in.micro_batch = f.micro_batch;
  if (given(app, "--global-batch")) {
    in.global_batch = f.global_batch;
    // mlp, moe: as dtsim train, B / (dp m) samples a micro-batch unless --micro-batch says.
    const int per_micro = f.dp * f.micro_batches;
    if (!gpt && !given(app, "--micro-batch") && f.global_batch % per_micro == 0) {
      in.micro_batch = f.global_batch / per_micro;
    }
  } else if (in.global_batch == 0 || given(app, "--micro-batches")) {
    in.global_batch = f.dp * f.micro_batch * f.micro_batches;
  }
  if (given(app, "--precision")) {
    in.precision = f.precision == "bf16" ? model::Precision::kMixedBf16 : model::Precision::kFp32;
  } else if (!gpt) {
    in.precision = model::Precision::kFp32;  // dtsim train's default
  }
  in.optimizer = f.optimizer == "adam" ? model::OptimizerKind::kAdam : model::OptimizerKind::kSgd;
  if (!gpt && !given(app, "--optimizer")) in.optimizer = model::OptimizerKind::kSgd;
  est::parse_algorithm(f.algo, &in.all_reduce);  // OneOf accepted it
  in.hw = hardware_from_flags(app, f);
  if (const std::string why = est::validate(in); !why.empty()) fail("estimate", why);
  return in;
}

const char* arch_name(est::ArchKind k) {
  return k == est::ArchKind::kGpt ? "gpt" : k == est::ArchKind::kMlp ? "mlp" : "moe";
}

std::string shape_line(const est::Architecture& a) {
  if (a.kind == est::ArchKind::kMlp) {
    return fmt::format("mlp D {} H {} L {}", a.mlp.input_dim, a.mlp.hidden_dim, a.mlp.num_blocks);
  }
  if (a.kind == est::ArchKind::kMoe) {
    const model::MoeConfig& m = a.moe.moe;
    return fmt::format("moe D {} F {} E {} top-{} L {}", m.d_model, m.d_ff, m.num_experts, m.top_k,
                       a.moe.num_blocks);
  }
  const est::GptShape& g = a.gpt;
  return fmt::format("gpt L {} h {} a {}{} f {} V {} s {}{}", g.layers, g.hidden, g.heads,
                     g.kv_heads > 0 ? fmt::format(" (kv {})", g.kv_heads) : "", g.ffn_width(),
                     g.vocab, g.seq, g.llama ? ", Llama conventions" : "");
}

void print_params(const est::ParamCounts& p) {
  Table t(
      {"embedding", "attention", "mlp/experts", "router", "norms", "output", "total", "per layer"},
      std::vector<bool>(8, true));
  t.add({count_str(p.embedding), count_str(p.attention), count_str(p.mlp), count_str(p.router),
         count_str(p.norms), count_str(p.output), count_str(p.total()), count_str(p.per_layer)});
  t.print(stdout, "  ");
}

void print_traffic(const est::Projection& p) {
  Table t({"axis", "collective", "algorithm", "group", "link", "calls", "bytes each", "sent/step",
           "time/step"},
          {false, false, false, true, false, true, true, true, true});
  for (const est::AxisTraffic& x : p.traffic) {
    t.add({x.axis, est::to_string(x.kind), est::to_string(x.algorithm), std::to_string(x.group),
           x.inter ? "inter-node" : "intra-node", fmt::format("{:.4g}", x.calls),
           bytes_str(x.bytes), bytes_str(x.sent), seconds_str(x.seconds)});
  }
  if (p.traffic.empty()) {
    std::printf("  none (one device per model replica and dp 1)\n");
  } else {
    t.print(stdout, "  ");
  }
}

}  // namespace

int run_model_estimate(const CLI::App& app, const EstimateFlags& f) {
  const est::Preset* preset = nullptr;
  const est::ProjectionInput in = input_from_flags(app, f, &preset);
  const double memory = given(app, "--memory") ? parse_memory(f.memory) : in.hw.memory_bytes;
  begin_work();
  const est::Projection p = est::project(in);

  std::printf("dtsim estimate: %s%s\n", preset ? preset->name : arch_name(in.arch.kind),
              preset ? fmt::format(" ({})", shape_line(in.arch)).c_str()
                     : fmt::format(": {}", shape_line(in.arch).substr(4)).c_str());
  if (preset) std::printf("  source: %s\n", preset->source);
  std::printf(
      "mesh: dp %d x tp %d x pp %d%s%s = %d devices, ZeRO-%d; %s; micro-batch %d, global batch "
      "%d (%d micro-batches a step)\n",
      in.dp, in.tp, in.pp, in.cp > 1 ? fmt::format(" x cp {}", in.cp).c_str() : "",
      in.ep > 1 ? fmt::format(" (ep {} inside dp)", in.ep).c_str() : "", p.devices, in.zero,
      in.precision == model::Precision::kMixedBf16 ? "bf16 mixed precision" : "fp32",
      in.micro_batch, in.global_batch, p.micro_batches);
  std::printf("hardware: %s, %.4g TFLOP/s peak x %.3g efficiency, %d a node; %s\n",
              in.hw.name.c_str(), in.hw.peak_flops / 1e12, in.hw.efficiency, in.hw.devices_per_node,
              in.hw.source.c_str());

  std::printf("\nparameters by layer kind (%s total):\n", count_str(p.params.total()).c_str());
  print_params(p.params);

  const model::MemoryCategory kCats[] = {
      model::MemoryCategory::kWeights, model::MemoryCategory::kGradients,
      model::MemoryCategory::kMasterWeights, model::MemoryCategory::kAdamM,
      model::MemoryCategory::kAdamV};
  std::printf(
      "\nmodel state per device: %s params, ZeRO-%d over dp %d%s, %s%s\n",
      count_str(p.params_per_device).c_str(), in.zero, in.dp,
      in.cp > 1 ? fmt::format(" x cp {}", in.cp).c_str() : "", optimizer_name(in.optimizer),
      in.arch.kind == est::ArchKind::kGpt ? "" : " (the largest device's, from the placements)");
  std::vector<std::string> header, row;
  for (model::MemoryCategory c : kCats) {
    header.push_back(category_short_name(static_cast<int>(c)));
    row.push_back(bytes_str(p.mesh.state.bytes[static_cast<int>(c)]));
  }
  header.push_back("total");
  row.push_back(bytes_str(p.mesh.state.static_bytes));
  Table st(header, std::vector<bool>(header.size(), true));
  st.add(row);
  st.print(stdout, "  ");

  const char* recompute = in.recompute == est::Recompute::kFull        ? "full recomputation"
                          : in.recompute == est::Recompute::kSelective ? "selective recomputation"
                                                                       : "no recomputation";
  const bool gpt = in.arch.kind == est::ArchKind::kGpt;
  const bool fp32_gpt = gpt && in.precision == model::Precision::kFp32;
  std::printf("\nactivations: %s per micro-batch through the model on one tp rank (%s; %s%s)\n",
              bytes_str(p.micro_batch_activations).c_str(),
              fp32_gpt ? "dtsim's fp32 GPT"
              : gpt    ? "Korthikanti et al. 2022"
                       : "the buffers dtsim's layers allocate",
              recompute, in.sequence_parallel ? ", sequence parallel" : "");
  const est::ActivationInput ai{
      in.tp, in.sequence_parallel, in.recompute, in.micro_batch, in.dropout, in.cp, in.precision};
  if (fp32_gpt) {  // activations.h: Korthikanti et al.'s tensors in fp32, as dtsim saves them
    const est::GptFp32Activations d = est::dtsim_gpt_activations(in.arch.gpt, ai);
    std::printf("  %d layers x %s; once %s (ids, logits, loss); scratch %s%s\n", in.arch.gpt.layers,
                bytes_str(d.layer).c_str(), bytes_str(d.once).c_str(),
                bytes_str(d.workspace).c_str(),
                in.cp > 1 ? fmt::format(", ring {}", bytes_str(d.ring)).c_str() : "");
  } else if (gpt) {
    const est::LayerActivations l = est::gpt_layer_activations(in.arch.gpt, ai);
    std::printf("  one layer: %s (tp-sharded %s, replicated %s, attention scores %s)\n",
                bytes_str(l.total()).c_str(), bytes_str(l.tp_sharded).c_str(),
                bytes_str(l.replicated).c_str(), bytes_str(l.scores).c_str());
  }
  std::printf("  pipeline %s: bubble %.1f%% (%s)\n", train::pipeline::info(in.schedule).title,
              100 * p.mesh.bubble.value(),
              p.mesh.dry_run ? "schedule's dry run" : "formula; too large to dry-run");
  int worst = 0;
  for (int r = 0; r < in.pp; ++r) {
    if (p.mesh.activation_bytes[r] > p.mesh.activation_bytes[worst]) worst = r;
  }
  std::printf("  largest stage %d holds %d micro-batch%s%s = %s\n", worst, p.mesh.held[worst],
              in.virtual_stages > 1 ? " chunks" : "", p.mesh.held[worst] == 1 ? "" : "es",
              bytes_str(p.activation_peak).c_str());

  std::printf("\nmemory per device: %s state + %s activations = %s",
              bytes_str(p.mesh.state.static_bytes).c_str(), bytes_str(p.activation_peak).c_str(),
              bytes_str(p.device_bytes).c_str());
  if (memory > 0) {
    std::printf("; %s %s\n", p.device_bytes <= memory ? "FITS in" : "DOES NOT FIT in",
                bytes_str(memory).c_str());
    const int best = est::largest_micro_batch(in, memory);
    if (best > 0) {
      std::printf("largest micro-batch that fits: %d\n", best);
    } else {
      std::printf("no micro-batch fits: add tp, pp or ZeRO, or recompute\n");
    }
  } else {
    std::printf(" (give --memory to check a fit)\n");
  }

  std::printf("\nbytes per step per device, by axis and collective:\n");
  print_traffic(p);

  std::printf("\nstep time: %s\n", seconds_str(p.step).c_str());
  Table tt({"compute", "tp", "cp", "ep", "pp", "bubble", "dp", "step"}, std::vector<bool>(8, true));
  tt.add({seconds_str(p.compute), seconds_str(p.exposed_seconds("tp")),
          seconds_str(p.exposed_seconds("cp")), seconds_str(p.exposed_seconds("ep")),
          seconds_str(p.exposed_seconds("pp")), seconds_str(p.bubble),
          seconds_str(p.exposed_seconds("dp")), seconds_str(p.step)});
  tt.print(stdout, "  ");
  std::printf("%s/s %.4g, MFU %.1f%%, HFU %.1f%%, %.4g TFLOP/s per device%s\n",
              in.arch.kind == est::ArchKind::kGpt ? "tokens" : "samples", p.tokens_per_second,
              100 * p.mfu, 100 * p.hfu, p.tflops_per_device,
              in.recompute == est::Recompute::kNone ? "" : " (recomputed FLOPs counted)");
  return 0;
}

int run_published(const CLI::App& app, const EstimateFlags& f) {
  const est::Hardware hw = hardware_from_flags(app, f);
  begin_work();
  std::printf(
      "Narayanan et al. 2021 (arXiv 2104.04473) Table 1 beside the projection: GPT, V 51200, "
      "s 2048,\n1F1B, full recomputation, micro-batch 1, on %s (%.4g TFLOP/s x %.3g, NVLink %.4g "
      "GB/s, IB %.4g GB/s per GPU)\n\n",
      hw.name.c_str(), hw.peak_flops / 1e12, hw.efficiency, hw.intra.bandwidth / 1e9,
      hw.inter.bandwidth / 1e9);
  Table t({"params", "layers", "hidden", "heads", "tp", "pp", "dp", "GPUs", "batch", "bubble",
           "published", "projected", "error"},
          std::vector<bool>(13, true));
  double worst = 0;
  for (const est::PublishedRun& run : est::narayanan_2021_table1()) {
    const est::ProjectionInput in = est::published_input(run, hw);
    const est::Projection p = est::project(in);
    const double err = p.tflops_per_device / run.tflops_per_gpu - 1;
    worst = std::max(worst, std::abs(err));
    t.add({fmt::format("{}B", run.billions), std::to_string(run.layers), std::to_string(run.hidden),
           std::to_string(run.heads), std::to_string(run.tp), std::to_string(run.pp),
           std::to_string(in.dp), std::to_string(run.gpus), std::to_string(run.batch),
           fmt::format("{:.1f}%", 100 * p.mesh.bubble.value()),
           fmt::format("{:.0f}", run.tflops_per_gpu), fmt::format("{:.0f}", p.tflops_per_device),
           fmt::format("{:+.1f}%", 100 * err)});
  }
  t.print(stdout, "  ");
  std::printf("\nTFLOP/s per GPU as the paper counts (its equation 3); worst error %.1f%%\n",
              100 * worst);
  return 0;
}

}  // namespace dtsim::cli
