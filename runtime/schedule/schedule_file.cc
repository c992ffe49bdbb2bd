// Schedule files: a header of "key value" lines (the stress options that make the plan),
// then one line per scheduling point: the chosen rank and the hash of the runnable set.
//
//   dtsim-schedule 1
//   ranks 4
//   ...
//   steps 812
//   2 9c2f0e5b1a3d4c77
#include <cstdio>
#include <fstream>
#include <sstream>

#include "runtime/schedule/explore.h"

namespace dtsim::schedule {
namespace {

UsageError bad(const std::string& path, const std::string& what) {
  return UsageError("schedule file " + path + ": " + what +
                    "; pass a file that a failing `dtsim stress --scheduler` run wrote");
}

}  // namespace

std::string schedule_file_text(const ScheduleFile& f) {
  std::ostringstream out;
  const StressOptions& o = f.options;
  out << kScheduleMagic << "\nranks " << o.ranks << "\nseed " << o.seed << "\niteration "
      << f.iteration << "\ncalls " << o.calls_per_iteration << "\nmax-numel " << o.max_numel
      << "\nmutant " << mutant_name(o.mutant) << "\nsteps " << f.record.choices.size() << "\n";
  char line[48];
  for (size_t i = 0; i < f.record.choices.size(); ++i) {
    std::snprintf(line, sizeof line, "%d %016llx\n", f.record.choices[i],
                  static_cast<unsigned long long>(f.record.runnable_hash[i]));
    out << line;
  }
  return out.str();
}

ScheduleFile read_schedule_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw bad(path, "cannot be opened");
  std::string line;
  if (!std::getline(in, line) || line != kScheduleMagic)
    throw bad(path, "does not start with '" + std::string(kScheduleMagic) + "'");
  ScheduleFile f;
  size_t steps = 0;
  bool have_steps = false;
  while (!have_steps && std::getline(in, line)) {
    std::istringstream kv(line);
    std::string key, value;
    kv >> key >> value;
    try {
      if (key == "ranks") {
        f.options.ranks = std::stoi(value);
      } else if (key == "seed") {
        f.options.seed = std::stoull(value);
      } else if (key == "iteration") {
        f.iteration = std::stoi(value);
      } else if (key == "calls") {
        f.options.calls_per_iteration = std::stoi(value);
      } else if (key == "max-numel") {
        f.options.max_numel = std::stoull(value);
      } else if (key == "mutant") {
        if (!parse_mutant(value, &f.options.mutant)) throw bad(path, "unknown mutant " + value);
      } else if (key == "steps") {
        steps = std::stoull(value);
        have_steps = true;
      } else {
        throw bad(path, "unknown header line '" + line + "'");
      }
    } catch (const std::logic_error&) {
      throw bad(path, "bad number in '" + line + "'");
    }
  }
  if (!have_steps) throw bad(path, "has no 'steps' line");
  if (f.options.ranks < 1 || f.options.ranks > 4096) throw bad(path, "ranks out of range");
  for (size_t i = 0; i < steps; ++i) {
    int rank = -1;
    std::string hash;
    if (!(in >> rank >> hash) || rank < 0 || rank >= f.options.ranks) {
      throw bad(path, "step " + std::to_string(i) + " is missing or names no rank");
    }
    f.record.choices.push_back(rank);
    f.record.runnable_hash.push_back(std::stoull(hash, nullptr, 16));
    f.record.preempted.push_back(0);
  }
  return f;
}

}  // namespace dtsim::schedule
