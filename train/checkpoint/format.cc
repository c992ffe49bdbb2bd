#include "train/checkpoint/format.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>

#include "runtime/types.h"

namespace dtsim::train::checkpoint {
namespace {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; this build writes host order");

using ojson = nlohmann::ordered_json;

std::vector<int64_t> shape_of(const TensorMeta& t) {
  if (t.vector) return {t.rows};
  return {t.rows, t.cols};
}

uint64_t lane(uint64_t h, uint64_t word) { return std::rotl(h ^ word * kK1, 29) * kK2; }

uint64_t splitmix(uint64_t x) {  // a bijection that spreads every bit over all of them
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t load64(const std::byte* p) {
  uint64_t w;
  std::memcpy(&w, p, 8);
  return w;
}

}  // namespace

void Checksum::update(std::span<const std::byte> bytes) {
  if (!mix_) {
    for (std::byte b : bytes) h_[0] = (h_[0] ^ static_cast<uint64_t>(b)) * 1099511628211ull;
    return;
  }
  if (tail_ != 0) throw Error("checksum: only the last piece may be other than 32-byte blocks");
  const std::byte* p = bytes.data();
  const size_t n = bytes.size();
  uint64_t h0 = h_[0], h1 = h_[1], h2 = h_[2], h3 = h_[3];  // four independent chains
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    h0 = lane(h0, load64(p + i));
    h1 = lane(h1, load64(p + i + 8));
    h2 = lane(h2, load64(p + i + 16));
    h3 = lane(h3, load64(p + i + 24));
  }
  for (; i + 8 <= n; i += 8, ++tail_) h0 = lane(h0, load64(p + i));
  if (i < n) {
    uint64_t w = 0;
    std::memcpy(&w, p + i, n - i);
    h1 = lane(h1, w);
    ++tail_;
  }
  h_[0] = h0, h_[1] = h1, h_[2] = h2, h_[3] = h3;
  length_ += n;
}

uint64_t Checksum::finish() const {
  if (!mix_) return h_[0];
  uint64_t h = length_;
  for (const uint64_t x : h_) h = (h ^ splitmix(x)) * kK1;
  return splitmix(h);
}

uint64_t mix64(std::span<const std::byte> bytes) {
  Checksum c(kFormatVersion);
  c.update(bytes);
  return c.finish();
}

uint64_t fnv1a64(std::span<const std::byte> bytes) {
  Checksum c(1);
  c.update(bytes);
  return c.finish();
}

uint64_t checksum(int version, std::span<const std::byte> bytes) {
  Checksum c(version);
  c.update(bytes);
  return c.finish();
}

const char* checksum_name(int version) { return version >= 2 ? "mix64" : "fnv1a64"; }

std::string hex64(uint64_t v) {
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(v));
  return text;
}

Box intersect(const Box& a, const Box& b) {
  Box o;
  o.row0 = std::max(a.row0, b.row0);
  o.col0 = std::max(a.col0, b.col0);
  o.rows = std::max<int64_t>(0, std::min(a.row0 + a.rows, b.row0 + b.rows) - o.row0);
  o.cols = std::max<int64_t>(0, std::min(a.col0 + a.cols, b.col0 + b.cols) - o.col0);
  if (o.rows == 0 || o.cols == 0) o.rows = o.cols = 0;
  return o;
}

std::string entry_name(const std::string& tensor, int64_t row0, int64_t col0) {
  return tensor + "@" + std::to_string(row0) + "," + std::to_string(col0);
}

bool parse_entry_name(const std::string& name, std::string* tensor, int64_t* row0, int64_t* col0) {
  const size_t at = name.rfind('@');
  if (at == std::string::npos) return false;
  long long r = 0, c = 0;
  if (std::sscanf(name.c_str() + at + 1, "%lld,%lld", &r, &c) != 2) return false;
  *tensor = name.substr(0, at);
  *row0 = r;
  *col0 = c;
  return true;
}

std::string metadata_json(const Metadata& m) {
  ojson tensors = ojson::object();
  for (const auto& [name, t] : m.tensors) {
    ojson chunks = ojson::array();
    for (const Chunk& c : t.chunks) {
      chunks.push_back({{"offsets", {c.box.row0, c.box.col0}},
                        {"sizes", {c.box.rows, c.box.cols}},
                        {"file", c.file},
                        {"byte_range", {c.begin, c.end}},
                        {checksum_name(m.version), hex64(c.sum)}});
    }
    tensors[name] = {{"dtype", "F32"},
                     {"shape", shape_of(t)},
                     {"flat_offset", t.flat_offset},
                     {"chunks", chunks}};
  }
  const SavedFrom& s = m.saved_from;
  const ojson j = {{"format", "dtsim-checkpoint"},
                   {"version", m.version},
                   {"step", m.step},
                   {"data_position",
                    "sample i of step s is generated from (seed, s, i): training resumes at step " +
                        std::to_string(m.step) + " with the same samples on any mesh"},
                   {"saved_from",
                    {{"strategy", s.strategy},
                     {"mesh", s.mesh},
                     {"ranks", s.ranks},
                     {"model", s.model},
                     {"optimizer", s.optimizer},
                     {"precision", s.precision},
                     {"batch", s.batch},
                     {"seed", s.seed}}},
                   {"tensors", tensors}};
  return j.dump(1) + "\n";
}

