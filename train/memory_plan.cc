#include "train/memory_plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <string>

#include "train/mesh_shape.h"
#include "train/models/model_spec.h"
#include "train/pipeline_parallel/pipeline_parallel.h"
#include "train/placement_plan.h"

namespace dtsim::train {

MemoryPlan plan_memory(const TrainConfig& config) {
  MemoryPlan plan;
  const ModelPlacement placement(config);
  const bool solo = config.strategy == Strategy::kSingle || config.strategy == Strategy::kAccum;
  const MeshShape& shape = placement.shape();
  const int64_t t = config.precision == model::Precision::kFp32 ? 4 : 2;
  const pipeline::ScheduleSpec spec = schedule_spec(config);
  const int micro = std::max(1, config.micro_batches);
  const int64_t rows = std::max(1, config.global_batch / (shape.dp * micro));
  for (int r = 0; r < shape.world(); ++r) {
    // The model state its placements give it, a gathered layer and its staged gradients
    // under ZeRO-3, and a bound on the activations of the micro-batches in flight.
    const StateElements e = placement.elements(mesh_coord(shape, r));
    int64_t bytes = 2 * e.gathered * t;
    for (int64_t b : state_bytes(e, config.precision, config.optimizer)) bytes += b;
    const int in_flight = shape.pp > 1 ? std::min(micro, shape.pp * spec.virtual_stages) : 1;
    bytes += model_spec(config).activation_floats(config, solo ? config.global_batch / micro : rows,
                                                  shape.tp, shape.pp) *
             4 * in_flight;
    plan.rank_bytes.push_back(bytes);
  }
  const int per_process = std::max(1, config.threads_per_process);
  const bool threads = per_process == 1 && !ProcessModel::from_environment(1, 1).mpi;
  if (threads) {
    for (int64_t b : plan.rank_bytes) plan.process_bytes += b;
  } else {
    plan.process_bytes =
        *std::max_element(plan.rank_bytes.begin(), plan.rank_bytes.end()) * per_process;
  }
  return plan;
}

int64_t available_memory() {
  int64_t available = -1;
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  int64_t kib = 0;
  std::string unit;
  while (meminfo >> key >> kib >> unit) {
    if (key == "MemAvailable:") available = kib * 1024;
  }
  std::ifstream cgroup("/sys/fs/cgroup/memory.max");
  std::string limit;
  if (cgroup >> limit && limit != "max") {
    const int64_t cap = std::stoll(limit);
    if (available < 0 || cap < available) available = cap;
  }
  return available;
}

void require_memory(const TrainConfig& config) {
  const int64_t available = available_memory();
  if (available < 0) return;
  const MemoryPlan plan = plan_memory(config);
  if (plan.process_bytes <= available) return;
  const auto gb = [](int64_t b) { return static_cast<double>(b) / 1e9; };
  throw UsageError(fmt::format(
      "this run needs about {:.1f} GB ({} rank{} of up to {:.1f} GB: weights, gradients, "
      "optimizer state and activations) but {:.1f} GB is available; use a smaller --dim, "
      "--hidden, --layers or --batch, more --zero sharding, or more machines under mpirun",
      gb(plan.process_bytes), plan.rank_bytes.size(), plan.rank_bytes.size() == 1 ? "" : "s",
      gb(*std::max_element(plan.rank_bytes.begin(), plan.rank_bytes.end())), gb(available)));
}

}  // namespace dtsim::train
