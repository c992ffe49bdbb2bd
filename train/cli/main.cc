// dtsim: distributed training, simulated. `dtsim <command> -h` for each command.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "model/gemm.h"
#include "runtime/job_start.h"
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

// Under mpirun every process parses the same flags and prints the same --help, or meets the
// same usage error mid-run; process 0 alone prints it, so that the job prints it once.
void print_once(std::FILE* to, const std::string& text) {
  if (dtsim::ProcessModel::from_environment(0, 1).process == 0) std::fputs(text.c_str(), to);
}

// Process numbers as a list with ranges: "1", "1-3, 5".
std::string process_list(const std::vector<int>& ps) {
  std::string out;
  for (size_t i = 0; i < ps.size();) {
    size_t j = i;
    while (j + 1 < ps.size() && ps[j + 1] == ps[j] + 1) ++j;
    out += (out.empty() ? "" : ", ") + std::to_string(ps[i]);
    if (j > i) out += (j == i + 1 ? ", " : "-") + std::to_string(ps[j]);
    i = j + 1;
  }
  return out;
}

// A one-line error as `who` reports it: "dtsim train: X" -> "dtsim train: process 1: X".
// Several lines (the help) stay as they are.
std::string said_by(const std::string& text, const std::string& who) {
  if (const size_t nl = text.find('\n'); nl != std::string::npos && nl + 1 < text.size()) {
    return text;
  }
  const size_t colon = text.rfind("dtsim", 0) == 0 ? text.find(": ") : std::string::npos;
  if (colon == std::string::npos) return "dtsim: " + who + ": " + text;
  return text.substr(0, colon + 2) + who + ": " + text.substr(colon + 2);
}

// A usage error met before the work. Under mpirun the processes agree at the job's start
// (runtime/job_start.h) on which of them met one: the lowest-numbered prints its own, naming
// itself unless it is process 0 (with those that met the same error, and those that met
// others), and every process exits 2. After the start (mid-run) every process meets the same
// error: process 0 prints it. `text` ends with a newline.
int usage_error(const std::string& text) {
  if (dtsim::job_started()) {
    print_once(stderr, text);
    return 2;
  }
  const int me = dtsim::ProcessModel::from_environment(0, 1).process;
  const std::string alone = said_by(text, "process " + std::to_string(me));
  const dtsim::JobStart start = dtsim::start_job(text, alone);
  if (!start.agreed) {  // the others did not come: this process's own error, named
    std::fputs(alone.c_str(), stderr);
    return 2;
  }
  if (start.first_failed() != start.process) return 2;  // a lower-numbered process prints
  if (start.process == 0) {
    std::fputs(text.c_str(), stderr);
    return 2;
  }
  std::vector<int> same, other;
  for (int p = 0; p < static_cast<int>(start.errors.size()); ++p) {
    if (start.errors[p] == 0) continue;
    (start.errors[p] == start.errors[start.process] ? same : other).push_back(p);
  }
  std::string who = (same.size() == 1 ? "process " : "processes ") + process_list(same);
  if (!other.empty()) {
    who += fmt::format(" ({} {} met {})", other.size() == 1 ? "process" : "processes",
                       process_list(other), other.size() == 1 ? "another error" : "other errors");
  }
  std::fputs(said_by(text, who).c_str(), stderr);
  return 2;
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

// The command closest to a mistyped one ("trian" -> "train"), or "": at most two edits away.
std::string nearest_command(const std::string& word, const std::vector<Command>& commands) {
  std::string best;
  size_t best_distance = 3;
  for (const Command& c : commands) {
    const std::string& name = c.app->get_name();
    std::vector<size_t> row(name.size() + 1);  // edit distance, one row at a time
    for (size_t j = 0; j <= name.size(); ++j) row[j] = j;
    for (size_t i = 1; i <= word.size(); ++i) {
      size_t diagonal = row[0];
      row[0] = i;
      for (size_t j = 1; j <= name.size(); ++j) {
        const size_t up = row[j];
        row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (word[i - 1] != name[j - 1])});
        diagonal = up;
      }
    }
    if (row[name.size()] < best_distance) best_distance = row[name.size()], best = name;
  }
  return best;
}

