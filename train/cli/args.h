// A small flag parser for the dtsim commands: `--name value` and `--switch`. Every
// failure a user can cause becomes a UsageError with one line naming the flag and the
// constraint; main() prints it and exits with code 2.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "runtime/types.h"

namespace dtsim::cli {

class Args {
 public:
  // `argv` are the words after the command name; `flags` take a value, `switches` do not.
  Args(const std::string& command, const std::vector<std::string>& argv,
       const std::set<std::string>& flags, const std::set<std::string>& switches);

  bool has(const std::string& name) const { return values_.count(name) != 0; }
  bool on(const std::string& name) const { return switches_.count(name) != 0; }
  std::string str(const std::string& name, const std::string& fallback) const;
  // One of `choices`, else UsageError listing them.
  std::string choice(const std::string& name, const std::string& fallback,
                     const std::vector<std::string>& choices) const;
  // An integer in [lo, hi], else UsageError naming the range.
  int64_t integer(const std::string& name, int64_t fallback, int64_t lo, int64_t hi) const;
  double number(const std::string& name, double fallback, double lo, double hi) const;

  const std::string& command() const { return command_; }

 private:
  std::string command_;
  std::map<std::string, std::string> values_;
  std::set<std::string> switches_;
};

// Throws UsageError("<command>: <message>").
[[noreturn]] void fail(const std::string& command, const std::string& message);

}  // namespace dtsim::cli
