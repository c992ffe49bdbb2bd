#include "train/cli/output_file.h"

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <utility>

#include "train/cli/args.h"

namespace dtsim::cli {

OutputFile::OutputFile(const std::string& command, const std::string& flag, const std::string& path)
    : path_(path), tmp_(path + ".tmp") {
  if (path.empty()) fail(command, "--" + flag + " needs a file name");
  file_ = std::fopen(tmp_.c_str(), "wb");
  if (file_ == nullptr) {
    fail(command, "--" + flag + " " + path + " cannot be written (" + std::strerror(errno) + ")");
  }
}

OutputFile::OutputFile(OutputFile&& o) noexcept
    : path_(std::move(o.path_)), tmp_(std::move(o.tmp_)), file_(std::exchange(o.file_, nullptr)) {}

OutputFile& OutputFile::operator=(OutputFile&& o) noexcept {
  if (this != &o) {
    discard();
    path_ = std::move(o.path_);
    tmp_ = std::move(o.tmp_);
    file_ = std::exchange(o.file_, nullptr);
  }
  return *this;
}

OutputFile::~OutputFile() { discard(); }

void OutputFile::discard() {
  if (file_ == nullptr) return;
  std::fclose(file_);
  std::remove(tmp_.c_str());
  file_ = nullptr;
}

void OutputFile::commit(const std::string& text) {
  if (file_ == nullptr) throw std::runtime_error("output file " + path_ + " is not open");
  const bool written = std::fwrite(text.data(), 1, text.size(), file_) == text.size();
  const bool closed = std::fclose(file_) == 0;
  file_ = nullptr;
  if (!written || !closed || std::rename(tmp_.c_str(), path_.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    std::remove(tmp_.c_str());
    throw std::runtime_error("cannot write " + path_ + ": " + why);
  }
}

}  // namespace dtsim::cli
