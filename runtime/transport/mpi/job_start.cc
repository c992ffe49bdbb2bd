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
std::string g_config;  // under g_start_mu

// The lines of a configuration's text.
std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at < text.size()) {
    size_t nl = text.find('\n', at);
    if (nl == std::string::npos) nl = text.size();
    out.push_back(text.substr(at, nl - at));
    at = nl + 1;
  }
  return out;
}

// "--seed 2" -> "--seed"; a line's setting is its first word.
std::string setting_of(const std::string& line) { return line.substr(0, line.find(' ')); }

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

void set_job_config(std::string text) {
  std::lock_guard<std::mutex> lock(g_start_mu);
  g_config = std::move(text);
}

std::string config_difference(const std::string& mine, int mine_process, const std::string& other,
                              int other_process) {
  if (mine == other) return "";
  const std::vector<std::string> a = lines_of(mine);
  const std::vector<std::string> b = lines_of(other);
  const auto shown = [](const std::vector<std::string>& lines, size_t i) {
    return i < lines.size() ? "'" + lines[i] + "'" : std::string("nothing there");
  };
  size_t i = 0;
  while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
  const std::string setting = setting_of(i < a.size() ? a[i] : b.at(i));
  return "processes disagree on " + setting + ": process " + std::to_string(other_process) +
         " has " + shown(b, i) + ", process " + std::to_string(mine_process) + " has " +
         shown(a, i) + "; start every process of the job with the same flags";
}

JobStart start_job(const std::string& error, const std::string& error_alone) {
  std::lock_guard<std::mutex> lock(g_start_mu);
  if (!g_start) {
    const ProcessModel job = ProcessModel::from_environment(0, 1);
    const uint64_t mine = error.empty() ? 0 : text_hash(error);
    if (job.mpi && job.processes > 1) {
      mpi::MpiProcess::set_start(mine, error_alone,
                                 g_config);  // before MPI starts: what it agrees on
      g_start = mpi::MpiProcess::instance().job_start();
    } else {
      JobStart alone;
      alone.process = job.process;
      alone.errors.assign(job.processes, 0);
      alone.errors.at(job.process) = mine;
      alone.configs.assign(job.processes, "");
      alone.configs.at(job.process) = g_config;
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
  // Every process compares the same texts, so every one throws the same error.
  for (size_t p = 1; p < start.configs.size(); ++p) {
    const std::string diff =
        config_difference(start.configs[0], 0, start.configs[p], static_cast<int>(p));
    if (!diff.empty()) throw UsageError(diff);
  }
}

bool job_started() { return g_started.load(std::memory_order_acquire); }

}  // namespace dtsim
