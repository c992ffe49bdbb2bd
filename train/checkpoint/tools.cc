#include "train/checkpoint/tools.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <optional>
#include <set>
#include <tuple>
#include <vector>

#include "runtime/types.h"
#include "train/checkpoint/checkpointer.h"
#include "train/checkpoint/store.h"

namespace dtsim::train::checkpoint {
namespace fs = std::filesystem;
namespace {

std::string shape_text(const TensorMeta& t) {
  return t.vector ? "[" + std::to_string(t.rows) + "]"
                  : "[" + std::to_string(t.rows) + ", " + std::to_string(t.cols) + "]";
}

// Reads chunk `c` of tensor `name` into `out` (its size; empty: only verifies it) and
// verifies its checksum.
void read_chunk(const std::string& folder, int version, const std::string& name, const Chunk& c,
                std::span<float> out = {}) {
  const std::string path = (fs::path(folder) / c.file).string();
  if (read_checksummed(path, c.begin, c.end, version, std::as_writable_bytes(out)) != c.sum) {
    throw UsageError("checkpoint shard " + path + " is corrupted: a chunk of " + name +
                     " fails its checksum; save it again");
  }
}

// The tensor's values, whole, from its chunks (checksums verified).
std::vector<float> whole_tensor(const std::string& folder, int version, const std::string& name,
                                const TensorMeta& t) {
  std::vector<float> out(t.rows * t.cols), v;
  for (const Chunk& c : t.chunks) {
    if (c.box.col0 == 0 && c.box.cols == t.cols) {  // whole rows: straight into place
      read_chunk(folder, version, name, c,
                 std::span<float>(out).subspan(c.box.row0 * t.cols, c.box.size()));
      continue;
    }
    v.resize(c.box.size());
    read_chunk(folder, version, name, c, v);
    for (int64_t r = 0; r < c.box.rows; ++r) {
      std::copy_n(v.begin() + r * c.box.cols, c.box.cols,
                  out.begin() + (c.box.row0 + r) * t.cols + c.box.col0);
    }
  }
  return out;
}

}  // namespace

void verify_chunks(const std::string& folder, const Metadata& meta) {
  // In file order, each file front to back: sequential reads when they come from the disk.
  std::vector<std::pair<const Chunk*, const std::string*>> chunks;
  for (const auto& [name, t] : meta.tensors) {
    for (const Chunk& c : t.chunks) chunks.push_back({&c, &name});
  }
  std::sort(chunks.begin(), chunks.end(), [](const auto& a, const auto& b) {
    return std::tie(a.first->file, a.first->begin) < std::tie(b.first->file, b.first->begin);
  });
  for (const auto& [c, name] : chunks) read_chunk(folder, meta.version, *name, *c);
}

void validate_resume(const TrainConfig& config) {
  const std::string& dir = config.checkpoint.resume_dir;
  if (dir.empty()) return;
  std::string folder;
  const Metadata meta = read_checkpoint(dir, "--resume", &folder);
  const SavedFrom& from = meta.saved_from;
  const std::string saved = " (saved from " + from.strategy + ", " + from.mesh + ", " + from.model +
                            ", --optimizer " + from.optimizer + ", --precision " + from.precision +
                            ")";
  const std::map<std::string, TensorMeta> expected = expected_tensors(config);
  for (const auto& [name, t] : expected) {
    const auto it = meta.tensors.find(name);
    if (it == meta.tensors.end()) {
      throw UsageError("--resume " + dir + " has no tensor " + name + saved +
                       "; resume with the model and optimizer flags it was saved with");
    }
    if (it->second.rows != t.rows || it->second.cols != t.cols) {
      throw UsageError("--resume " + dir + ": tensor " + name + " has shape " +
                       shape_text(it->second) + " in the checkpoint but " + shape_text(t) +
                       " in this model; resume with the model flags it was saved with" + saved);
    }
  }
  for (const auto& [name, t] : meta.tensors) {
    if (!expected.contains(name)) {
      throw UsageError("--resume " + dir + " holds tensor " + name +
                       " that this run does not have" + saved +
                       "; resume with the model and optimizer flags it was saved with");
    }
  }
  if (from.batch != config.global_batch || from.seed != config.seed) {
    throw UsageError("--resume " + dir + " was trained with --batch " + std::to_string(from.batch) +
                     " --seed " + std::to_string(from.seed) +
                     ": resume with the same, so that no sample is skipped or repeated");
  }
  if (meta.step >= config.steps) {
    throw UsageError("--resume " + dir + " is at step " + std::to_string(meta.step) +
                     " and --steps " + std::to_string(config.steps) +
                     " counts the whole run; give --steps above " + std::to_string(meta.step));
  }
  verify_chunks(folder, meta);
}

void validate_save(const TrainConfig& config) {
  const checkpoint::Options& o = config.checkpoint;
  if (o.save_dir.empty()) return;
  check_save_dir(o.save_dir);
  // A run that does not continue the checkpoint already there would replace it with another
  // training's (or collide with its step folder): continuing it is the one way to save there.
  std::error_code ec;
  const std::optional<Committed> there = read_marker(o.save_dir);
  if (there && !(!o.resume_dir.empty() && fs::equivalent(o.resume_dir, o.save_dir, ec))) {
    throw UsageError("--save " + o.save_dir + " already holds a checkpoint (step " +
                     std::to_string(there->step) + "); continue it with --resume " + o.save_dir +
                     ", or give another directory");
  }
}

std::string inspect(const std::string& dir) {
  std::string folder;
  const Metadata meta = read_checkpoint(dir, "checkpoint inspect", &folder);
  verify_chunks(folder, meta);
  const SavedFrom& s = meta.saved_from;
  std::string out = "checkpoint " + dir + ": step " + std::to_string(meta.step) +
                    " (the next step's samples are (seed, " + std::to_string(meta.step) +
                    ", i)), format version " + std::to_string(meta.version) + "\n";
  out += "saved from: " + s.strategy + ", " + std::to_string(s.ranks) +
         (s.ranks == 1 ? " rank (" : " ranks (") + s.mesh + "), " + s.model + ", --optimizer " +
         s.optimizer + ", --precision " + s.precision + ", --batch " + std::to_string(s.batch) +
         ", --seed " + std::to_string(s.seed) + "\n";
  std::set<std::string> files;
  uint64_t bytes = 0;
  size_t chunks = 0;
  out += "tensors:\n";
  for (const auto& [name, t] : meta.tensors) {
    std::string line = "  " + name + " " + shape_text(t) + " F32, " +
                       std::to_string(t.chunks.size()) + " chunk" +
                       (t.chunks.size() == 1 ? "" : "s") + ":";
    for (const Chunk& c : t.chunks) {
      line += " [" + std::to_string(c.box.row0) + ":" + std::to_string(c.box.row0 + c.box.rows) +
              ", " + std::to_string(c.box.col0) + ":" + std::to_string(c.box.col0 + c.box.cols) +
              "] " + c.file.substr(0, c.file.find('-', 6)) + ";";
      files.insert(c.file);
      bytes += c.end - c.begin;
    }
    chunks += t.chunks.size();
    line.pop_back();
    out += line + "\n";
  }
  out += std::to_string(meta.tensors.size()) + " tensors, " + std::to_string(chunks) +
         " chunks in " + std::to_string(files.size()) + " shard files, " + std::to_string(bytes) +
         " bytes of data; every checksum verified\n";
  return out;
}

int consolidate(const std::string& dir, const std::string& out) {
  std::string folder;
  const Metadata meta = read_checkpoint(dir, "checkpoint consolidate", &folder);
  std::vector<std::pair<std::string, const TensorMeta*>> order;
  for (const auto& [name, t] : meta.tensors) order.push_back({name, &t});
  // The parameters first, each kind in the model's flat order.
  const auto key = [](const std::pair<std::string, const TensorMeta*>& e) {
    const std::string kind = e.first.substr(0, e.first.find('/'));
    return std::make_tuple(kind != "params", kind, e.second->flat_offset);
  };
  std::sort(order.begin(), order.end(),
            [&](const auto& a, const auto& b) { return key(a) < key(b); });
  std::vector<std::vector<float>> data;
  std::vector<ShardEntry> entries;
  for (const auto& [name, t] : order) {
    data.push_back(whole_tensor(folder, meta.version, name, *t));
    entries.push_back(
        {name,
         t->vector ? std::vector<int64_t>{t->rows} : std::vector<int64_t>{t->rows, t->cols},
         {}});
  }
  for (size_t i = 0; i < entries.size(); ++i) entries[i].data = data[i];
  const ShardHead head = safetensors_head(entries);
  const std::string tmp = out + ".tmp";
  try {
    write_synced(tmp, safetensors_pieces(head, entries));
  } catch (const Error& e) {
    throw UsageError(std::string("checkpoint consolidate: ") + e.what());
  }
  if (std::rename(tmp.c_str(), out.c_str()) != 0) {
    fs::remove(tmp);
    throw UsageError("checkpoint consolidate: cannot rename " + tmp + " to " + out);
  }
  return static_cast<int>(entries.size());
}

}  // namespace dtsim::train::checkpoint
