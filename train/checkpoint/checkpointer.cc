#include "train/checkpoint/checkpointer.h"
#include "train/accounting.h"

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <utility>

#include "runtime/types.h"
#include "train/checkpoint/store.h"

namespace dtsim::train::checkpoint {
namespace {

// A run of a local layout's elements inside one tensor, as a block of it: `local` in the
// local tensor's coordinates, `global` in the full tensor's; (row0, col0): where the local
// tensor starts in the global one, from the placement.
struct Piece {
  const model::ParamView* view = nullptr;
  int64_t row0 = 0, col0 = 0;
  Box local, global;
};

// The blocks that local elements [begin, end) of `layout` on rank `at` cover: per tensor, a
// partial first row, the whole rows, a partial last row.
std::vector<Piece> pieces(const model::ParamLayout& layout, size_t begin, size_t end,
                          const ModelPlacement& placement, const MeshCoord& at) {
  std::vector<Piece> out;
  std::map<std::string, size_t> seen;  // a fused tensor's local tensors, one per block
  for (const model::ParamView& v : layout.views()) {
    const size_t block = seen[v.name]++;
    const size_t lo = std::max(begin, v.offset), hi = std::min(end, v.offset + v.size());
    if (lo >= hi) continue;
    const TensorChunk held = placement.tensor(v.name).chunks(placement.shape(), at).at(block);
    int64_t a = static_cast<int64_t>(lo - v.offset);
    const int64_t b = static_cast<int64_t>(hi - v.offset), cols = v.cols;
    const auto add = [&](int64_t row, int64_t col, int64_t rows, int64_t n) {
      const Box local{row, col, rows, n};
      const Box global{row + held.row0, col + held.col0, rows, n};
      out.push_back({&v, held.row0, held.col0, local, global});
    };
    if (a % cols != 0) {
      const int64_t n = std::min(cols - a % cols, b - a);
      add(a / cols, a % cols, 1, n);
      a += n;
    }
    if (b - a >= cols) {
      const int64_t rows = (b - a) / cols;
      add(a / cols, 0, rows, cols);
      a += rows * cols;
    }
    if (a < b) add(a / cols, 0, 1, b - a);
  }
  return out;
}

size_t local_index(const Piece& p, int64_t grow, int64_t gcol) {
  return p.view->offset + static_cast<size_t>((grow - p.row0) * p.view->cols + (gcol - p.col0));
}

std::vector<int64_t> entry_shape(const ModelPlacement& placement, const Piece& p) {
  if (placement.tensor(p.view->name).vector) return {p.global.rows};
  return {p.global.rows, p.global.cols};
}

// Where piece `p` starts in its part's buffer: a piece is contiguous there, its elements in
// the row-major order of its global block.
size_t piece_start(const Piece& p) { return local_index(p, p.global.row0, p.global.col0); }

// The chunks of one checkpoint that a rank reads, each read and verified once.
class ChunkReader {
 public:
  ChunkReader(const Metadata& meta, std::string folder) : meta_(meta), folder_(std::move(folder)) {}
  // Fills `dst` (box's elements, row-major and contiguous) with `box` of `tensor`: a chunk
  // that is the box is read straight into it, others through a cache, a row at a time.
  void read(const std::string& tensor, const Box& box, float* dst) {
    const auto it = meta_.tensors.find(tensor);
    if (it == meta_.tensors.end()) {
      throw UsageError("the checkpoint has no tensor " + tensor);
    }
    int64_t filled = 0;
    for (size_t i = 0; i < it->second.chunks.size(); ++i) {
      const Chunk& c = it->second.chunks[i];
      const Box o = intersect(box, c.box);
      if (o.size() == 0) continue;
      filled += o.size();
      if (o.size() == c.box.size() && o.size() == box.size()) {
        load(tensor, c, std::span<float>(dst, static_cast<size_t>(box.size())));
        continue;
      }
      const std::vector<float>& data = cached(tensor, i, c);
      for (int64_t r = o.row0; r < o.row0 + o.rows; ++r) {
        std::memcpy(dst + (r - box.row0) * box.cols + (o.col0 - box.col0),
                    data.data() + (r - c.box.row0) * c.box.cols + (o.col0 - c.box.col0),
                    static_cast<size_t>(o.cols) * sizeof(float));
      }
    }
    if (filled != box.size()) {
      throw UsageError("the checkpoint's chunks of " + tensor + " do not cover it");
    }
  }

