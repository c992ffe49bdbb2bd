// The checkpoint directory and its crash-safe commit (format.h names the files):
//
//   1. rank 0 removes what an interrupted save left (step folders the marker does not name,
//      *.partial) and makes step-N.partial/; barrier
//   2. every rank writes and fsyncs its shard file in it; barrier
//   3. rank 0 reads the shards' headers, checks that the chunks tile every tensor, writes
//      metadata.json (temporary name, fsync, rename), renames the folder to step-N/, then
//      writes dtsim-checkpoint.json.tmp, fsyncs it and renames it over the marker: the commit.
//      Only then is the previous step's folder removed; barrier
//
// A process killed anywhere before the marker's rename leaves the previous marker naming the
// previous, complete folder; a partial folder is never named by a marker.
//
// Thread safety: functions on paths; the protocol above decides who calls what when.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "train/checkpoint/format.h"

namespace dtsim::train::checkpoint {

// Testing (DTSIM_CHECKPOINT_CRASH_AT=N): the N-th crash point this process reaches during
// saves ends it at once (_exit(86)), as a kill there would; a no-op without the variable.
void crash_point();

// Writes `pieces` one after another to `path` (created or truncated), in writev calls of up to
// 8 MiB with no copy, each handed to the disk at once, and fsyncs it; throws Error naming it.
void write_synced(const std::string& path, const std::vector<std::span<const std::byte>>& pieces);
void write_synced(const std::string& path, std::span<const std::byte> bytes);
// Writes `path` under "<path>.tmp", fsyncs, renames it into place and fsyncs the folder.
void replace_synced(const std::string& path, const std::string& text);
void fsync_dir(const std::string& dir);
// Bytes [begin, begin + out.size()) of `path` into `out` (pread); throws UsageError when the
// file is missing or too short.
void read_into(const std::string& path, uint64_t begin, std::span<std::byte> out);
// The same, in blocks of 1 MiB, each checksummed while in cache; returns
// checksum(version, out). With `out` empty, reads [begin, end) through one block and only
// checksums it (a verification).
uint64_t read_checksummed(const std::string& path, uint64_t begin, uint64_t end, int version,
                          std::span<std::byte> out = {});
// A large scratch buffer of floats (zero-filled), backed by transparent huge pages where the
// kernel allows them: 2 MiB pages fault in 512 x less often than 4 KiB ones, and a page fault
// is costly on a virtual machine (docs/benchmarks.md). Throws Error when out of memory.
class HugeBuffer {
 public:
  explicit HugeBuffer(size_t floats);
  ~HugeBuffer();
  HugeBuffer(const HugeBuffer&) = delete;
  HugeBuffer& operator=(const HugeBuffer&) = delete;
  std::span<float> floats() const { return {data_, size_}; }

 private:
  void* map_ = nullptr;
  size_t map_bytes_ = 0;
  float* data_ = nullptr;
  size_t size_ = 0;
};
// Bytes [begin, end) of `path`; the same errors.
std::vector<std::byte> read_range(const std::string& path, uint64_t begin, uint64_t end);
std::string read_text(const std::string& path);

// The marker of a committed checkpoint.
struct Committed {
  int64_t step = 0;
  std::string folder;  // "step-00000010"
};
// The marker in `dir`, none when absent; throws UsageError when it is not a dtsim marker or
// is from a newer version.
std::optional<Committed> read_marker(const std::string& dir);
// The committed checkpoint of `dir`'s metadata; throws UsageError (one line, naming `flag`)
// when `dir` is not a dtsim checkpoint.
Metadata read_checkpoint(const std::string& dir, const std::string& flag, std::string* folder);

// Before any work: `dir` may be saved into (absent, empty, or a dtsim checkpoint, perhaps
// with an interrupted save's leftovers); creates it. Throws UsageError otherwise.
void check_save_dir(const std::string& dir);

// Step 1 (rank 0): returns the partial folder's path.
std::string begin_save(const std::string& dir, int64_t step);
// Step 3 (rank 0): `meta` with saved_from and step set; its tensors are read from the
// shards. `expected` gives every global tensor's shape: "kind/name" -> (rows, cols, vector).
// Returns the bytes of data the checkpoint holds.
uint64_t commit_save(const std::string& dir, Metadata meta,
                     const std::map<std::string, TensorMeta>& expected);

std::string step_folder(int64_t step);
std::string shard_file(int rank, int ranks);

}  // namespace dtsim::train::checkpoint
