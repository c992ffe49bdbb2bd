#include "train/estimate/hardware.h"

namespace dtsim::train::estimator {

const std::vector<Hardware>& hardware_presets() {
  // efficiency 0.6: the layers' share of peak the Narayanan et al. 2021 check uses for every
  // row (docs/estimate.md); links: NVLink per direction, one InfiniBand NIC per GPU.
  static const std::vector<Hardware> kPresets = {
      {"a100",
       "NVIDIA A100 datasheet (312 TFLOP/s dense bf16, 80 GB at 2.039 TB/s, NVLink 3 600 GB/s both "
       "directions); DGX A100 / Selene: 8 GPUs a node, 8 x 200 Gb/s HDR InfiniBand",
       312e12,
       0.6,
       8,
       {5e-6, 300e9},
       {10e-6, 25e9},
       80e9,
       2.039e12},
      {"h100",
       "NVIDIA H100 SXM datasheet (989 TFLOP/s dense bf16, 80 GB at 3.35 TB/s, NVLink 4 900 GB/s "
       "both "
       "directions); DGX H100: 8 GPUs a node, 8 x 400 Gb/s NDR InfiniBand",
       989e12,
       0.6,
       8,
       {5e-6, 450e9},
       {10e-6, 50e9},
       80e9,
       3.35e12},
  };
  return kPresets;
}

const Hardware* find_hardware(const std::string& name) {
  for (const Hardware& h : hardware_presets()) {
    if (h.name == name) return &h;
  }
  return nullptr;
}

namespace {

double* field(Hardware& h, const std::string& name) {
  if (name == "peak_flops") return &h.peak_flops;
  if (name == "efficiency") return &h.efficiency;
  if (name == "intra_latency") return &h.intra.latency;
  if (name == "intra_bandwidth") return &h.intra.bandwidth;
  if (name == "inter_latency") return &h.inter.latency;
  if (name == "inter_bandwidth") return &h.inter.bandwidth;
  if (name == "memory_bytes") return &h.memory_bytes;
  if (name == "memory_bandwidth") return &h.memory_bandwidth;
  if (name == "step_seconds") return &h.step_seconds;
  if (name == "layer_seconds") return &h.layer_seconds;
  if (name == "element_seconds") return &h.element_seconds;
  if (name == "moe_element_seconds") return &h.moe_element_seconds;
  if (name == "gpt_element_seconds") return &h.gpt_element_seconds;
  if (name == "ring_block_seconds") return &h.ring_block_seconds;
  if (name == "param_seconds") return &h.param_seconds;
  if (name == "shared_slowdown") return &h.shared_slowdown;
  if (name == "parallel_speedup") return &h.parallel_speedup;
  if (name == "oversubscribed_latency") return &h.oversubscribed_latency;
  if (name == "oversubscribed_slowdown") return &h.oversubscribed_slowdown;
  if (name == "crowded_slowdown") return &h.crowded_slowdown;
  if (name == "shared_sync_seconds") return &h.shared_sync_seconds;
  if (name == "oversubscribed_sync_seconds") return &h.oversubscribed_sync_seconds;
  if (name == "crowded_sync_seconds") return &h.crowded_sync_seconds;
  if (name == "expert_imbalance") return &h.expert_imbalance;
  if (name == "shared_buffer_latency") return &h.shared_latency;
  if (name == "shared_buffer_bandwidth") return &h.shared_bandwidth;
  return nullptr;
}

}  // namespace

double HardwareField::get(const Hardware& h) const {
  const std::string n = name;
  if (n == "devices_per_node") return h.devices_per_node;
  if (n == "cores") return h.cores;
  return *field(const_cast<Hardware&>(h), n);
}

bool HardwareField::set(Hardware& h, double v) const {
  const std::string n = name;
  if (!(v >= 0) || v > 1e30) return false;
  if (n == "devices_per_node" || n == "cores") {
    if (v != static_cast<int>(v) || (n == "devices_per_node" && v < 1)) return false;
    (n == "cores" ? h.cores : h.devices_per_node) = static_cast<int>(v);
    return true;
  }
  if ((n == "peak_flops" || n == "efficiency" || n == "intra_bandwidth" ||
       n == "inter_bandwidth") &&
      v == 0) {
    return false;
  }
  *field(h, n) = v;
  return true;
}

const std::vector<HardwareField>& hardware_fields() {
  static const std::vector<HardwareField> kFields = {{"peak_flops"},
                                                     {"efficiency"},
                                                     {"devices_per_node"},
                                                     {"intra_latency"},
                                                     {"intra_bandwidth"},
                                                     {"inter_latency"},
                                                     {"inter_bandwidth"},
                                                     {"memory_bytes"},
                                                     {"memory_bandwidth"},
                                                     {"cores"},
                                                     {"step_seconds"},
                                                     {"layer_seconds"},
                                                     {"element_seconds"},
                                                     {"moe_element_seconds"},
                                                     {"gpt_element_seconds"},
                                                     {"ring_block_seconds"},
                                                     {"param_seconds"},
                                                     {"shared_slowdown"},
                                                     {"parallel_speedup"},
                                                     {"oversubscribed_latency"},
                                                     {"oversubscribed_slowdown"},
                                                     {"crowded_slowdown"},
                                                     {"shared_sync_seconds"},
                                                     {"oversubscribed_sync_seconds"},
                                                     {"crowded_sync_seconds"},
                                                     {"expert_imbalance"},
                                                     {"shared_buffer_latency"},
                                                     {"shared_buffer_bandwidth"}};
  return kFields;
}

}  // namespace dtsim::train::estimator