 private:
  void load(const std::string& tensor, const Chunk& c, std::span<float> out) {
    const std::string path = (std::filesystem::path(folder_) / c.file).string();
    if (read_checksummed(path, c.begin, c.end, meta_.version, std::as_writable_bytes(out)) !=
        c.sum) {
      throw UsageError("checkpoint shard " + path + " is corrupted: a chunk of " + tensor +
                       " fails its checksum; save it again");
    }
  }
  const std::vector<float>& cached(const std::string& tensor, size_t index, const Chunk& c) {
    std::vector<float>& out = cache_[{tensor, index}];
    if (!out.empty()) return out;
    out.resize(static_cast<size_t>(c.box.size()));
    load(tensor, c, out);
    return out;
  }

  const Metadata& meta_;
  std::string folder_;
  std::map<std::pair<std::string, size_t>, std::vector<float>> cache_;
};

}  // namespace

std::vector<std::string> state_kinds(const TrainConfig& config) {
  std::vector<std::string> out = {"params"};
  if (config.precision == model::Precision::kMixedBf16) out.push_back("master");
  if (config.optimizer == model::OptimizerKind::kAdam) {
    out.push_back("adam_m");
    out.push_back("adam_v");
  } else if (config.optimizer == model::OptimizerKind::kSgdMomentum) {
    out.push_back("momentum");
  }
  return out;
}

std::map<std::string, TensorMeta> expected_tensors(const TrainConfig& config) {
  std::map<std::string, TensorMeta> out;
  const model::ParamLayout full = model_layout(config);
  for (const std::string& kind : state_kinds(config)) {
    for (const model::ParamView& v : full.views()) {
      TensorMeta& t = out[kind + "/" + v.name];
      t.rows = v.rows;
      t.cols = v.cols;
      t.vector = v.cols == 1;
      t.flat_offset = static_cast<int64_t>(v.offset);
    }
  }
  return out;
}

SavedFrom saved_from(const TrainConfig& config) {
  const MeshShape m = config.mesh();
  std::string mesh = "dp " + std::to_string(m.dp) + " x tp " + std::to_string(m.tp) + " x pp " +
                     std::to_string(m.pp) + (m.cp > 1 ? " x cp " + std::to_string(m.cp) : "") +
                     ", ep " + std::to_string(m.ep) + ", zero " +
                     std::to_string(config.strategy == Strategy::kZero1   ? 1
                                    : config.strategy == Strategy::kZero2 ? 2
                                    : config.strategy == Strategy::kZero3 ? 3
                                                                          : config.zero);
  return {.strategy = to_string(config.strategy),
          .model = to_string(config.model),
          .optimizer = config.optimizer == model::OptimizerKind::kAdam          ? "adam"
                       : config.optimizer == model::OptimizerKind::kSgdMomentum ? "sgd-momentum"
                                                                                : "sgd",
          .precision = config.precision == model::Precision::kMixedBf16 ? "bf16" : "fp32",
          .mesh = mesh,
          // single and accum (R groups of micro-batches) run on one rank
          .ranks = config.mesh().world(),
          .batch = config.global_batch,
          .seed = config.seed};
}

Checkpointer::Checkpointer(const TrainConfig& config, ReportChannel* channel, RankState state)
    : config_(config),
      channel_(channel),
      state_(std::move(state)),
      placement_(config),
      at_(mesh_coord(placement_.shape(), channel != nullptr ? channel->rank() : 0)) {
  if (state_.parts.empty()) {
    throw UsageError(std::string("--save and --resume do not support --strategy ") +
                     to_string(config.strategy) +
                     " yet; use ddp, zero1-3, tp, ep, dp-tp or a mesh");
  }
}

void Checkpointer::barrier() {
  if (channel_ != nullptr) channel_->barrier();
}

int Checkpointer::restore() {
  const std::string& dir = config_.checkpoint.resume_dir;
  if (dir.empty()) return 0;
  barrier();  // timed from when every rank is ready (set up), not from this rank's start
  const auto start = std::chrono::steady_clock::now();
  std::string folder;
  const Metadata meta = read_checkpoint(dir, "--resume", &folder);
  for (const StatePart& part : state_.parts) {
    ChunkReader reader(meta, folder);
    const model::ParamLayout& layout = *part.layout;
    const std::vector<OptimizerRun> runs = part.access->optimizer_runs();
    std::vector<Piece> wanted;  // the parameters this part keeps
    if (part.access->keeps_all_params()) {
      wanted = pieces(layout, 0, layout.size(), placement_, at_);
    } else {
      for (const OptimizerRun& run : runs) {
        for (const Piece& p : pieces(layout, run.local, run.local + run.count, placement_, at_)) {
          wanted.push_back(p);
        }
      }
    }
    // Straight into the buffer's own fp32 storage when it has one (pages the run has already
    // touched); else into a scratch copy that load_params converts.
    std::vector<std::span<float>> into;
    for (const Piece& p : wanted) {
      into.push_back(
          part.access->fp32_params(piece_start(p), static_cast<size_t>(p.global.size())));
      if (into.back().empty()) break;
    }
    if (!into.empty() && !into.back().empty()) {
      for (size_t i = 0; i < wanted.size(); ++i) {
        reader.read("params/" + wanted[i].view->name, wanted[i].global, into[i].data());
      }
      part.access->fp32_params_loaded();
    } else {
      // Every element load_params takes is read below (the reader checks that the chunks
      // cover each piece); in huge pages, and a ZeRO-3 rank's pages outside its shards are
      // never touched, so never faulted in.
      const HugeBuffer buffer(layout.size());
      const std::span<float> local = buffer.floats();
      for (const Piece& p : wanted) {
        reader.read("params/" + p.view->name, p.global, local.data() + piece_start(p));
      }
      part.access->load_params(local);
    }
    for (const OptimizerRun& run : runs) {
      run.opt->set_steps(meta.step);
      for (const SliceOptimizer::NamedState& st : run.opt->state()) {
        for (const Piece& p : pieces(layout, run.local, run.local + run.count, placement_, at_)) {
          reader.read(std::string(st.name) + "/" + p.view->name, p.global,
                      st.data.data() + run.at + (piece_start(p) - run.local));
        }
      }
    }
  }
  barrier();  // every rank has read before any may save over the same directory
  if (config_.checkpoint.on_io && (channel_ == nullptr || channel_->rank() == 0)) {
    uint64_t bytes = 0;
    for (const auto& [name, t] : meta.tensors) bytes += t.rows * t.cols * sizeof(float);
    config_.checkpoint.on_io("loaded", meta.step, bytes, seconds_since(start));
  }
  return static_cast<int>(meta.step);
}

void Checkpointer::after_step(int done) {
  if (config_.checkpoint.saves_after(done, config_.steps)) save(done);
}

void Checkpointer::save(int64_t step) {
  const std::string& dir = config_.checkpoint.save_dir;
  const int rank = channel_ != nullptr ? channel_->rank() : 0;
  const int ranks = channel_ != nullptr ? channel_->size() : 1;
  barrier();  // timed from when every rank has finished its step
  const auto start = std::chrono::steady_clock::now();
  if (rank == 0) begin_save(dir, step);
  barrier();
  std::vector<std::vector<float>> copies;  // parts with no fp32 storage: alive until written
  std::vector<ShardEntry> entries;         // spans of live state (or of `copies`)
  for (const StatePart& part : state_.parts) {
    const float* copy = nullptr;  // the part's params(), made when first needed
    for (const OptimizerRun& run : part.access->optimizer_runs()) {
      if (!run.writer) continue;
      const std::vector<SliceOptimizer::NamedState> states = run.opt->state();
      for (const Piece& p :
           pieces(*part.layout, run.local, run.local + run.count, placement_, at_)) {
        if (!placement_.writes(p.view->name, at_)) continue;
        const size_t at = piece_start(p), n = static_cast<size_t>(p.global.size());
        const auto add = [&](const std::string& kind, const float* data) {
          entries.push_back({entry_name(kind + "/" + p.view->name, p.global.row0, p.global.col0),
                             entry_shape(placement_, p),
                             {data, n}});
        };
        const std::span<const float> live = part.access->fp32_params(at, n);
        if (live.empty() && copy == nullptr)
          copy = copies.emplace_back(part.access->params()).data();
        add("params", live.empty() ? copy + at : live.data());
        for (const SliceOptimizer::NamedState& st : states) {
          add(st.name, st.data.data() + run.at + (at - run.local));
        }
      }
    }
  }
  if (!entries.empty()) {
    const std::filesystem::path file =
        std::filesystem::path(dir) / (step_folder(step) + ".partial") / shard_file(rank, ranks);
    const ShardHead head = safetensors_head(entries);
    write_synced(file.string(), safetensors_pieces(head, entries));
  }
  barrier();
  uint64_t bytes = 0;
  if (rank == 0) {
    Metadata meta;
    meta.step = step;
    meta.saved_from = saved_from(config_);
    bytes = commit_save(dir, meta, expected_tensors(config_));
  }
  barrier();
  if (rank == 0 && config_.checkpoint.on_io) {
    config_.checkpoint.on_io("saved", step, bytes, seconds_since(start));
  }
}

}  // namespace dtsim::train::checkpoint
