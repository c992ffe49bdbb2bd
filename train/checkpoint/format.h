// The on-disk format of a dtsim checkpoint (docs/checkpoints.md shows one):
//
//   DIR/dtsim-checkpoint.json       the commit marker: format, version, step, the step's folder
//   DIR/step-000010/metadata.json   for every global tensor ("params/block0.w1", "adam_m/...",
//                                   "adam_v/...", "master/...", "momentum/...") its global
//                                   shape, dtype and the chunks covering it: global offsets and
//                                   sizes, file, byte range, mix64 checksum (as DCP's)
//   DIR/step-000010/shard-00003-of-00008.safetensors
//                                   what rank 3 wrote: one safetensors entry per chunk
//                                   ("params/block0.w1@0,16", F32, row-major), numpy-readable
//
// A checkpoint holds global tensors by the full model's names, each element written by one
// rank, so the same reader serves a resume on the same mesh and on any other.
//
// Thread safety: free functions on values; files are read and written by the caller's thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

namespace dtsim::train::checkpoint {

// Version 1 checksummed chunks with FNV-1a 64, version 2 with mix64 (both read).
inline constexpr int kFormatVersion = 2;
inline constexpr char kMarkerName[] = "dtsim-checkpoint.json";
inline constexpr char kMetadataName[] = "metadata.json";

// A chunk's checksum. mix64 (version 2): the bytes as little-endian 64-bit words (the last
// zero-padded) in four interleaved lanes, each lane h = rotl(h ^ w * K1, 29) * K2, the lanes
// and the length then folded and finalized with splitmix64's mixer. Every step is a
// bijection, so a change of any one word always changes the sum; it runs at memory speed.
// FNV-1a 64 (version 1) goes byte by byte, some 10 x slower.
uint64_t mix64(std::span<const std::byte> bytes);
uint64_t fnv1a64(std::span<const std::byte> bytes);
// The checksum a checkpoint of format `version` uses, and its name ("mix64", "fnv1a64").
uint64_t checksum(int version, std::span<const std::byte> bytes);
const char* checksum_name(int version);

inline constexpr uint64_t kK1 = 0x9e3779b97f4a7c15ull;  // odd: multiplying by it is a bijection
inline constexpr uint64_t kK2 = 0xd6e8feb86659fd93ull;

// checksum(version, ...) over bytes given piece by piece (to verify a block while it is in
// cache): every piece but the last must be a multiple of 32 bytes (throws Error otherwise).
class Checksum {
 public:
  explicit Checksum(int version) : mix_(version >= 2) {
    if (!mix_) h_[0] = 14695981039346656037ull;  // FNV-1a 64's offset basis
  }
  void update(std::span<const std::byte> bytes);
  uint64_t finish() const;

 private:
  bool mix_;
  uint64_t h_[4] = {kK1, kK2, ~kK1, ~kK2};  // mix64's lanes; FNV-1a's state is h_[0]
  uint64_t length_ = 0;
  int tail_ = 0;  // words past the last 32-byte block: the last piece's
};
std::string hex64(uint64_t v);

// A block [row0, row0 + rows) x [col0, col0 + cols) of a 2-D tensor (a vector: cols 1).
struct Box {
  int64_t row0 = 0, col0 = 0, rows = 0, cols = 0;
  int64_t size() const { return rows * cols; }
};
// The overlap of two blocks (size() 0 when none).
Box intersect(const Box& a, const Box& b);

struct Chunk {
  Box box;
  std::string file;             // in the step's folder
  uint64_t begin = 0, end = 0;  // byte range in the file
  uint64_t sum = 0;             // checksum(version, the bytes)
};

struct TensorMeta {
  int64_t rows = 0, cols = 0;
  bool vector = false;      // shape [rows] rather than [rows, cols]
  int64_t flat_offset = 0;  // where the tensor starts in the model's flat parameter vector
  std::vector<Chunk> chunks;
};

// What a run was saved from and must match to resume (the data position and the model).
struct SavedFrom {
  std::string strategy, model, optimizer, precision, mesh;
  int ranks = 0, batch = 0;
  uint64_t seed = 0;
};

struct Metadata {
  int version = kFormatVersion;
  int64_t step = 0;  // optimizer steps taken; the next step's data is (seed, step, i)
  SavedFrom saved_from;
  std::map<std::string, TensorMeta> tensors;  // by "kind/name"
};

// The text of metadata.json and back; parse_metadata throws Error naming what is wrong.
std::string metadata_json(const Metadata& m);
Metadata parse_metadata(const std::string& text, const std::string& where);

// One safetensors entry to write: a chunk of kind/tensor with its F32 data (not copied).
struct ShardEntry {
  std::string name;  // "params/block0.w1@row0,col0"
  std::vector<int64_t> shape;
  std::span<const float> data;
};
// A safetensors file holding `entries` in order: its head (8-byte little-endian header
// length, JSON header padded to 8 bytes), after which come the entries' raw little-endian
// data, and per entry its absolute byte range and mix64 checksum (__metadata__ lists them).
struct ShardHead {
  std::string head;
  std::vector<Chunk> chunks;  // box unset: the caller's
};
ShardHead safetensors_head(const std::vector<ShardEntry>& entries);
// The head, then every entry's data: what write_synced (store.h) writes, without a copy.
std::vector<std::span<const std::byte>> safetensors_pieces(const ShardHead& head,
                                                           const std::vector<ShardEntry>& entries);

// A safetensors file's entries, read from its header: name, shape, absolute byte range and
// the checksum __metadata__ lists (0 when absent). Throws Error naming the file.
struct HeaderEntry {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;
  uint64_t sum = 0;
};
std::vector<HeaderEntry> read_safetensors_header(const std::string& path);

// "params/block0.w1@0,16" -> kind/tensor "params/block0.w1", offsets (0, 16).
bool parse_entry_name(const std::string& name, std::string* tensor, int64_t* row0, int64_t* col0);
std::string entry_name(const std::string& tensor, int64_t row0, int64_t col0);

}  // namespace dtsim::train::checkpoint
