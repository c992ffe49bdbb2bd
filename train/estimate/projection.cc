#include "train/estimate/projection.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

#include "model/parallel.h"
#include "train/config.h"
#include "train/pipeline_parallel/schedule_check.h"
#include "train/placement_plan.h"

namespace dtsim::train::estimator {
namespace {

// A quantity measured with `cores`, 2 x and 4 x `cores` devices sharing the cores (`at`), for
// `devices` of them: `one` for one device, prorated up to `cores`; beyond, the devices sync
// every step, so the core holding the most of them (ceil(devices / cores)) sets the pace:
// that many a core as measured with 2 and 4 a core, prorated between, in proportion beyond.
double at_devices(int cores, int devices, double one, std::array<double, 3> at) {
  if (devices <= 1) return one;
  if (devices <= cores) return one + (at[0] - one) * (devices - 1) / std::max(1, cores - 1);
  const int per_core = (devices + cores - 1) / cores;
  if (per_core <= 2) return at[1];
  if (per_core <= 4) return at[1] + (at[2] - at[1]) * (per_core - 2) / 2.0;
  return at[2] * per_core / 4.0;
}

// How many times a device's one-core time it takes when `devices` share `hw.cores` cores
// (Hardware::parallel_speedup and the slowdowns); 1 when they do not share. A lone device
// runs the `split` share of its compute (splittable_share) on every core.
double shared_cores_factor(const Hardware& hw, int devices, double split) {
  if (hw.cores <= 0) return 1;
  if (devices == 1) {
    const double speedup = hw.parallel_speedup > 1 ? hw.parallel_speedup : 1;
    return 1 - split + split / speedup;
  }
  const double shared = hw.shared_slowdown > 0 ? hw.shared_slowdown : 1;
  const double over = hw.oversubscribed_slowdown > 0 ? hw.oversubscribed_slowdown : 2 * shared;
  const double crowded = hw.crowded_slowdown > 0 ? hw.crowded_slowdown : 2 * over;
  return at_devices(hw.cores, devices, 1, {shared, over, crowded});
}

// A calibrated file's seconds per byte of a step's gradient all_reduce among `devices`
// sharing the cores (Hardware::shared_sync_seconds); 0 when not calibrated.
double sync_byte_seconds(const Hardware& hw, int devices) {
  if (hw.cores <= 0 || hw.shared_sync_seconds <= 0) return 0;
  return at_devices(
      hw.cores, devices, 0,
      {hw.shared_sync_seconds, hw.oversubscribed_sync_seconds, hw.crowded_sync_seconds});
}

struct Ctx {
  const ProjectionInput& in;
  int devices = 1;
  // The link a group spanning `span` ranks uses (the shared buffer for Algorithm::kShared);
  // on shared cores, beyond them, its copies are time-sliced (bandwidth cores / devices) and
  // each message waits for a peer's turn.
  Link link(int span, Algorithm algo) const {
    Link l = algo == Algorithm::kShared       ? Link{in.hw.shared_latency, in.hw.shared_bandwidth}
             : span <= in.hw.devices_per_node ? in.hw.intra
                                              : in.hw.inter;
    if (in.hw.cores > 0 && devices > in.hw.cores) {
      l.bandwidth *= double(in.hw.cores) / devices;
      l.latency = std::max(l.latency, in.hw.oversubscribed_latency);
    }
    return l;
  }
};

// Adds `calls` collectives of `bytes` each over `group` ranks whose ranks span `span`.
void add(Projection& p, const Ctx& c, const char* axis, CollectiveKind kind, Algorithm algo,
         int group, int span, double calls, double bytes) {
  if (group <= 1 || calls == 0) return;
  if (kind == CollectiveKind::kAllReduce && c.in.hw.shared_bandwidth > 0) {
    algo = bytes <= kSmallAllReduce ? Algorithm::kRecursiveDoubling : Algorithm::kShared;
  }
  AxisTraffic t{axis, kind, algo, group, span > c.in.hw.devices_per_node, calls, bytes};
  t.sent = calls * collective_bytes_sent(kind, algo, group, bytes);
  t.seconds = calls * collective_seconds(kind, algo, group, bytes, c.link(span, algo));
  p.traffic.push_back(t);
}

// dtsim's mlp or moe model as `dtsim train` would run it on the projection's mesh.
TrainConfig train_config(const ProjectionInput& in, int micro_batches) {
  TrainConfig c;
  c.strategy = Strategy::kMesh;
  c.model = in.arch.kind == ArchKind::kMlp ? ModelKind::kMlp : ModelKind::kMoe;
  c.mlp = in.arch.mlp;
  c.moe = in.arch.moe;
  c.widths.dp = in.dp, c.widths.tp = in.tp, c.widths.pp = in.pp, c.widths.ep = in.ep,
  c.zero = in.zero;
  c.ranks = in.dp * in.tp * in.pp;
  c.precision = in.precision;
  c.optimizer = in.optimizer;
  c.schedule = in.schedule;
  c.virtual_stages = in.virtual_stages;
  c.micro_batches = micro_batches;
  c.global_batch = in.global_batch;
  return c;
}

// The model state of the device that holds the most, from the placements (each ZeRO shard
// the largest of its group: exact to one element per part).
StateElements largest_device(const ProjectionInput& in, int micro_batches) {
  const ModelPlacement placement(train_config(in, micro_batches));
  StateElements worst;
  int64_t most = -1;
  for (int s = 0; s < in.pp; ++s) {
    for (int t = 0; t < in.tp; ++t) {
      for (int e = 0; e < in.ep; ++e) {
        const StateElements el =
            placement.elements({.dp = e, .tp = t, .pp = s, .ep = e, .ep_group = 0}, true);
        int64_t bytes = 0;
        for (int64_t b : state_bytes(el, in.precision, in.optimizer)) bytes += b;
        if (bytes > most) most = bytes, worst = el;
      }
    }
  }
  return worst;
}

}  // namespace

double forward_elements(const Architecture& a, int samples, int tp, int cp) {
  const double b = samples;
  if (a.kind == ArchKind::kMlp) {
    const double d = a.mlp.input_dim, h = a.mlp.hidden_dim;
    return b * (a.mlp.num_blocks * (2 * d + h / tp) + a.mlp.output_dim);
  }
  if (a.kind == ArchKind::kMoe) {
    const model::MoeConfig& m = a.moe.moe;
    const double d = m.d_model;
    return b * (a.moe.num_blocks * (d + m.num_experts + m.top_k * (2 * d + m.d_ff)) +
                a.moe.num_classes);
  }
  const GptShape& g = a.gpt;
  const double layer =
      gpt_layer_activations(g, {tp, false, Recompute::kNone, samples, false}).total() / 2;
  return (g.layers * layer + b * g.seq * double(g.vocab) / tp) / cp;
}

double element_seconds(const Hardware& hw, ArchKind kind) {
  const double own = kind == ArchKind::kMoe   ? hw.moe_element_seconds
                     : kind == ArchKind::kGpt ? hw.gpt_element_seconds
                                              : 0;
  return own > 0 ? own : hw.element_seconds;
}

double ring_attention_blocks(const Architecture& a, int samples, int tp, int cp,
                             Recompute recompute) {
  if (a.kind != ArchKind::kGpt || cp <= 1) return 0;
  const double passes = 2 + (recompute != Recompute::kNone ? 1 : 0);
  return double(samples) * a.gpt.heads / tp * a.gpt.layers * passes * (2 * cp + 1);
}

double splittable_share(const Architecture& a, int samples, int tp) {
  double total = 0, split = 0;
  // A linear layer of (rows, in, out): its forward cut along out, its input gradient along
  // in, its weight gradient along the larger side (model/linear_kernels.cc), each split
  // when gemm_slice_width leaves two slices or more.
  auto linear = [&](double rows, double in, double out, double count) {
    const double macs = rows * in * out;
    const auto work = static_cast<int64_t>(macs);
    for (const double dim : {out, in, std::max(in, out)}) {
      const int d = static_cast<int>(dim);
      total += count * macs;
      if (d > model::gemm_slice_width(d, work)) split += count * macs;
    }
  };
  const double b = samples;
  if (a.kind == ArchKind::kMlp) {
    const double d = a.mlp.input_dim, h = double(a.mlp.hidden_dim) / tp;
    linear(b, d, h, a.mlp.num_blocks);
    linear(b, h, d, a.mlp.num_blocks);
    linear(b, d, a.mlp.output_dim, 1);
  } else if (a.kind == ArchKind::kMoe) {
    const model::MoeConfig& m = a.moe.moe;
    const double tokens = b * m.top_k / m.num_experts, layers = a.moe.num_blocks;
    linear(tokens, m.d_model, m.d_ff, m.num_experts * layers);
    linear(tokens, m.d_ff, m.d_model, m.num_experts * layers);
    linear(b, m.d_model, m.num_experts, layers);
    linear(b, a.moe.input_dim, m.d_model, 1);
    linear(b, m.d_model, a.moe.num_classes, 1);
  } else {
    const GptShape& g = a.gpt;
    const double t = b * g.seq, h = g.hidden;
    linear(t, h, 3 * h / tp, g.layers);
    linear(t, h / tp, h, g.layers);
    linear(t, h, g.ffn_width() / tp, g.layers);
    linear(t, g.ffn_width() / tp, h, g.layers);
    linear(t, h, g.vocab / tp, 1);
  }
  return total > 0 ? split / total : 0;
}

int layer_count(const Architecture& a) {
  return a.kind == ArchKind::kGpt   ? a.gpt.layers
         : a.kind == ArchKind::kMoe ? a.moe.num_blocks
                                    : a.mlp.num_blocks;
}

std::string validate(const ProjectionInput& in) {
  const Architecture& a = in.arch;
  const bool gpt = a.kind == ArchKind::kGpt, moe = a.kind == ArchKind::kMoe;
  const int layers = gpt ? a.gpt.layers : moe ? a.moe.num_blocks : a.mlp.num_blocks;
  if (gpt && (a.gpt.layers < 1 || a.gpt.hidden < 1 || a.gpt.heads < 1 || a.gpt.vocab < 1 ||
              a.gpt.seq < 1)) {
    return "--model gpt needs --layers, --hidden, --heads, --vocab and --seq (or --preset)";
  }
  if (gpt && a.gpt.hidden % a.gpt.heads != 0) {
    return fmt::format("--hidden {} is not a multiple of --heads {}", a.gpt.hidden, a.gpt.heads);
  }
  if (gpt && a.gpt.kv_heads == 0 && a.gpt.heads % in.tp != 0) {
    return fmt::format("--heads {} is not a multiple of --tp {}", a.gpt.heads, in.tp);
  }
  if (gpt && (a.gpt.heads % a.gpt.kv() != 0 || a.gpt.kv() % in.tp != 0)) {
    return fmt::format("--kv-heads {} must divide --heads {} and be a multiple of --tp {}",
                       a.gpt.kv(), a.gpt.heads, in.tp);
  }
  if (gpt && a.gpt.seq % in.cp != 0) {
    return fmt::format("--seq {} is not a multiple of --cp {}", a.gpt.seq, in.cp);
  }
  if (!gpt && in.cp > 1) return "--cp splits a sequence: it needs --model gpt";
  if (!gpt && (in.sequence_parallel || in.recompute != Recompute::kNone)) {
    return "--sequence-parallel and --recompute follow Korthikanti et al.: they need --model gpt";
  }
  if (a.kind == ArchKind::kMlp && a.mlp.hidden_dim % in.tp != 0) {
    return fmt::format("--hidden {} is not a multiple of --tp {}", a.mlp.hidden_dim, in.tp);
  }
  if (moe && in.tp > 1) return "--model moe shards experts with --ep, not --tp";
  if (in.ep > 1 && !moe) return "--ep shards experts: it needs --model moe";
  if (moe && (in.dp % in.ep != 0 || a.moe.moe.num_experts % in.ep != 0)) {
    return fmt::format("--ep {} must divide --dp {} and --experts {}", in.ep, in.dp,
                       a.moe.moe.num_experts);
  }
  if (layers % (in.pp * in.virtual_stages) != 0) {
    return fmt::format("--layers {} is not a multiple of --pp {} x --virtual-stages {}", layers,
                       in.pp, in.virtual_stages);
  }
  if (in.global_batch % (in.dp * in.micro_batch) != 0) {
    return fmt::format("--global-batch {} is not a multiple of --dp {} x --micro-batch {}",
                       in.global_batch, in.dp, in.micro_batch);
  }
  pipeline::ScheduleSpec spec{in.schedule, in.pp, in.global_batch / (in.dp * in.micro_batch),
                              in.virtual_stages};
  if (std::string why = pipeline::validate(spec); !why.empty()) return why;
  if (!(in.hw.peak_flops > 0 && in.hw.efficiency > 0 && in.hw.intra.bandwidth > 0 &&
        in.hw.inter.bandwidth > 0)) {
    return "the hardware needs a positive peak, efficiency and bandwidths";
  }
  return "";
}

double Projection::exposed_seconds(const std::string& axis) const {
  double s = 0;
  for (const AxisTraffic& t : traffic) {
    if (t.axis == axis) s += t.seconds;
  }
  return s;
}

Projection project(const ProjectionInput& in) {
  const Architecture& a = in.arch;
  const bool gpt = a.kind == ArchKind::kGpt, moe = a.kind == ArchKind::kMoe;
  Projection p;
  p.params = count_params(a);
  p.micro_batches = in.global_batch / (in.dp * in.micro_batch);
  const double seq = gpt ? a.gpt.seq : 1;
  const int m = p.micro_batches;

  // Model state: gpt's from the formula (Psi / (tp pp)); mlp and moe, dtsim's own models,
  // from their placements below.
  MeshEstimateInput mi;
  mi.params = p.params.total();
  mi.dp = in.dp * in.cp;  // the cp ranks of a replica hold the same weights: dp x cp replicas
  mi.tp = in.tp;
  mi.zero_stage = in.zero;
  mi.precision = in.precision;
  mi.optimizer = in.optimizer;
  mi.schedule = {in.schedule, in.pp, m, in.virtual_stages};
  ActivationInput ai{in.tp, in.sequence_parallel, in.recompute, in.micro_batch, in.dropout,
                     in.cp, in.precision};
  p.micro_batch_activations = micro_batch_activations(a, ai);
  mi.activation_bytes = p.micro_batch_activations;
  p.mesh = estimate_mesh(mi);
  if (!gpt) {
    const StateElements e = largest_device(in, m);
    p.mesh.state = estimate_from_elements(e, in.dp, in.zero, in.precision, in.optimizer);
    p.mesh.params_per_device = static_cast<double>(e.params);
  }
  p.params_per_device = p.mesh.params_per_device;
  p.devices = p.mesh.devices;
  p.activation_peak =
      *std::max_element(p.mesh.activation_bytes.begin(), p.mesh.activation_bytes.end());
  p.device_bytes = p.mesh.state.static_bytes + p.activation_peak;
  const Ctx c{in, p.devices};

  // Compute of one micro-batch on one device.
  const Flops f = forward_flops(a, in.micro_batch * seq);
  double recomputed = 0;
  if (in.recompute == Recompute::kFull) recomputed = f.layers;
  if (in.recompute == Recompute::kSelective) recomputed = f.attention_scores;
  const double model_parallel = double(in.tp) * in.pp * in.cp;
  const double slow =
      shared_cores_factor(in.hw, p.devices, splittable_share(a, in.micro_batch, in.tp));
  p.sharing = slow;
  const double rate = in.hw.peak_flops * in.hw.efficiency / slow;
  const int stage_layers = layer_count(a) / in.pp;
  // A calibrated file's element-wise and per-layer costs of one micro-batch on this stage.
  const double t_overhead =
      slow *
      (element_seconds(in.hw, a.kind) * forward_elements(a, in.micro_batch, in.tp, in.cp) / in.pp +
       in.hw.layer_seconds * stage_layers +
       in.hw.ring_block_seconds *
           ring_attention_blocks(a, in.micro_batch, in.tp, in.cp, in.recompute) / in.pp);
  double t_memory = 0;
  if (gpt && in.hw.memory_bandwidth > 0) {
    const double layer =
        gpt_layer_activations(
            a.gpt, {in.tp, in.sequence_parallel, Recompute::kNone, in.micro_batch, in.dropout})
            .total();
    const double traffic =
        kActivationTraffic + (in.recompute == Recompute::kFull ? kRecomputeTraffic : 0);
    t_memory = traffic * layer / in.cp * (double(a.gpt.layers) / in.pp) / in.hw.memory_bandwidth;
  }
  // Expert FFNs of the tokens a device's experts take (b k of them a layer, on average).
  double t_experts = 0;  // one micro-batch's
  if (moe && in.ep > 1) {
    const model::MoeConfig& e = a.moe.moe;
    t_experts = 3 * 2.0 * in.micro_batch * e.top_k * 2.0 * e.d_ff * e.d_model * stage_layers / rate;
  }
  p.expert_compute = m * t_experts;
  const double imbalance = in.hw.cores > 0 && p.devices > in.hw.cores ? in.hw.expert_imbalance : 0;
  const double t_compute = (3 * f.total() + recomputed) / model_parallel / rate + t_memory +
                           t_overhead + imbalance * t_experts;

  // Per micro-batch collectives (on the pipeline's critical path).
  // bf16 activations on a GPU (mixed precision); fp32 ones as dtsim trains them.
  const double act_elem = gpt && in.precision != model::Precision::kFp32 ? 2 : 4;
  const double hidden = gpt ? a.gpt.hidden : moe ? a.moe.moe.d_model : a.mlp.input_dim;
  const double tokens = in.micro_batch * seq / in.cp;
  const double act = tokens * hidden * act_elem;  // one layer's (b, s, h) activations
  Projection per_micro;                           // traffic of one micro-batch
  if (in.tp > 1) {
    // gpt: 2 in forward (attention, MLP), 2 in backward, 2 more when the forward is redone.
    const double per_pass = gpt ? 2 : 1;
    const double passes = 2 + (in.recompute == Recompute::kFull ? 1 : 0);
    const double calls = per_pass * passes * stage_layers;
    if (in.sequence_parallel) {
      add(per_micro, c, "tp", CollectiveKind::kAllGather, Algorithm::kRing, in.tp, in.tp, calls,
          act);
      add(per_micro, c, "tp", CollectiveKind::kReduceScatter, Algorithm::kRing, in.tp, in.tp, calls,
          act);
    } else {
      add(per_micro, c, "tp", CollectiveKind::kAllReduce, in.all_reduce, in.tp, in.tp, calls, act);
    }
  }
  if (in.cp > 1) {
    // Ring attention (model/ring_attention.h; Megatron-LM's p2p context parallelism): each
    // layer passes its K/V chunk cp - 1 times forward (again when recomputation redoes the
    // attention, selective or full), and in backward the K/V chunk and its gradients'
    // partial cp - 1 times each.
    const double chunk = tokens * 2.0 * a.gpt.kv() * (a.gpt.hidden / a.gpt.heads) / in.tp;
    const double passes = 1 + (in.recompute != Recompute::kNone ? 1 : 0) + 2;
    add(per_micro, c, "cp", CollectiveKind::kSendRecv, Algorithm::kDirect, 2, in.tp * in.cp,
        passes * (in.cp - 1) * stage_layers, chunk * act_elem);
  }
  if (in.ep > 1) {  // dispatch and combine, forward and backward, of the k copies of a token
    const double buf = tokens * a.moe.moe.top_k * hidden * act_elem;
    add(per_micro, c, "ep", CollectiveKind::kAllToAll, Algorithm::kDirect, in.ep,
        in.tp * in.cp * in.ep, 4.0 * stage_layers, buf);
  }
  if (in.pp > 1) {  // activations forward, their gradients back (scattered over tp)
    const int span = in.tp * in.cp * in.dp * in.pp;
    const double boundary = act / in.tp;
    add(per_micro, c, "pp", CollectiveKind::kSendRecv, Algorithm::kDirect, 2, span,
        2.0 * in.virtual_stages, boundary);
  }
  double t_comm_micro = 0;
  for (AxisTraffic t : per_micro.traffic) {
    t_comm_micro += t.seconds;
    t.calls *= m;
    t.sent *= m;
    t.seconds *= m;
    p.traffic.push_back(t);
  }
  const double busy = m * (t_compute + t_comm_micro);
  const double bubble = p.mesh.bubble.value();
  const double t_pipe = busy / (1 - bubble);
  // Once a step: the parameter pass (gradients, optimizer) and the step's fixed cost.
  const double t_once = slow * (in.hw.param_seconds * p.params_per_device + in.hw.step_seconds);
  p.compute = m * t_compute + t_once;
  p.memory_bound = m * t_memory;
  p.bubble = t_pipe - busy;

  // The data-parallel sync of the device's slice (train/estimate.h's traffic by stage), over
  // the dp x cp ranks that hold the same weights (Mesh::dp_cp; Megatron-LM's dp-cp group).
  const int replicas = in.dp * in.cp;
  if (replicas > 1) {
    const double g = p.mesh.state.gradient_bytes, w = p.mesh.state.parameter_bytes;
    const int span = in.tp * in.cp * in.dp;
    if (in.zero == 0) {
      add(p, c, "dp", CollectiveKind::kAllReduce, in.all_reduce, replicas, span, 1, g);
      const double per_byte = sync_byte_seconds(in.hw, p.devices);
      if (per_byte > 0) p.traffic.back().seconds = g * per_byte;  // as training steps showed
    } else {
      // ZeRO-3 gathers each layer before its forward and its backward and reduce-scatters
      // its gradients after the backward, every micro-batch; stages 1 and 2 once a step.
      const double segments = in.zero == 3 ? double(m) * (layer_count(a) + 1) : 1;
      add(p, c, "dp", CollectiveKind::kReduceScatter, Algorithm::kRing, replicas, span, segments,
          g / (in.zero == 3 ? layer_count(a) + 1 : 1));
      add(p, c, "dp", CollectiveKind::kAllGather, Algorithm::kRing, replicas, span,
          (in.zero == 3 ? 2 : 1) * segments, w / (in.zero == 3 ? layer_count(a) + 1 : 1));
    }
  }
  p.step = t_pipe + t_once + p.exposed_seconds("dp");

  const Flops step_flops = forward_flops(a, double(in.global_batch) * seq);
  p.model_flops = 3 * step_flops.total();
  p.hardware_flops =
      p.model_flops + (in.recompute == Recompute::kFull        ? step_flops.layers
                       : in.recompute == Recompute::kSelective ? step_flops.attention_scores
                                                               : 0);
  p.tokens_per_second = in.global_batch * seq / p.step;
  p.mfu = p.model_flops / (p.step * p.devices * in.hw.peak_flops);
  p.hfu = p.hardware_flops / (p.step * p.devices * in.hw.peak_flops);
  p.tflops_per_device = p.hardware_flops / (p.step * p.devices) / 1e12;
  return p;
}

int largest_micro_batch(ProjectionInput in, double memory) {
  const int per_replica = in.global_batch / in.dp;
  std::vector<int> divisors;  // of B / dp, found up to its square root
  for (int d = 1; int64_t{d} * d <= per_replica; ++d) {
    if (per_replica % d != 0) continue;
    divisors.push_back(d);
    if (d != per_replica / d) divisors.push_back(per_replica / d);
  }
  std::sort(divisors.begin(), divisors.end());
  int best = 0;
  for (int b : divisors) {
    in.micro_batch = b;
    if (!validate(in).empty()) continue;
    if (project(in).device_bytes > memory) break;  // activations grow with b
    best = b;
  }
  return best;
}

}  // namespace dtsim::train::estimator
