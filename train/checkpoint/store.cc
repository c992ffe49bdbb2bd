#include "train/checkpoint/store.h"

#include <fcntl.h>
#include <limits.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <regex>
#include <tuple>

#include "runtime/types.h"

namespace dtsim::train::checkpoint {
namespace fs = std::filesystem;
namespace {

std::string os_error(const std::string& what, const std::string& path) {
  return what + " " + path + ": " + std::strerror(errno);
}

// The names a save creates: anything else in a save directory is someone else's.
bool ours(const std::string& name) {
  static const std::regex pattern(R"(step-\d{8}(\.partial)?|dtsim-checkpoint\.json(\.tmp)?)");
  return std::regex_match(name, pattern);
}

// The chunks of `t` lie inside it, overlap nowhere and add up to its size, so they tile it:
// by intervals (sorted by row, each against those whose rows it reaches), not per element.
void check_tiling(const std::string& name, TensorMeta& t) {
  std::sort(t.chunks.begin(), t.chunks.end(), [](const Chunk& a, const Chunk& b) {
    return std::tie(a.box.row0, a.box.col0) < std::tie(b.box.row0, b.box.col0);
  });
  const Box whole{0, 0, t.rows, t.cols};
  int64_t covered = 0;
  for (const Chunk& c : t.chunks) {
    if (c.box.size() <= 0 || intersect(whole, c.box).size() != c.box.size()) {
      throw Error("checkpoint save: a chunk of " + name + " lies outside its shape");
    }
    covered += c.box.size();
  }
  for (size_t i = 0; i < t.chunks.size(); ++i) {
    const Box& a = t.chunks[i].box;
    for (size_t j = i + 1; j < t.chunks.size() && t.chunks[j].box.row0 < a.row0 + a.rows; ++j) {
      if (intersect(a, t.chunks[j].box).size() != 0) {
        throw Error("checkpoint save: two ranks wrote the same element of " + name);
      }
    }
  }
  if (covered != whole.size()) throw Error("checkpoint save: no rank wrote part of " + name);
}

}  // namespace

void crash_point() {
  static const long at = [] {
    const char* v = std::getenv("DTSIM_CHECKPOINT_CRASH_AT");
    return v != nullptr ? std::atol(v) : 0L;
  }();
  static std::atomic<long> reached{0};
  if (at > 0 && ++reached == at) _exit(86);
}

std::string step_folder(int64_t step) {
  char name[32];
  std::snprintf(name, sizeof name, "step-%08lld", static_cast<long long>(step));
  return name;
}

std::string shard_file(int rank, int ranks) {
  char name[64];
  std::snprintf(name, sizeof name, "shard-%05d-of-%05d.safetensors", rank, ranks);
  return name;
}

void write_synced(const std::string& path, const std::vector<std::span<const std::byte>>& pieces) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw Error(os_error("cannot create", path));
  std::vector<iovec> io;
  for (const std::span<const std::byte>& p : pieces) {
    if (!p.empty()) io.push_back({const_cast<std::byte*>(p.data()), p.size()});
  }
  // In writes of at most kBatch bytes, each handed to the disk at once (sync_file_range, no
  // wait), so that the disk writes one batch while the next is copied and the fsync below
  // finds little left; fsync alone makes the file durable.
  constexpr size_t kBatch = size_t{8} << 20;
  size_t next = 0;  // the first iovec not written whole
  off_t written = 0, handed = 0;
  while (next < io.size()) {
    size_t count = 0, bytes = 0;
    while (next + count < io.size() && count < IOV_MAX && bytes < kBatch) {
      bytes += io[next + count++].iov_len;
    }
    const size_t over = bytes > kBatch ? bytes - kBatch : 0;  // the last iovec's part left
    io[next + count - 1].iov_len -= over;
    const ssize_t n = ::writev(fd, io.data() + next, static_cast<int>(count));
    io[next + count - 1].iov_len += over;
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ::close(fd);
      throw Error(os_error("cannot write", path));
    }
    for (size_t left = static_cast<size_t>(n); left > 0;) {  // skip what was written
      const size_t k = std::min(left, io[next].iov_len);
      io[next].iov_base = static_cast<char*>(io[next].iov_base) + k;
      io[next].iov_len -= k;
      left -= k;
      if (io[next].iov_len == 0) ++next;
    }
    while (next < io.size() && io[next].iov_len == 0) ++next;
    written += n;
    if (written - handed >= static_cast<off_t>(kBatch)) {
      ::sync_file_range(fd, handed, written - handed, SYNC_FILE_RANGE_WRITE);  // a hint
      handed = written;
    }
    crash_point();
  }
  if (::fsync(fd) != 0) {
    ::close(fd);
    throw Error(os_error("cannot fsync", path));
  }
  ::close(fd);
}

void write_synced(const std::string& path, std::span<const std::byte> bytes) {
  write_synced(path, std::vector<std::span<const std::byte>>{bytes});
}

