#include "train/cli/flags.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <utility>

#include "runtime/algorithms/registry.h"
#include "runtime/job_start.h"

namespace dtsim::cli {
namespace {

std::string join(const std::vector<std::string>& words, const char* sep) {
  std::string s;
  for (const auto& w : words) s += (s.empty() ? "" : sep) + w;
  return s;
}

// Edit distance, for "did you mean --strategy?".
size_t distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] != b[j - 1])});
      diagonal = up;
    }
  }
  return row[b.size()];
}

// The long flag of `app` closest to `word` ("--stratgy" -> "--strategy"), or "".
std::string nearest_flag(const CLI::App& app, const std::string& word) {
  std::string best;
  size_t best_distance = 3;  // at most two edits away
  for (const CLI::Option* o : app.get_options()) {
    for (const std::string& name : o->get_lnames()) {
      const size_t d = distance(word, "--" + name);
      if (d < best_distance) best_distance = d, best = "--" + name;
    }
  }
  return best;
}

// "A: B" -> {"A", "B"}.
std::pair<std::string, std::string> split_name(const std::string& what) {
  const size_t colon = what.find(": ");
  if (colon == std::string::npos) return {"", what};
  return {what.substr(0, colon), what.substr(colon + 2)};
}

}  // namespace

void begin_work() {
  const char* dry = std::getenv("DTSIM_DRY_RUN");
  if (dry != nullptr && std::strcmp(dry, "1") == 0) throw DryRun{};
  dtsim::begin_work();
}

void fail(const std::string& command, const std::string& message) {
  throw UsageError("dtsim " + command + ": " + message);
}

CLI::Validator Integer(int64_t lo, int64_t hi) {
  return CLI::Validator(
      [lo, hi](std::string& text) -> std::string {
        const char* s = text.c_str();
        char* end = nullptr;
        errno = 0;
        // Digits exactly (up to 2^63 - 1), else a double's whole value (7e9).
        int64_t v = std::strtoll(s, &end, 10);
        if (end == s || *end != '\0' || errno != 0) {
          errno = 0;
          const double d = std::strtod(s, &end);
          if (end == s || *end != '\0' || errno != 0 || d != std::floor(d) || std::fabs(d) > 9e18) {
            return fmt::format("must be a whole number (got '{}')", text);
          }
          v = static_cast<int64_t>(d);
        }
        if (v < lo || v > hi) return fmt::format("must be between {} and {} (got {})", lo, hi, v);
        text = std::to_string(v);
        return "";
      },
      fmt::format("INT in [{}, {}]", lo, hi));
}

CLI::Validator Number(double lo, double hi) {
  return CLI::Validator(
      [lo, hi](std::string& text) -> std::string {
        const char* s = text.c_str();
        char* end = nullptr;
        errno = 0;
        const double v = std::strtod(s, &end);
        if (end == s || *end != '\0' || errno != 0 || !std::isfinite(v)) {
          return fmt::format("must be a number (got '{}')", text);
        }
        if (v < lo || v > hi)
          return fmt::format("must be between {:g} and {:g} (got {:g})", lo, hi, v);
        return "";
      },
      fmt::format("NUMBER in [{:g}, {:g}]", lo, hi));
}

CLI::Validator OneOf(std::vector<std::string> choices, std::string hint) {
  const std::string list = join(choices, ", ");
  return CLI::Validator(
      [choices = std::move(choices), list, hint = std::move(hint)](std::string& text) {
        if (std::find(choices.begin(), choices.end(), text) != choices.end()) return std::string();
        return fmt::format("must be one of {} (got '{}'){}{}", list, text, hint.empty() ? "" : "; ",
                           hint);
      },
      "{" + join(choices, "|") + "}");
}

std::vector<std::string> algo_names() {
  std::vector<std::string> names;
  for (const AlgoName& n : dtsim::algo_names()) names.emplace_back(n.name);
  return names;
}

CLI::Validator AlgoFor(std::function<OpKind()> op, std::function<uint8_t()> world, bool name_op,
                       const std::vector<OpKind>& shown) {
  std::vector<std::string> names;
  for (const AlgoName& n : dtsim::algo_names()) {
    const bool some =
        std::any_of(shown.begin(), shown.end(), [&](OpKind o) { return has_algorithm(o, n.algo); });
    if (n.algo == Algo::kAuto || some) names.emplace_back(n.name);
  }
  return CLI::Validator(
      [op = std::move(op), world = std::move(world), name_op](std::string& text) {
        const OpKind o = op();
        const uint8_t w = world();
        Algo algo = Algo::kAuto;
        if (!parse_algo(text, &algo)) {
          return fmt::format("{}must be one of {} (got '{}')",
                             name_op ? fmt::format("for {} ", to_string(o)) : "",
                             algorithm_list(o, true, w), text);
        }
        const std::string why = algorithm_error(o, algo, w);
        return why.empty() ? why : text + ": " + why;
      },
      "{" + join(names, "|") + "}");
}

bool given(const CLI::App& app, const std::string& name) {
  return app.get_option(name)->count() > 0;
}

