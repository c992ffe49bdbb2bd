#include "runtime/job_start.h"

#include <atomic>
#include <mutex>
#include <optional>

#include "runtime/process_model.h"
#include "runtime/transport/mpi/mpi_process.h"

namespace dtsim {
namespace {
std::mutex g_start_mu;
std::optional<JobStart> g_start;  // under g_start_mu
std::atomic<bool> g_started{false};

// FNV-1a: the same text hashes alike in every process of the job.
uint64_t text_hash(const std::string& text) {
  uint64_t h = 14695981039346656037ull;
  for (unsigned char c : text) h = (h ^ c) * 1099511628211ull;
  return h == 0 ? 1 : h;
}
}  // namespace

int JobStart::first_failed() const {
  for (size_t p = 0; p < errors.size(); ++p) {
    if (errors[p] != 0) return static_cast<int>(p);
  }
  return -1;
}

JobStart start_job(const std::string& error, const std::string& error_alone) {
  std::lock_guard<std::mutex> lock(g_start_mu);
  if (!g_start) {
    const ProcessModel job = ProcessModel::from_environment(0, 1);
    const uint64_t mine = error.empty() ? 0 : text_hash(error);
    if (job.mpi && job.processes > 1) {
      mpi::MpiProcess::set_start(mine, error_alone);  // before MPI starts: what it agrees on
      g_start = mpi::MpiProcess::instance().job_start();
    } else {
      JobStart alone;
      alone.process = job.process;
      alone.errors.assign(job.processes, 0);
      alone.errors.at(job.process) = mine;
      g_start = alone;
    }
    g_started.store(true, std::memory_order_release);
  }
  return *g_start;
}

void begin_work() {
  const JobStart start = start_job("");
  if (!start.agreed) {
    throw Error("process " + std::to_string(start.process) +
                ": not every process of the job reached the start within " +
                std::to_string(kStartDeadline.count()) +
                " s (one ended before it, is stuck, or runs another program)");
  }
  if (const int first = start.first_failed(); first >= 0) {
    throw JobRefused("process " + std::to_string(first) + " met a usage error before the start");
  }
}

bool job_started() { return g_started.load(std::memory_order_acquire); }

}  // namespace dtsim
