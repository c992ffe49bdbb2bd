// Output files (--report, --trace, --html) that are either complete or absent, and never
// write over what is not theirs. Declaring one checks its path before any work runs, so
// that a bad path is a usage error (exit 2) and not a lost run:
//   - "-" (or a path that is standard output, such as /dev/stdout) writes to standard
//     output; while one does, the command's text goes to standard error, so that standard
//     output holds the file alone (`dtsim train --report - | jq`);
//   - an existing file that is not a regular file (/dev/null, a FIFO, a terminal) is written
//     in place at commit; nothing is ever renamed over it;
//   - a new file, or a regular file (or a symlink to one, which survives) that is empty or
//     dtsim's own (it carries the generator mark below where dtsim puts it), is written by
//     commit() to a unique temporary file beside its target (FILE.XXXXXX, made like
//     mkstemp) and renamed onto it. Declaring it only probes that such a file can be made,
//     so nothing lies beside the target while the run works, even if the process is killed
//     with SIGKILL; SIGINT, SIGTERM, SIGHUP or SIGPIPE during commit() remove the temporary
//     file (the process then dies of that signal: exit status 130, 143, ...);
//   - a regular file that is not dtsim's, a directory, a missing folder, a dangling symlink,
//     an unwritable folder, or the same file as another output of this process are usage
//     errors.
//
// The generator mark: every output dtsim writes names its writer first thing, e.g. "dtsim
// train": a JSON object's first field "generator" (json_with_generator), an HTML page's
// <meta name="generator"> (html_generator_meta), a schedule file its "dtsim-schedule 1".
//
// Thread safety: declare, commit and drop outputs on one thread (the main one); the signal
// handler may run on any thread at any time.
#pragma once

#include <sys/types.h>

#include <cstdio>
#include <initializer_list>
#include <string>

namespace dtsim::cli {

class OutputFile {
 public:
  OutputFile() = default;
  // Declares `path` as the output of `--flag` of `command`; throws UsageError with one line
  // saying what is wrong and how to fix it. With `writer` false (an MPI process that is not
  // the one writing) the path is checked alike but nothing is made: open() is false, so
  // every process of a job meets a bad path before any work.
  OutputFile(const std::string& command, const std::string& flag, const std::string& path,
             bool writer = true);
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;
  OutputFile(OutputFile&& o) noexcept;
  OutputFile& operator=(OutputFile&& o) noexcept;
  ~OutputFile();

  bool open() const { return kind_ != Kind::kNone; }
  // The path as given, or "standard output" (also after commit).
  const std::string& name() const { return name_; }
  // Writes `text` to the target (see above); throws std::runtime_error on an I/O error,
  // leaving no partial file behind.
  void commit(const std::string& text);
  // Two steps, for a command with several outputs that must all appear or none: stage()
  // writes a replaced file's temporary (throws as commit() does, leaving nothing), and
  // commit_staged() renames it onto the target (or writes standard output or a device).
  // An output staged and never committed leaves nothing behind.
  void stage(const std::string& text);
  void commit_staged();
  // Commits every staged output of `outputs` (those not open are skipped): standard output
  // and devices first, since they cannot be taken back, then the renames.
  static void commit_all(std::initializer_list<OutputFile*> outputs);

 private:
  enum class Kind { kNone, kStdout, kInPlace, kReplace };
  void discard() noexcept;

  Kind kind_ = Kind::kNone;
  std::string path_;    // as given
  std::string name_;    // path_, or "standard output"
  std::string target_;  // kReplace: the regular file to rename onto (symlinks resolved)
  mode_t mode_ = 0;     // kReplace: the new file's permissions
  // stage()'s: the temporary file written (kReplace) or the text kept (others).
  bool staged_ = false;
  std::string staged_tmp_;
  int staged_slot_ = -1;
  std::string staged_text_;
};

// Whether `path` is free for an output: a new file, or a regular file OutputFile would replace.
bool may_write(const std::string& path);

// A JSON object's text as nlohmann::json::dump prints it (indented or compact, not empty)
// with "generator": `generator` put first, so that OutputFile knows the file for dtsim's.
std::string json_with_generator(const std::string& object_text, const std::string& generator);
// The <meta> tag that marks an HTML page's head as `generator`'s (already HTML-escaped).
std::string html_generator_meta(const std::string& generator);

}  // namespace dtsim::cli
