// The dtsim command line on CLI11: validators whose messages are dtsim's one-line errors,
// the one place the --algo choices come from, and the conversion of any CLI11 parse error
// into "dtsim <command>: <what is wrong>; <how to fix it>" (main() prints it, exit code 2).
//
// Thread safety: everything here runs on the main thread while parsing.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "runtime/types.h"

namespace dtsim::cli {

// Throws UsageError("dtsim <command>: <message>").
[[noreturn]] void fail(const std::string& command, const std::string& message);

// Every command calls this (not dtsim::begin_work() directly) once its flags are checked
// and its output files declared. With DTSIM_DRY_RUN=1 in the environment it throws DryRun
// there, and main() ends with exit code 0 and "dtsim <command>: dry run: the command line
// is valid": the command line went through every check the command makes, nothing ran
// (tests/docs checks the commands the docs name in prose this way). Otherwise it is
// dtsim::begin_work() (runtime/job_start.h).
struct DryRun {};
void begin_work();

// A whole number in [lo, hi]; accepts 7e9 as well as 7000000000 and rewrites the value
// to its digits. Help shows "INT in [lo, hi]".
CLI::Validator Integer(int64_t lo, int64_t hi);
// A finite number in [lo, hi].
CLI::Validator Number(double lo, double hi);
// One of `choices`; `hint`, when not empty, is appended to the error ("FSDP is zero3").
CLI::Validator OneOf(std::vector<std::string> choices, std::string hint = "");

// The --algo names every command accepts: the algorithm registry's (runtime's
// parse_algo spellings, aliases left out), auto first.
std::vector<std::string> algo_names();

// --algo for the collective op() (read when the check runs, so declare --op and the flags
// world() reads before --algo): one of the registry's algorithms of that op that a world
// with world() features (WorldFeature bits) can run. The error lists what to pass instead:
// "must be one of auto, ring, ... (got 'x')" ("for broadcast must be ..." with name_op),
// or the registry's algorithm_error ("rd: reduce_scatter has no 'rd' algorithm; use ...").
// --help shows auto and the algorithms that any of `shown` (the ops op() can be) has.
CLI::Validator AlgoFor(std::function<OpKind()> op, std::function<uint8_t()> world, bool name_op,
                       const std::vector<OpKind>& shown);

// True when flag `name` ("--ranks") was given on the command line, in --config or by its
// environment variable.
bool given(const CLI::App& app, const std::string& name);

// `e` as one line: "dtsim train: --ranks must be between 1 and 256 (got 0)". `command`
// is the subcommand being parsed ("" before one was named).
std::string one_line(const CLI::ParseError& e, const std::string& command, const CLI::App& dtsim);

// Help text as dtsim prints it: a command's long description (describe()) above its
// usage, and option labels without CLI11's type prefix ("INT in [1, 256]=4", "{a|b}=a").
class HelpFormatter : public CLI::Formatter {
 public:
  std::string make_description(const CLI::App* app) const override;
  std::string make_option_opts(const CLI::Option* opt) const override;
};

// Sets `app`'s long description, shown by its -h above the usage line (the short one, given
// to add_subcommand, is what `dtsim -h` lists).
void describe(CLI::App* app, const std::string& text);

// Reads --config FILE for the command being run: bare keys (`ranks = 8`) are that
// command's flags, `[train]` sections name a command explicitly.
class CommandConfig : public CLI::ConfigTOML {
 public:
  // `commands` are the section names a file may hold.
  CommandConfig(std::string command, std::vector<std::string> commands)
      : command_(std::move(command)), commands_(std::move(commands)) {}
  std::vector<CLI::ConfigItem> from_config(std::istream& input) const override;

 private:
  std::string command_;
  std::vector<std::string> commands_;
};

}  // namespace dtsim::cli