// Standard output must have reached its file: a full disk or a closed pipe is an error.
int check_stdout(const std::string& command, int code) {
  if (std::fflush(stdout) == 0 && !std::ferror(stdout)) return code;
  std::fprintf(stderr, "dtsim%s%s: cannot write standard output (%s)\n", command.empty() ? "" : " ",
               command.c_str(), std::strerror(errno));
  return code == 0 ? 1 : code;
}

// The command's effective settings, one "--flag value" line each, in declaration order:
// what the processes of an MPI job compare at its start (runtime/job_start.h), so that they
// all run the same command, including its outputs and the world's shape.
std::string job_config(const CLI::App& command) {
  std::string text = "dtsim " DTSIM_VERSION " " + command.get_name() + "\n";
  for (const CLI::Option* o : command.get_options()) {
    if (o->check_lname("help") || o->get_lnames().empty()) continue;
    std::string value;
    if (o->count() > 0) {
      for (const std::string& r : o->results()) value += (value.empty() ? "" : ",") + r;
    } else {
      value = o->get_default_str().empty() ? "(not given)" : o->get_default_str();
    }
    text += "--" + o->get_lnames().front() + " " + value + "\n";
  }
  return text;
}

// A usage error from below the CLI (the runtime's "world size 600 is out of range") gets the
// command's prefix, as the CLI's own errors have.
std::string with_prefix(const std::string& text, const std::string& command) {
  if (text.rfind("dtsim", 0) == 0) return text;
  return "dtsim " + command + ": " + text;
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
      dtsim::cli::add_demo(dtsim),   dtsim::cli::add_train(dtsim),
      dtsim::cli::add_walk(dtsim),   dtsim::cli::add_estimate(dtsim),
      dtsim::cli::add_stress(dtsim), dtsim::cli::add_checkpoint(dtsim)};
  std::vector<std::string> names;
  for (const Command& c : commands) {
    names.push_back(c.app->get_name());
    // A flag given twice is an error, switches included (CLI11 lets switches repeat).
    for (CLI::Option* o : c.app->get_options()) {
      if (!o->check_lname("help")) o->multi_option_policy(CLI::MultiOptionPolicy::Throw);
    }
    c.app->footer(c.app->get_footer() +
                  "\n--config FILE reads these flags from a TOML file (keys are flag names without "
                  "--; see README)\nUnder mpirun every process must get the same flags, outputs "
                  "included (they are compared at the start); process 0 writes the outputs");
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
      return usage_error(fmt::format(
          "dtsim: {0} is not a flag of dtsim itself; flags follow the command, as in dtsim "
          "train {0} (run dtsim --help for the commands)\n",
          flag));
    }
  }
  if (argc >= 2 && argv[1][0] != '-') {
    for (const Command& c : commands) {
      if (c.app->get_name() == argv[1]) command = &c;
    }
    if (command == nullptr) {
      const std::string near = nearest_command(argv[1], commands);
      return usage_error(
          fmt::format("dtsim: unknown command '{}'; {}run dtsim --help for the list\n", argv[1],
                      near.empty() ? "" : "did you mean " + near + "? "));
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
    if (code != 0) return usage_error(text);      // no command: the help, as an error
    print_once(stdout, text);
    return check_stdout(name, code);
  } catch (const CLI::ParseError& e) {
    return usage_error(dtsim::cli::one_line(e, name, dtsim) + "\n");
  }

  dtsim::set_job_config(job_config(*command->app));
  int code = 0;
  try {
    code = command->run();
  } catch (const dtsim::cli::DryRun&) {  // DTSIM_DRY_RUN=1: checked, nothing ran
    std::printf("dtsim %s: dry run: the command line is valid\n", name.c_str());
    return check_stdout(name, 0);
  } catch (const dtsim::JobRefused&) {
    return 2;  // another process met a usage error before the start: it prints it
  } catch (const dtsim::UsageError& e) {
    return usage_error(with_prefix(with_ranks_source(e.what(), argc, argv), name) + "\n");
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