void fsync_dir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw Error(os_error("cannot open", dir));
  ::fsync(fd);
  ::close(fd);
}

void replace_synced(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  write_synced(tmp, std::as_bytes(std::span<const char>(text.data(), text.size())));
  crash_point();
  if (std::rename(tmp.c_str(), path.c_str()) != 0) throw Error(os_error("cannot rename", tmp));
  fsync_dir(fs::path(path).parent_path().string());
}

namespace {

// Fills `out` from `fd` at `at`; false when the file ends first.
bool pread_all(int fd, uint64_t at, std::span<std::byte> out) {
  size_t done = 0;
  while (done < out.size()) {
    const ssize_t n = ::pread(fd, out.data() + done, out.size() - done, at + done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

class ShardFile {
 public:
  explicit ShardFile(const std::string& path)
      : path_(path), fd_(::open(path.c_str(), O_RDONLY | O_CLOEXEC)) {
    if (fd_ < 0) throw UsageError(os_error("cannot open checkpoint shard", path));
  }
  ~ShardFile() { ::close(fd_); }
  ShardFile(const ShardFile&) = delete;
  ShardFile& operator=(const ShardFile&) = delete;
  void read(uint64_t at, std::span<std::byte> out, uint64_t begin, uint64_t end) const {
    if (!pread_all(fd_, at, out)) {
      throw UsageError("checkpoint shard " + path_ + " is truncated: bytes " +
                       std::to_string(begin) + "-" + std::to_string(end) +
                       " are missing; save it again");
    }
  }

 private:
  std::string path_;
  int fd_;
};

}  // namespace

void read_into(const std::string& path, uint64_t begin, std::span<std::byte> out) {
  ShardFile(path).read(begin, out, begin, begin + out.size());
}

uint64_t read_checksummed(const std::string& path, uint64_t begin, uint64_t end, int version,
                          std::span<std::byte> out) {
  constexpr uint64_t kBlock = uint64_t{1} << 20;  // a multiple of Checksum's 32 bytes
  const ShardFile file(path);
  std::vector<std::byte> scratch(out.empty() ? std::min(kBlock, end - begin) : 0);
  Checksum sum(version);
  for (uint64_t at = begin; at < end; at += kBlock) {
    const size_t n = static_cast<size_t>(std::min(kBlock, end - at));
    const std::span<std::byte> block =
        out.empty() ? std::span<std::byte>(scratch).first(n) : out.subspan(at - begin, n);
    file.read(at, block, begin, end);
    sum.update(block);
  }
  return sum.finish();
}

HugeBuffer::HugeBuffer(size_t floats) : size_(floats) {
  constexpr size_t kHuge = size_t{2} << 20;
  map_bytes_ = floats * sizeof(float) + kHuge;  // room to start on a 2 MiB boundary
  map_ = ::mmap(nullptr, map_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (map_ == MAP_FAILED)
    throw Error(os_error("cannot map", std::to_string(map_bytes_) + " bytes"));
  const uintptr_t at = (reinterpret_cast<uintptr_t>(map_) + kHuge - 1) / kHuge * kHuge;
  data_ = reinterpret_cast<float*>(at);
  ::madvise(data_, floats * sizeof(float), MADV_HUGEPAGE);  // advice: fine to be refused
}

HugeBuffer::~HugeBuffer() { ::munmap(map_, map_bytes_); }

std::vector<std::byte> read_range(const std::string& path, uint64_t begin, uint64_t end) {
  std::vector<std::byte> out(end - begin);
  read_into(path, begin, out);
  return out;
}

std::string read_text(const std::string& path) {
  const uintmax_t size = fs::file_size(path);
  const std::vector<std::byte> b = read_range(path, 0, size);
  return std::string(reinterpret_cast<const char*>(b.data()), b.size());
}

std::optional<Committed> read_marker(const std::string& dir) {
  const std::string path = (fs::path(dir) / kMarkerName).string();
  std::error_code ec;
  if (!fs::exists(path, ec)) return std::nullopt;
  Committed c;
  try {
    const nlohmann::json j = nlohmann::json::parse(read_text(path));
    if (j.value("format", "") != "dtsim-checkpoint")
      throw Error("no \"format\": \"dtsim-checkpoint\"");
    const int version = j.at("version");
    if (version > kFormatVersion) {
      throw UsageError(path + " has format version " + std::to_string(version) +
                       ", newer than this dtsim reads (" + std::to_string(kFormatVersion) +
                       "); use the dtsim that saved it");
    }
    c.step = j.at("step");
    c.folder = j.at("folder");
    if (c.folder != step_folder(c.step)) throw Error("its folder does not match its step");
  } catch (const UsageError&) {
    throw;
  } catch (const std::exception& e) {
    throw UsageError(path + " is not a dtsim checkpoint marker (" + e.what() + ")");
  }
  return c;
}

Metadata read_checkpoint(const std::string& dir, const std::string& flag, std::string* folder) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    throw UsageError(flag + " " + dir + ": no such directory; give a directory that --save wrote");
  }
  const std::optional<Committed> c = read_marker(dir);
  if (!c) {
    throw UsageError(flag + " " + dir + " is not a dtsim checkpoint (it has no " + kMarkerName +
                     "); give a directory that --save wrote");
  }
  const fs::path path = fs::path(dir) / c->folder / kMetadataName;
  if (!fs::exists(path, ec)) {
    throw UsageError(flag + " " + dir + ": " + path.string() +
                     " is missing; the checkpoint was damaged after it was saved");
  }
  Metadata m = parse_metadata(read_text(path.string()), path.string());
  if (m.step != c->step) {
    throw UsageError(path.string() + " is at step " + std::to_string(m.step) + " but " +
                     kMarkerName + " names step " + std::to_string(c->step));
  }
  if (folder != nullptr) *folder = (fs::path(dir) / c->folder).string();
  return m;
}

void check_save_dir(const std::string& dir) {
  std::error_code ec;
  if (fs::exists(dir, ec) && !fs::is_directory(dir, ec)) {
    throw UsageError("--save " + dir + " is a file, not a directory; give a new directory");
  }
  if (fs::is_directory(dir, ec)) {
    for (const fs::directory_entry& e : fs::directory_iterator(dir)) {
      const std::string name = e.path().filename().string();
      if (!ours(name)) {
        throw UsageError("--save " + dir + " holds " + name +
                         ", which is not part of a dtsim checkpoint; give a new or empty "
                         "directory, or one that --save wrote");
      }
    }
    read_marker(dir);  // a marker must be ours
    return;
  }
  const fs::path parent = fs::absolute(dir).parent_path();
  if (!fs::is_directory(parent, ec)) {
    throw UsageError("--save " + dir + ": its parent " + parent.string() +
                     " does not exist; create it first");
  }
  if (!fs::create_directory(dir, ec) && ec) {
    throw UsageError("--save " + dir + ": cannot create it (" + ec.message() + ")");
  }
}

std::string begin_save(const std::string& dir, int64_t step) {
  const std::optional<Committed> committed = read_marker(dir);
  for (const fs::directory_entry& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    // What an interrupted save left: never the committed folder, never another's file.
    if (!ours(name) || name == kMarkerName || (committed && name == committed->folder)) continue;
    fs::remove_all(e.path());
  }
  const fs::path partial = fs::path(dir) / (step_folder(step) + ".partial");
  fs::create_directory(partial);
  fsync_dir(dir);
  return partial.string();
}

uint64_t commit_save(const std::string& dir, Metadata meta,
                     const std::map<std::string, TensorMeta>& expected) {
  const fs::path partial = fs::path(dir) / (step_folder(meta.step) + ".partial");
  meta.tensors = expected;
  for (auto& [name, t] : meta.tensors) t.chunks.clear();
  std::vector<fs::path> files;
  for (const fs::directory_entry& e : fs::directory_iterator(partial)) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  for (const fs::path& f : files) {
    for (const HeaderEntry& e : read_safetensors_header(f.string())) {
      std::string tensor;
      int64_t row0 = 0, col0 = 0;
      if (!parse_entry_name(e.name, &tensor, &row0, &col0) || e.shape.empty() ||
          meta.tensors.find(tensor) == meta.tensors.end()) {
        throw Error("checkpoint save: " + f.string() + " holds an unexpected entry " + e.name);
      }
      const int64_t rows = e.shape[0], cols = e.shape.size() > 1 ? e.shape[1] : 1;
      meta.tensors[tensor].chunks.push_back(
          {{row0, col0, rows, cols}, f.filename().string(), e.begin, e.end, e.sum});
    }
  }
  // Every element of every tensor written exactly once: else the ranks' ownership is wrong.
  uint64_t bytes = 0;
  for (auto& [name, t] : meta.tensors) {
    bytes += static_cast<uint64_t>(t.rows * t.cols) * sizeof(float);
    check_tiling(name, t);
  }
  replace_synced((partial / kMetadataName).string(), metadata_json(meta));
  crash_point();
  const fs::path final_folder = fs::path(dir) / step_folder(meta.step);
  const std::optional<Committed> previous = read_marker(dir);
  if (previous && previous->folder == step_folder(meta.step)) {
    throw Error("checkpoint save: " + final_folder.string() + " is the committed checkpoint");
  }
  fs::rename(partial, final_folder);
  fsync_dir(dir);
  crash_point();
  const nlohmann::ordered_json marker = {{"format", "dtsim-checkpoint"},
                                         {"version", kFormatVersion},
                                         {"step", meta.step},
                                         {"folder", step_folder(meta.step)}};
  replace_synced((fs::path(dir) / kMarkerName).string(), marker.dump(1) + "\n");  // the commit
  crash_point();
  if (previous) fs::remove_all(fs::path(dir) / previous->folder);
  return bytes;
}

}  // namespace dtsim::train::checkpoint