Metadata parse_metadata(const std::string& text, const std::string& where) {
  Metadata m;
  try {
    const nlohmann::json j = nlohmann::json::parse(text);
    if (j.value("format", "") != "dtsim-checkpoint") {
      throw Error(where +
                  " is not dtsim checkpoint metadata (no \"format\": \"dtsim-checkpoint\")");
    }
    m.version = j.at("version").get<int>();
    if (m.version > kFormatVersion) {
      throw UsageError(where + " has format version " + std::to_string(m.version) +
                       ", newer than this dtsim reads (" + std::to_string(kFormatVersion) +
                       "); resume with the dtsim that saved it");
    }
    m.step = j.at("step").get<int64_t>();
    const nlohmann::json& s = j.at("saved_from");
    m.saved_from = {.strategy = s.at("strategy"),
                    .model = s.at("model"),
                    .optimizer = s.at("optimizer"),
                    .precision = s.at("precision"),
                    .mesh = s.at("mesh"),
                    .ranks = s.at("ranks"),
                    .batch = s.at("batch"),
                    .seed = s.at("seed")};
    for (const auto& [name, t] : j.at("tensors").items()) {
      TensorMeta& out = m.tensors[name];
      const std::vector<int64_t> shape = t.at("shape");
      if (shape.empty() || shape.size() > 2)
        throw Error(name + " has shape of rank " + std::to_string(shape.size()));
      out.rows = shape[0];
      out.cols = shape.size() == 2 ? shape[1] : 1;
      out.vector = shape.size() == 1;
      out.flat_offset = t.at("flat_offset");
      if (t.at("dtype") != "F32")
        throw Error(name + " has dtype " + t.at("dtype").dump() + ", not F32");
      for (const nlohmann::json& c : t.at("chunks")) {
        Chunk& k = out.chunks.emplace_back();
        k.box = {c.at("offsets")[0], c.at("offsets")[1], c.at("sizes")[0], c.at("sizes")[1]};
        k.file = c.at("file");
        k.begin = c.at("byte_range")[0];
        k.end = c.at("byte_range")[1];
        k.sum = std::stoull(c.at(checksum_name(m.version)).get<std::string>(), nullptr, 16);
        if (k.end - k.begin != static_cast<uint64_t>(k.box.size()) * sizeof(float) ||
            k.file.find('/') != std::string::npos) {
          throw Error(name + " has a chunk whose byte range does not hold its sizes");
        }
      }
    }
  } catch (const UsageError&) {
    throw;
  } catch (const std::exception& e) {
    throw UsageError(where + " is not valid checkpoint metadata: " + e.what());
  }
  return m;
}

ShardHead safetensors_head(const std::vector<ShardEntry>& entries) {
  ShardHead out;
  ojson header = ojson::object();
  ojson sums = ojson::object();
  uint64_t at = 0;
  for (const ShardEntry& e : entries) {
    const uint64_t n = e.data.size() * sizeof(float);
    header[e.name] = {{"dtype", "F32"}, {"shape", e.shape}, {"data_offsets", {at, at + n}}};
    const uint64_t sum = mix64(std::as_bytes(e.data));
    sums[e.name] = std::string(checksum_name(kFormatVersion)) + ":" + hex64(sum);
    Chunk& c = out.chunks.emplace_back();
    c.begin = at;
    c.end = at + n;
    c.sum = sum;
    at += n;
  }
  sums["format"] = "dtsim-checkpoint-shard";
  header["__metadata__"] = sums;
  std::string text = header.dump();
  text.resize((text.size() + 7) / 8 * 8, ' ');  // safetensors pads the header with spaces
  const uint64_t len = text.size();
  out.head.resize(8);
  std::memcpy(out.head.data(), &len, 8);
  out.head += text;
  for (Chunk& c : out.chunks) {
    c.begin += out.head.size();
    c.end += out.head.size();
  }
  return out;
}

std::vector<std::span<const std::byte>> safetensors_pieces(const ShardHead& head,
                                                           const std::vector<ShardEntry>& entries) {
  std::vector<std::span<const std::byte>> out;
  out.push_back(std::as_bytes(std::span<const char>(head.head)));
  for (const ShardEntry& e : entries) out.push_back(std::as_bytes(e.data));
  return out;
}

std::vector<HeaderEntry> read_safetensors_header(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw UsageError(path + ": " + std::strerror(errno));
  uint64_t len = 0;
  std::string text;
  const off_t file_size = ::lseek(fd, 0, SEEK_END);
  bool ok = ::pread(fd, &len, 8, 0) == 8 && len < (1u << 30) && 8 + len <= uint64_t(file_size);
  if (ok) {
    text.resize(len);
    ok = ::pread(fd, text.data(), len, 8) == static_cast<ssize_t>(len);
  }
  ::close(fd);
  if (!ok) throw UsageError(path + " is truncated: its safetensors header is incomplete");
  std::vector<HeaderEntry> out;
  try {
    const nlohmann::json h = nlohmann::json::parse(text);
    const nlohmann::json sums = h.value("__metadata__", nlohmann::json::object());
    for (const auto& [name, e] : h.items()) {
      if (name == "__metadata__") continue;
      HeaderEntry& x = out.emplace_back();
      x.name = name;
      x.dtype = e.at("dtype");
      x.shape = e.at("shape").get<std::vector<int64_t>>();
      x.begin = 8 + len + e.at("data_offsets")[0].get<uint64_t>();
      x.end = 8 + len + e.at("data_offsets")[1].get<uint64_t>();
      if (x.end > uint64_t(file_size)) {
        throw Error("entry " + name + " ends past the end of the file");
      }
      if (sums.contains(name)) {
        const std::string s = sums[name];
        x.sum = std::stoull(s.substr(s.find(':') + 1), nullptr, 16);
      }
    }
  } catch (const std::exception& e) {
    throw UsageError(path + " is not a valid safetensors file (" + e.what() + ")");
  }
  std::sort(out.begin(), out.end(),
            [](const HeaderEntry& a, const HeaderEntry& b) { return a.begin < b.begin; });
  return out;
}

}  // namespace dtsim::train::checkpoint
