// dtsim: distributed training, simulated. `dtsim <command> --help` for each command.
#include <cstdio>
#include <exception>
#include <string>

#include "runtime/types.h"
#include "runtime/world.h"
#include "train/cli/commands.h"

namespace {

using dtsim::cli::Command;

// One row per command; keep in the order a new user would try them.
const Command kCommands[] = {
    {"demo", "every strategy on 4 ranks, checked against single-rank training, in one table",
     dtsim::cli::demo_main},
    {"train", "train one strategy on N rank threads; --check against single-rank training",
     dtsim::cli::train_main},
    {"walk", "print a collective step by step: who sends which chunk to whom",
     dtsim::cli::walk_main},
    {"estimate", "memory per device and bytes per step for ZeRO stages 0-3 (analytical)",
     dtsim::cli::estimate_main},
    {"stress", "random collectives under jitter, checked against a reference",
     dtsim::cli::stress_main},
};

int usage(FILE* out) {
  std::fprintf(out,
               "dtsim: distributed training, simulated (ranks are threads)\n\n"
               "usage: dtsim <command> [flags]   (dtsim <command> --help for its flags)\n\n");
  for (const Command& c : kCommands) std::fprintf(out, "  %-10s %s\n", c.name, c.summary);
  std::fprintf(out, "\nexample: dtsim walk --op all_reduce --ranks 4 --numel 8\n");
  return out == stdout ? 0 : 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return usage(stderr);
  const std::string name = argv[1];
  if (name == "--help" || name == "-h" || name == "help") return usage(stdout);
  dtsim::cli::Words words(argv + 2, argv + argc);
  for (const Command& c : kCommands) {
    if (name != c.name) continue;
    try {
      return c.run(words);
    } catch (const dtsim::UsageError& e) {
      std::fprintf(stderr, "%s\n", e.what());
      return 2;
    } catch (const dtsim::RankFailure& e) {
      // A rank failed mid-run: the error, then what every rank was last doing.
      std::fprintf(stderr, "dtsim %s: %s\n%s\n", c.name, e.what(), e.flight_report().c_str());
      return 1;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "dtsim %s: %s\n", c.name, e.what());
      return 1;
    }
  }
  std::fprintf(stderr, "dtsim: unknown command '%s'; run dtsim --help for the list\n",
               name.c_str());
  return 2;
}
