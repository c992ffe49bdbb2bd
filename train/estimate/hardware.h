// A device and its links as data: peak compute, the fraction of it the layers reach, and an
// alpha-beta cost (latency, bandwidth per device and direction) for links inside a node and
// between nodes. Presets name their sources; every field can be overridden by a flag or read
// from a hardware file (JSON) that `dtsim estimate --calibrate` writes.
#pragma once

#include <string>
#include <vector>

namespace dtsim::train::estimator {

struct Link {
  double latency = 0;    // alpha, seconds per message
  double bandwidth = 0;  // 1 / beta, bytes per second one device sends in one direction
};

// dtsim's runtime reduces an all_reduce of more bytes than this in one shared buffer
// (runtime/algorithms/registry.cc, Algo::kAuto); up to it, by recursive doubling.
inline constexpr double kSmallAllReduce = 32 * 1024;

struct Hardware {
  std::string name;
  std::string source;
  double peak_flops = 0;     // per device, dense (bf16 on a GPU)
  double efficiency = 1;     // fraction of peak_flops the layers' kernels reach
  int devices_per_node = 1;  // a group within one node uses `intra`, else `inter`
  Link intra, inter;
  double memory_bytes = 0;  // per device
  // Bytes per second of device memory, for the element-wise work around the GEMMs (norms,
  // softmax, dropout, activation functions: memory-bound); 0: in the compute rate.
  double memory_bandwidth = 0;
  // Cores the devices share (ranks as threads on one machine, a calibrated file): the rates
  // below and peak_flops are one device's on one core; 0: not shared.
  int cores = 0;
  // A calibrated file's per-rank costs beside the GEMMs (0 in the presets): seconds per step,
  // per layer of a micro-batch (forward and backward), per activation element a forward
  // writes (its element-wise work, both passes), per parameter held (gradient zeroing, the
  // optimizer), all on one core.
  double step_seconds = 0, layer_seconds = 0, element_seconds = 0, param_seconds = 0;
  // The same per element of a moe or gpt forward, whose element-wise kernels differ (routing,
  // dispatch; attention, norms); 0: element_seconds.
  double moe_element_seconds = 0, gpt_element_seconds = 0;
  // A calibrated file's seconds per ring-attention block of a cp rank (projection.h's
  // ring_attention_blocks: the block's call, merge and ring bookkeeping) on one core.
  double ring_block_seconds = 0;
  // How a device's one-core time changes with the devices sharing the cores: one device alone
  // runs the GEMMs its kernels split (projection.h's splittable_share) on every core,
  // parallel_speedup times faster (0: 1), the rest as on one core; `cores` devices at once
  // are each shared_slowdown times slower than one alone on one core (memory bandwidth,
  // caches; 0: 1), prorated from 1 device; beyond `cores`, ranks sync every step, so the
  // core holding the most of them sets the pace: 2 a core are each oversubscribed_slowdown
  // times slower (time-sliced; 0: 2 x shared_slowdown), 4 a core crowded_slowdown times
  // (0: 2 x oversubscribed_slowdown), prorated between, in proportion beyond.
  double parallel_speedup = 0, shared_slowdown = 0, oversubscribed_slowdown = 0;
  double crowded_slowdown = 0;
  // A calibrated file's seconds per byte of a step's gradient all_reduce (no ZeRO) among
  // `cores` devices sharing the cores, 2 and 4 a core, as ddp training steps paid it (buffers
  // out of cache, ranks arriving apart, time-sliced; a loop of all_reduces pays ~10x less);
  // by the devices as above. 0: the links' cost.
  double shared_sync_seconds = 0, oversubscribed_sync_seconds = 0, crowded_sync_seconds = 0;
  // A calibrated file's extra share of a device's expert compute when expert-parallel
  // devices outnumber the cores: the rank holding the busiest experts sets the pace of each
  // all_to_all, time-sliced (measured with an ep run on 2 x `cores` devices); 0: none.
  double expert_imbalance = 0;
  // Collectives among more devices than cores pay oversubscribed_latency a message.
  double oversubscribed_latency = 0;
  // A calibrated file's all_reduce as dtsim's runtime runs it (Algo::kAuto): recursive
  // doubling on the link up to kSmallAllReduce bytes, beyond them one shared buffer at this
  // latency and bandwidth (bandwidth 0: every all_reduce as the projection's algorithm on
  // the link).
  double shared_latency = 0, shared_bandwidth = 0;
};

const std::vector<Hardware>& hardware_presets();
// The preset named `name` ("a100", "h100"), or nullptr.
const Hardware* find_hardware(const std::string& name);

// The numeric fields by name, as a hardware file (train/cli/estimate_model.cc) keeps them.
struct HardwareField {
  const char* name;
  double get(const Hardware& h) const;
  // Sets the field; false when `v` is out of its range (negative, or a count below 1).
  bool set(Hardware& h, double v) const;
};
const std::vector<HardwareField>& hardware_fields();

}  // namespace dtsim::train::estimator