std::string one_line(const CLI::ParseError& e, const std::string& command, const CLI::App& dtsim) {
  const std::string prefix = "dtsim" + (command.empty() ? "" : " " + command) + ": ";
  const CLI::App& app = command.empty() ? dtsim : *dtsim.get_subcommand(command);
  const std::string help = "see dtsim" + (command.empty() ? "" : " " + command) + " --help";
  const std::string what = e.what();
  const auto [name, message] = split_name(what);
  const std::string kind = e.get_name();
  if (kind == "ValidationError") {
    std::string line = prefix + name + " " + message;
    const CLI::Option* o = app.get_option_no_throw(name);
    if (o != nullptr && !o->get_envname().empty() && std::getenv(o->get_envname().c_str())) {
      line += " (" + name + " falls back to $" + o->get_envname() + " when not given)";
    }
    return line;
  }
  if (kind == "ArgumentMismatch") {
    if (message.rfind("At Most", 0) == 0) {
      return prefix + name + " is given twice; give it once (the command line overrides --config)";
    }
    if (message.find("missing") != std::string::npos) return prefix + name + " needs a value";
    if (what.find("flag override") != std::string::npos) {
      return prefix + what.substr(0, what.find(' ')) + " takes no value (it is a switch)";
    }
    return prefix + what + " (" + help + ")";
  }
  if (kind == "ConversionError") {
    if (what.rfind("Could not convert: ", 0) == 0) {
      const std::string rest = what.substr(19);  // "--check = banana"
      const size_t eq = rest.find(" = ");
      const std::string flag = rest.substr(0, eq), value = rest.substr(eq + 3);
      const CLI::Option* o = app.get_option_no_throw(flag);
      if (o != nullptr && o->get_expected_min() == 0) {
        return prefix + flag + " is a switch: give it alone or as =true/=false (got '" + value +
               "')";
      }
      return prefix + flag + " cannot take '" + value + "' (" + help + ")";
    }
    return prefix + what + " (" + help + ")";
  }
  if (dynamic_cast<const CLI::ExtrasError*>(&e) != nullptr) {
    // "The following arguments were not expected: 1 --bogus": CLI11 lists them last first.
    std::string word = message.substr(message.rfind(' ') + 1);
    if (word.rfind("-", 0) == 0) {
      std::string flag = word.substr(0, word.find('='));
      const std::string near = nearest_flag(app, flag);
      return prefix + "unknown flag " + flag +
             (near.empty() ? "" : "; did you mean " + near + "?") + " (" + help + ")";
    }
    if (command.empty())
      return prefix + "unknown command '" + word + "'; run dtsim --help for the list";
    return prefix + "unexpected argument '" + word + "'; flags start with -- (" + help + ")";
  }
  if (kind == "RequiredError") {
    if (command.empty()) return prefix + "name a command; run dtsim --help for the list";
    const CLI::Option* o = app.get_option_no_throw(what.substr(0, what.find(' ')));
    return prefix + what + (o ? " (" + o->get_description() + ")" : "");
  }
  if (kind == "ConfigError" && what.rfind("INI was not able to parse ", 0) != 0) {
    return prefix + "--config: " + what;
  }
  if (kind == "ConfigError") {
    const std::string item = what.substr(what.rfind(' ') + 1);  // "train.bogus"
    return prefix + "--config: unknown key '" + item.substr(item.find('.') + 1) + "' (" + help +
           " for the flags; a key is a flag's name without --)";
  }
  if (kind == "FileError") return prefix + "--config " + what;
  return prefix + what + " (" + help + ")";
}

namespace {
std::map<const CLI::App*, std::string>& long_descriptions() {
  static std::map<const CLI::App*, std::string> m;
  return m;
}
}  // namespace

void describe(CLI::App* app, const std::string& text) { long_descriptions()[app] = text; }

std::string HelpFormatter::make_description(const CLI::App* app) const {
  const auto it = long_descriptions().find(app);
  if (it == long_descriptions().end()) return CLI::Formatter::make_description(app);
  return it->second + "\n\n";
}

std::string HelpFormatter::make_option_opts(const CLI::Option* opt) const {
  std::string s = CLI::Formatter::make_option_opts(opt);
  for (const char* type : {" INT:", " FLOAT:", " TEXT:", " UINT:"}) {
    if (s.rfind(type, 0) == 0) return " " + s.substr(std::strlen(type));
  }
  return s;
}

std::vector<CLI::ConfigItem> CommandConfig::from_config(std::istream& input) const {
  // Section markers ("++", "--") and other commands' sections are dropped, so that one file
  // can hold [train] and [walk] and only the command being run is configured.
  std::vector<CLI::ConfigItem> items;
  for (CLI::ConfigItem& item : CLI::ConfigTOML::from_config(input)) {
    if (item.name == "++" || item.name == "--") continue;
    if (item.parents.empty()) item.parents = {command_};
    if (std::find(commands_.begin(), commands_.end(), item.parents[0]) == commands_.end()) {
      throw CLI::ConfigError("unknown section [" + item.parents[0] +
                             "] (sections are commands: " + join(commands_, ", ") + ")");
    }
    if (item.parents.size() > 1) {  // [train.x] key: no flag lives there; say so, not drop it
      std::string table = item.parents[0];
      for (size_t i = 1; i < item.parents.size(); ++i) table += "." + item.parents[i];
      throw CLI::ConfigError("key '" + item.name + "' is under [" + table +
                             "], which holds no flags; put it under [" + item.parents[0] +
                             "] (or at the top)");
    }
    if (item.parents[0] == command_) items.push_back(std::move(item));
  }
  return items;
}

}  // namespace dtsim::cli
