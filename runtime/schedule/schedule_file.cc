// Schedule files: a header of "key value" lines (the stress options that make the plan),
// then one line per scheduling point: the chosen rank and the hash of the runnable set.
//
//   dtsim-schedule 1
//   ranks 4
//   ...
//   steps 812
//   2 9c2f0e5b1a3d4c77
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "runtime/schedule/explore.h"

namespace dtsim::schedule {
namespace {

// The longest line a schedule file holds ("seed 18446744073709551615", a step line).
constexpr size_t kMaxLine = 64;
// The same bounds as dtsim stress's flags (train/cli/stress.cc): a file can ask no more.
constexpr int64_t kMaxRanks = 256;
constexpr int64_t kMaxCalls = 100000;
constexpr int64_t kMaxNumel = int64_t{1} << 24;
constexpr int64_t kMaxIteration = 1000000000;
// More steps than any run of the bounded plans takes is a damaged file.
constexpr int64_t kMaxSteps = int64_t{1} << 32;

// `text` as it may be echoed: printable ASCII, other bytes as \xNN, at most 40 of them.
std::string printable(const std::string& text) {
  std::string out;
  for (size_t i = 0; i < text.size() && i < 40; ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", c);
      out += hex;
    }
  }
  if (text.size() > 40) out += "...";
  return out;
}

UsageError bad(const std::string& path, const std::string& what) {
  return UsageError("schedule file " + printable(path) + ": " + what +
                    "; pass a file that a failing `dtsim stress --scheduler` run wrote");
}

// Reads one line of at most kMaxLine bytes into *line; false at the end of the file. A longer
// line is an error: /dev/zero or a binary file must not be read whole.
bool read_line(std::istream& in, const std::string& path, std::string* line) {
  line->clear();
  for (int c; (c = in.get()) != EOF;) {
    if (c == '\n') return true;
    if (line->size() == kMaxLine) {
      throw bad(path, "has a line longer than " + std::to_string(kMaxLine) + " bytes ('" +
                          printable(*line) + "')");
    }
    line->push_back(static_cast<char>(c));
  }
  return !line->empty();
}

// A whole number of decimal (base 10) or hex (base 16) digits, no sign, at most `hi`.
bool parse_number(const std::string& text, int base, uint64_t hi, uint64_t* out) {
  if (text.empty() || text.size() > 20) return false;
  uint64_t v = 0;
  for (char ch : text) {
    int d;
    if (ch >= '0' && ch <= '9') {
      d = ch - '0';
    } else if (base == 16 && ch >= 'a' && ch <= 'f') {
      d = ch - 'a' + 10;
    } else if (base == 16 && ch >= 'A' && ch <= 'F') {
      d = ch - 'A' + 10;
    } else {
      return false;
    }
    if (v > (UINT64_MAX - d) / base) return false;
    v = v * base + d;
  }
  if (v > hi) return false;
  *out = v;
  return true;
}

// The value of header line `line` (key `key`), a decimal number in lo..hi.
uint64_t header_number(const std::string& path, const std::string& line, const std::string& key,
                       const std::string& value, uint64_t lo, uint64_t hi) {
  uint64_t v = 0;
  if (!parse_number(value, 10, hi, &v) || v < lo) {
    throw bad(path, "'" + printable(line) + "': " + key + " must be a whole number from " +
                        std::to_string(lo) + " to " + std::to_string(hi));
  }
  return v;
}

}  // namespace

std::string schedule_file_text(const ScheduleFile& f) {
  std::ostringstream out;
  const StressOptions& o = f.options;
  out << kScheduleMagic << "\nranks " << o.ranks << "\nseed " << o.seed << "\niteration "
      << f.iteration << "\ncalls " << o.calls_per_iteration << "\nmax-numel " << o.max_numel
      << "\nmutant " << (o.planted ? o.planted->name : "none") << "\nunsafe-live-sends "
      << (o.unsafe_live_sends ? 1 : 0) << "\nsteps " << f.record.choices.size() << "\n";
  char line[48];
  for (size_t i = 0; i < f.record.choices.size(); ++i) {
    std::snprintf(line, sizeof line, "%d %016llx\n", f.record.choices[i],
                  static_cast<unsigned long long>(f.record.runnable_hash[i]));
    out << line;
  }
  return out.str();
}

ScheduleFile read_schedule_file(const std::string& path, std::span<const PlantedBug> known) {
  std::ifstream in(path);
  if (!in) throw bad(path, "cannot be opened");
  std::string line;
  if (!read_line(in, path, &line) || line != kScheduleMagic)
    throw bad(path, "does not start with '" + std::string(kScheduleMagic) + "'");
  ScheduleFile f;
  uint64_t steps = 0;
  bool have_steps = false;
  while (!have_steps && read_line(in, path, &line)) {
    std::istringstream kv(line);
    std::string key, value, extra;
    kv >> key >> value >> extra;
    if (!extra.empty()) throw bad(path, "'" + printable(line) + "' has more than a key and value");
    if (key == "ranks") {
      f.options.ranks = static_cast<int>(header_number(path, line, key, value, 1, kMaxRanks));
    } else if (key == "seed") {
      f.options.seed = header_number(path, line, key, value, 0, INT64_MAX);
    } else if (key == "iteration") {
      f.iteration = static_cast<int>(header_number(path, line, key, value, 0, kMaxIteration));
    } else if (key == "calls") {
      f.options.calls_per_iteration =
          static_cast<int>(header_number(path, line, key, value, 1, kMaxCalls));
    } else if (key == "max-numel") {
      f.options.max_numel = header_number(path, line, key, value, 1, kMaxNumel);
    } else if (key == "mutant") {
      f.options.planted = nullptr;
      for (const PlantedBug& b : known) {
        if (value == b.name) f.options.planted = &b;
      }
      if (value != "none" && f.options.planted == nullptr) {
        throw bad(path, "names mutant '" + printable(value) + "', which " +
                            (known.empty() ? "only the test binary dtsim_with_mutants plants"
                                           : "this binary does not know"));
      }
    } else if (key == "unsafe-live-sends") {
      f.options.unsafe_live_sends = header_number(path, line, key, value, 0, 1) == 1;
    } else if (key == "steps") {
      steps = header_number(path, line, key, value, 0, kMaxSteps);
      have_steps = true;
    } else {
      throw bad(path, "unknown header line '" + printable(line) + "'");
    }
  }
  if (!have_steps) throw bad(path, "has no 'steps' line");
  for (uint64_t i = 0; i < steps; ++i) {
    std::string rank_text, hash_text, extra;
    uint64_t rank = 0, hash = 0;
    if (read_line(in, path, &line)) {
      std::istringstream words(line);
      words >> rank_text >> hash_text >> extra;
    }
    if (!parse_number(rank_text, 10, static_cast<uint64_t>(f.options.ranks) - 1, &rank) ||
        !parse_number(hash_text, 16, UINT64_MAX, &hash) || !extra.empty()) {
      throw bad(path, "step " + std::to_string(i) + " is missing or is not '<rank below " +
                          std::to_string(f.options.ranks) + "> <16 hex digits>'");
    }
    f.record.choices.push_back(static_cast<int>(rank));
    f.record.runnable_hash.push_back(hash);
    f.record.preempted.push_back(0);
  }
  return f;
}

}  // namespace dtsim::schedule
