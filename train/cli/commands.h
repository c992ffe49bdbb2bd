// The dtsim commands. Each add_<name>() declares its subcommand, flags and help on the
// dtsim app (train/cli/main.cc) and returns the function that runs it once the command
// line is parsed; it returns the exit code. A UsageError escaping one is printed by main()
// as one line, with exit code 2. Each calls cli::begin_work() (flags.h: runtime/job_start.h's
// begin_work, or the end of a DTSIM_DRY_RUN) once its flags are checked and its output files
// declared, before it prints or runs anything: under mpirun the processes agree there
// whether any of them met a usage error, and compare their flags (main.cc's job_config).
#pragma once

#include <functional>

namespace CLI {
class App;
}

namespace dtsim::cli {

struct Command {
  CLI::App* app;             // the subcommand, owned by the dtsim app
  std::function<int()> run;  // called after a successful parse
};

Command add_demo(CLI::App& dtsim);        // demo.cc
Command add_train(CLI::App& dtsim);       // train.cc
Command add_walk(CLI::App& dtsim);        // walk.cc
Command add_estimate(CLI::App& dtsim);    // estimate.cc
Command add_stress(CLI::App& dtsim);      // stress.cc
Command add_checkpoint(CLI::App& dtsim);  // checkpoint.cc

}  // namespace dtsim::cli
