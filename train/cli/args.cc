#include "train/cli/args.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>

namespace dtsim::cli {

void fail(const std::string& command, const std::string& message) {
  throw UsageError("dtsim " + command + ": " + message);
}

Args::Args(const std::string& command, const std::vector<std::string>& argv,
           const std::set<std::string>& flags, const std::set<std::string>& switches)
    : command_(command) {
  for (size_t i = 0; i < argv.size(); ++i) {
    std::string word = argv[i];
    if (word.rfind("--", 0) != 0) {
      fail(command, "unexpected argument '" + word + "'; flags start with -- (see --help)");
    }
    std::string name = word.substr(2);
    std::string value;
    bool inline_value = false;
    if (auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      inline_value = true;
    }
    if (switches.count(name)) {
      if (inline_value) fail(command, "--" + name + " takes no value");
      switches_.insert(name);
      continue;
    }
    if (!flags.count(name))
      fail(command, "unknown flag --" + name + " (see dtsim " + command + " --help)");
    if (!inline_value) {
      if (i + 1 >= argv.size()) fail(command, "--" + name + " needs a value");
      value = argv[++i];
    }
    if (values_.count(name)) fail(command, "--" + name + " is given twice");
    values_[name] = value;
  }
}

std::string Args::str(const std::string& name, const std::string& fallback) const {
  auto it = values_.find(name);
  return it == values_.end() ? fallback : it->second;
}

std::string Args::choice(const std::string& name, const std::string& fallback,
                         const std::vector<std::string>& choices) const {
  const std::string v = str(name, fallback);
  std::string list;
  for (const auto& c : choices) {
    if (c == v) return v;
    list += (list.empty() ? "" : ", ") + c;
  }
  fail(command_, "--" + name + " must be one of " + list + " (got '" + v + "')");
}

int64_t Args::integer(const std::string& name, int64_t fallback, int64_t lo, int64_t hi) const {
  auto it = values_.find(name);
  int64_t v = fallback;
  if (it != values_.end()) {
    const char* s = it->second.c_str();
    char* end = nullptr;
    errno = 0;
    const double d = std::strtod(s, &end);  // accepts 7e9 as well as 7000000000
    if (end == s || *end != '\0' || errno != 0 || d != std::floor(d) || std::fabs(d) > 9e18) {
      fail(command_, "--" + name + " must be a whole number (got '" + it->second + "')");
    }
    v = static_cast<int64_t>(d);
  }
  if (v < lo || v > hi) {
    fail(command_, "--" + name + " must be between " + std::to_string(lo) + " and " +
                       std::to_string(hi) + " (got " + std::to_string(v) + ")");
  }
  return v;
}

double Args::number(const std::string& name, double fallback, double lo, double hi) const {
  auto it = values_.find(name);
  double v = fallback;
  if (it != values_.end()) {
    const char* s = it->second.c_str();
    char* end = nullptr;
    errno = 0;
    v = std::strtod(s, &end);
    if (end == s || *end != '\0' || errno != 0 || !std::isfinite(v)) {
      fail(command_, "--" + name + " must be a number (got '" + it->second + "')");
    }
  }
  if (v < lo || v > hi) {
    fail(command_, "--" + name + " must be between " + std::to_string(lo) + " and " +
                       std::to_string(hi) + " (got " + std::to_string(v) + ")");
  }
  return v;
}

}  // namespace dtsim::cli
