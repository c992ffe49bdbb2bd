// The dtsim commands. Each takes the words after its name and returns the exit code;
// a UsageError escaping one is printed by main() as one line, with exit code 2.
#pragma once

#include <string>
#include <vector>

namespace dtsim::cli {

using Words = std::vector<std::string>;

struct Command {
  const char* name;
  const char* summary;
  int (*run)(const Words& args);
};

int demo_main(const Words& args);   // demo.cc
int train_main(const Words& args);  // train.cc
int walk_main(const Words& args);
int estimate_main(const Words& args);  // estimate.cc
int stress_main(const Words& args);

}  // namespace dtsim::cli
