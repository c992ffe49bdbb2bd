// dtsim: distributed training, simulated. `dtsim <command> -h` for each command.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "model/gemm.h"
#include "runtime/process_model.h"
#include "runtime/types.h"
#include "runtime/world.h"
#include "train/cli/commands.h"
#include "train/cli/flags.h"

#ifndef DTSIM_VERSION
#define DTSIM_VERSION "unknown"
#endif

namespace {

using dtsim::cli::Command;

std::string version_text() {
  // The GEMM backend too: it decides the bits of every number a run prints.
  return fmt::format("dtsim {} (C++20, GCC {}.{}.{}; CLI11 {}, fmt {}.{}.{}; GEMM {})",
                     DTSIM_VERSION, __GNUC__, __GNUC_MINOR__, __GNUC_PATCHLEVEL__, CLI11_VERSION,
                     FMT_VERSION / 10000, FMT_VERSION / 100 % 100, FMT_VERSION % 100,
                     dtsim::model::gemm_backend());
}

// Under mpirun every process parses the same flags and meets the same usage error (or
// --help); process 0 alone prints it, so that the job prints it once. All exit alike.
void print_once(std::FILE* to, const std::string& text) {
  if (dtsim::ProcessModel::from_environment(0, 1).process == 0) std::fputs(text.c_str(), to);
}

// A usage error that names --ranks when the value came from $WORLD_SIZE (torchrun's) says
// so: the user never typed --ranks.
std::string with_ranks_source(std::string text, int argc, char** argv) {
  const char* env = std::getenv("WORLD_SIZE");
  if (env == nullptr || text.find("--ranks") == std::string::npos ||
      text.find("$WORLD_SIZE") != std::string::npos) {
    return text;
  }
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--ranks", 7) == 0 || std::strcmp(argv[i], "--config") == 0) {
      return text;  // given, or perhaps in the config file
    }
  }
  return text + " (--ranks is $WORLD_SIZE=" + env + " here)";
}

// Standard output must have reached its file: a full disk or a closed pipe is an error.
int check_stdout(const std::string& command, int code) {
  if (std::fflush(stdout) == 0 && !std::ferror(stdout)) return code;
  std::fprintf(stderr, "dtsim %s: cannot write standard output (%s)\n", command.c_str(),
               std::strerror(errno));
  return code == 0 ? 1 : code;
}

}  // namespace

int main(int argc, char** argv) {
  // Line by line also into a pipe or a file: a killed run has printed what it did so far.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);

  CLI::App dtsim("dtsim: distributed training, simulated (ranks are threads)", "dtsim");
  dtsim.formatter(std::make_shared<dtsim::cli::HelpFormatter>());
  dtsim.set_help_flag("-h,--help", "print this help and exit");
  dtsim.set_version_flag("--version", version_text(), "print the version and exit");
  dtsim.require_subcommand(1, 1);
  dtsim.footer(
      "example: dtsim walk --op all_reduce --ranks 4 --numel 8\n"
      "Any command's flags can come from a TOML file: dtsim train --config run.toml\n"
      "(keys are flag names without --, e.g. strategy = \"zero2\"; see README).");
  // Keep in the order a new user would try them.
  const std::vector<Command> commands = {
      dtsim::cli::add_demo(dtsim), dtsim::cli::add_train(dtsim), dtsim::cli::add_walk(dtsim),
      dtsim::cli::add_estimate(dtsim), dtsim::cli::add_stress(dtsim)};
  std::vector<std::string> names;
  for (const Command& c : commands) {
    names.push_back(c.app->get_name());
    // A flag given twice is an error, switches included (CLI11 lets switches repeat).
    for (CLI::Option* o : c.app->get_options()) {
      if (!o->check_lname("help")) o->multi_option_policy(CLI::MultiOptionPolicy::Throw);
    }
    c.app->footer(c.app->get_footer() +
                  "\n--config FILE reads these flags from a TOML file (keys are flag names without "
                  "--; see README)");
  }

  // The command is the first word; a word that names none is an error of its own.
  const Command* command = nullptr;
  if (argc == 2 && std::strcmp(argv[1], "help") == 0) {
    print_once(stdout, dtsim.help());
    return check_stdout("", 0);
  }
  if (argc >= 2 && argv[1][0] == '-') {
    const std::string flag = argv[1];
    if (flag != "-h" && flag != "--help" && flag != "--version") {
      print_once(stderr, fmt::format("dtsim: {0} is not a flag of dtsim itself; flags follow the "
                                     "command, as in dtsim train {0} (run dtsim --help for the "
                                     "commands)\n",
                                     flag));
      return 2;
    }
  }
  if (argc >= 2 && argv[1][0] != '-') {
    for (const Command& c : commands) {
      if (c.app->get_name() == argv[1]) command = &c;
    }
    if (command == nullptr) {
      print_once(stderr, fmt::format("dtsim: unknown command '{}'; run dtsim --help for the list\n",
                                     argv[1]));
      return 2;
    }
  }
  const std::string name = command ? command->app->get_name() : "";
  dtsim.set_config("--config", "", "read the command's flags from a TOML file (see README)")
      ->type_name("FILE");
  dtsim.config_formatter(std::make_shared<dtsim::cli::CommandConfig>(name, names));
  dtsim.allow_config_extras(CLI::config_extras_mode::error);
  try {
    if (argc < 2) throw CLI::CallForHelp();
    dtsim.parse(argc, argv);
  } catch (const CLI::Success& e) {  // --help, --version
    const int code = argc < 2 ? 2 : 0;
    const std::string text = dynamic_cast<const CLI::CallForVersion*>(&e)
                                 ? std::string(e.what()) + "\n"
                                 : dtsim.help();  // the named command's help when one was named
    print_once(code == 0 ? stdout : stderr, text);
    return check_stdout(name, code);
  } catch (const CLI::ParseError& e) {
    print_once(stderr, dtsim::cli::one_line(e, name, dtsim) + "\n");
    return 2;
  }

  int code = 0;
  try {
    code = command->run();
  } catch (const dtsim::UsageError& e) {
    print_once(stderr, with_ranks_source(e.what(), argc, argv) + "\n");
    return 2;
  } catch (const dtsim::RankFailure& e) {
    // A rank failed mid-run: the error, then what every rank was last doing.
    std::fprintf(stderr, "dtsim %s: %s\n%s\n", name.c_str(), e.what(), e.flight_report().c_str());
    code = 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dtsim %s: %s\n", name.c_str(), e.what());
    code = 1;
  }
  return check_stdout(name, code);
}
