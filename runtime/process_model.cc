#include "runtime/process_model.h"

#include <atomic>
#include <cstdlib>
#include <string>

#include "runtime/types.h"

namespace dtsim {
namespace {
int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  return std::atoi(v);
}
}  // namespace

ProcessModel ProcessModel::threads_only(int ranks) {
  ProcessModel m;
  m.threads = ranks;
  return m;
}

bool ProcessModel::launched_by_mpi() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMIX_RANK") != nullptr ||
         std::getenv("PMI_SIZE") != nullptr;
}

ProcessModel ProcessModel::from_environment(int ranks, int threads_per_process) {
  if (!launched_by_mpi()) return threads_only(ranks);
  ProcessModel m;
  m.mpi = true;
  m.processes = env_int("OMPI_COMM_WORLD_SIZE", env_int("PMI_SIZE", 1));
  m.process = env_int("OMPI_COMM_WORLD_RANK", env_int("PMIX_RANK", env_int("PMI_RANK", 0)));
  m.threads = threads_per_process;
  return m;
}

uint8_t ProcessModel::world_features() const {
  return mpi && threads == 1 ? kWorldMpi : kWorldBasic;
}

std::string ProcessModel::describe() const {
  if (!mpi) return std::to_string(threads) + " rank threads";
  return std::to_string(processes) + " MPI processes x " + std::to_string(threads) +
         " rank thread" + (threads == 1 ? "" : "s");
}

namespace {
std::atomic<void (*)()> g_termination_cleanup{nullptr};
}  // namespace

void set_termination_cleanup(void (*cleanup)()) { g_termination_cleanup.store(cleanup); }

void run_termination_cleanup() {
  if (void (*cleanup)() = g_termination_cleanup.load()) cleanup();
}

}  // namespace dtsim
