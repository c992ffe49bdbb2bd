// An output file that is either complete or absent: opened as FILE.tmp before any work runs
// (so an unwritable path is a usage error up front), renamed onto FILE by commit(), and
// removed when dropped uncommitted (a failed run leaves no partial file).
#pragma once

#include <cstdio>
#include <memory>
#include <string>

namespace dtsim::cli {

class OutputFile {
 public:
  OutputFile() = default;
  // Creates `path`.tmp; throws UsageError naming `flag` when it cannot be created.
  OutputFile(const std::string& command, const std::string& flag, const std::string& path);
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;
  OutputFile(OutputFile&& o) noexcept;
  OutputFile& operator=(OutputFile&& o) noexcept;
  ~OutputFile();

  bool open() const { return file_ != nullptr; }
  const std::string& path() const { return path_; }
  // Writes `text` to FILE.tmp, closes it and renames it onto FILE; throws on an I/O error.
  void commit(const std::string& text);

 private:
  void discard();

  std::string path_, tmp_;
  std::FILE* file_ = nullptr;
};

}  // namespace dtsim::cli
