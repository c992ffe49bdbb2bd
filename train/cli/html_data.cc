#include "train/cli/html_data.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "model/layer_stack.h"
#include "model/param_layout.h"
#include "train/data_parallel/data_parallel.h"
#include "train/mesh_shape.h"
#include "train/parallelize.h"
#include "train/pipeline_parallel/pipeline_parallel.h"

namespace dtsim::cli {
namespace {

using nlohmann::json;

// The parameter layouts of the buffers rank `at` holds: one per pipeline chunk (each has
// its own data-parallel wrapper), or the rank's whole model without a pipeline.
std::vector<model::ParamLayout> rank_buffers(const train::TrainConfig& config,
                                             const train::MeshShape& shape,
                                             const train::MeshCoord& at) {
  if (shape.pp == 1) return {model::layout_of(train::rank_layers(config, shape, at))};
  const train::pipeline::ScheduleSpec spec = train::schedule_spec(config);
  std::vector<model::ParamLayout> out;
  for (int c = at.pp; c < spec.stages * spec.virtual_stages; c += spec.stages) {
    out.push_back(model::layout_of(train::pipeline::layers_of_chunk(
        config, spec, c,
        {.tp_rank = at.tp, .tp_size = shape.tp, .ep_rank = at.ep, .ep_size = shape.ep})));
  }
  return out;
}

size_t ranges_size(const std::vector<model::ParamRange>& ranges) {
  size_t n = 0;
  for (const model::ParamRange& r : ranges) n += r.size();
  return n;
}

// The elements of `layout` whose optimizer state rank `at` keeps under ZeRO `zero` (1-3):
// its shard of the dense part over the dp group and of the experts over expert_dp, cut as
// train/data_parallel cuts them.
size_t zero_owned(const train::TrainConfig& config, const train::MeshShape& shape,
                  const train::MeshCoord& at, const model::ParamLayout& layout, int zero) {
  const train::DpParts parts = train::rank_dp_parts(config, shape, layout);
  const int sizes[2] = {shape.dp, shape.ep > 1 ? shape.dp / shape.ep : 1};
  const int ranks[2] = {at.dp, shape.ep > 1 ? at.ep_group : 0};
  size_t owned = 0;
  if (zero == 3) {
    for (const train::Zero3Segment& s : train::zero3_segments(layout, parts, sizes)) {
      owned += train::zero3_owned(s, ranks[s.part]).size();
    }
    return owned;
  }
  const size_t dense = ranges_size(parts.dense), experts = ranges_size(parts.experts);
  if (dense > 0) owned += model::shard_range(dense, sizes[0], ranks[0]).size();
  if (experts > 0) owned += model::shard_range(experts, sizes[1], ranks[1]).size();
  return owned;
}

// "moe0.expert3.w1" -> ("moe0", 3); false for a tensor of no expert.
bool expert_of(const std::string& tensor, std::string* layer, int* id) {
  const size_t at = tensor.find(".expert");
  if (at == std::string::npos) return false;
  const size_t digits = at + 7;
  size_t end = digits;
  while (end < tensor.size() && tensor[end] >= '0' && tensor[end] <= '9') ++end;
  if (end == digits) return false;
  *layer = tensor.substr(0, at);
  *id = std::stoi(tensor.substr(digits, end - digits));
  return true;
}

bool is_compute_phase(const train::PhaseEvent& e) {
  return e.name.size() > 1 && (e.name[0] == 'F' || e.name[0] == 'B' || e.name[0] == 'W') &&
         e.name[1] >= '0' && e.name[1] <= '9';
}

}  // namespace

json mesh_diagram(const train::TrainConfig& config) {
  const train::MeshShape shape = config.mesh();
  const int zero = shape.dp > 1 ? train::zero_stage(config) : 0;
  json ranks = json::array();
  for (int rank = 0; rank < shape.world(); ++rank) {
    const train::MeshCoord at = train::mesh_coord(shape, rank);
    json layers = json::array(), shards = json::array();
    std::map<std::string, std::vector<int>> experts;
    size_t params = 0, owned = 0;
    for (const model::ParamLayout& layout : rank_buffers(config, shape, at)) {
      params += layout.size();
      if (zero > 0) owned += zero_owned(config, shape, at, layout, zero);
      for (int l = 0; l < layout.num_layers(); ++l) layers.push_back(layout.layer_name(l));
      for (const model::ParamView& v : layout.views()) {
        std::string layer;
        int id = 0;
        if (expert_of(v.name, &layer, &id)) {
          std::vector<int>& ids = experts[layer];
          if (ids.empty() || ids.back() != id) ids.push_back(id);
        }
        const model::TensorShard& s = v.shard;
        if (s.full_rows == 0 || (v.rows == s.full_rows && v.cols == s.full_cols)) continue;
        shards.push_back({{"tensor", v.name},
                          {"row0", s.row0},
                          {"rows", v.rows},
                          {"full_rows", s.full_rows},
                          {"col0", s.col0},
                          {"cols", v.cols},
                          {"full_cols", s.full_cols}});
      }
    }
    json held = json::array();
    for (const auto& [layer, ids] : experts) held.push_back({{"layer", layer}, {"ids", ids}});
    json r = {{"rank", rank},     {"dp", at.dp},      {"tp", at.tp},
              {"pp", at.pp},      {"ep", at.ep},      {"ep_group", at.ep_group},
              {"layers", layers}, {"params", params}, {"tp_shards", shards},
              {"experts", held}};
    if (zero > 0) r["zero_owned"] = owned;
    ranks.push_back(std::move(r));
  }
  return {{"dp", shape.dp}, {"tp", shape.tp}, {"pp", shape.pp},
          {"ep", shape.ep}, {"zero", zero},   {"params", train::model_layout(config).size()},
          {"ranks", ranks}};
}

json pipeline_p2p(const train::TrainConfig& config, const train::RunResult& run,
                  const json& timeline) {
  if (!timeline.is_object()) return nullptr;
  const train::pipeline::ScheduleSpec spec = train::schedule_spec(config);
  const int per_step = (spec.kind == train::pipeline::ScheduleKind::kZeroBubbleH1 ? 3 : 2) *
                       spec.micro_batches * spec.virtual_stages;
  const int step = timeline.at("step").get<int>();
  const double span = timeline.at("span_seconds").get<double>();
  std::vector<const train::RankReport*> stages;
  for (const json& st : timeline.at("stages")) {
    const int rank = st.at("rank").get<int>();
    const auto it = std::find_if(run.ranks.begin(), run.ranks.end(),
                                 [rank](const train::RankReport& r) { return r.rank == rank; });
    if (it == run.ranks.end()) return nullptr;
    stages.push_back(&*it);
  }
  // The origin is the step's first compute phase over the stages, as the timeline's.
  auto origin = std::chrono::steady_clock::time_point::max();
  for (const train::RankReport* r : stages) {
    int seen = 0;
    for (const train::PhaseEvent& e : r->timeline) {
      if (is_compute_phase(e) && seen++ / per_step == step) origin = std::min(origin, e.start);
    }
  }
  const auto seconds = [&](auto t) { return std::chrono::duration<double>(t - origin).count(); };
  json out = json::array();
  for (size_t s = 0; s < stages.size(); ++s) {
    json events = json::array();
    for (const train::PhaseEvent& e : stages[s]->timeline) {
      if (e.name != "send" && e.name != "recv") continue;
      const double start = std::max(0.0, seconds(e.start)), end = std::min(span, seconds(e.end));
      if (end <= start) continue;  // another step's
      events.push_back({{"kind", e.name == "send" ? "send" : "receive"},
                        {"start", start},
                        {"end", end},
                        {"bytes", e.bytes}});
    }
    out.push_back({{"stage", s}, {"rank", stages[s]->rank}, {"events", events}});
  }
  return {{"stages", out}};
}

}  // namespace dtsim::cli
