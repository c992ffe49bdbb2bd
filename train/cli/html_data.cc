#include "train/cli/html_data.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "model/layer_stack.h"
#include "model/param_layout.h"
#include "model/ring_attention.h"
#include "train/mesh_shape.h"
#include "train/models/model_spec.h"
#include "train/pipeline_parallel/pipeline_parallel.h"
#include "train/placement_plan.h"

namespace dtsim::cli {
namespace {

using nlohmann::json;

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

// The sequence positions a rank holds between the blocks, as "0–1, 6–7": its cp chunks
// (rank r: r and 2N-1-r, model/ring_attention.h), and under sequence parallelism its tp
// rank's slice of them (gpt_layers.cc: rows [t n, (t + 1) n) of the cp-local sequence).
std::string held_tokens(const train::TrainConfig& c, const train::MeshShape& shape,
                        const train::MeshCoord& at) {
  const int seq = c.gpt.seq_len, local = seq / shape.cp;
  const int n = c.sequence_parallel ? local / shape.tp : local;
  const int first = c.sequence_parallel ? at.tp * n : 0;
  std::string s;
  int64_t run_start = -1, prev = -2;
  const auto close = [&] {
    if (run_start < 0) return;
    s += (s.empty() ? "" : ", ") + std::to_string(run_start) +
         (prev > run_start ? "\u2013" + std::to_string(prev) : "");
  };
  for (int i = first; i < first + n; ++i) {
    const int64_t p = model::cp_position(at.cp, shape.cp, seq, i);
    if (p != prev + 1) {
      close();
      run_start = p;
    }
    prev = p;
  }
  close();
  return s;
}

bool is_compute_phase(const train::PhaseEvent& e) {
  return e.name.size() > 1 && (e.name[0] == 'F' || e.name[0] == 'B' || e.name[0] == 'W') &&
         e.name[1] >= '0' && e.name[1] <= '9';
}

}  // namespace

json mesh_diagram(const train::TrainConfig& config) {
  const train::ModelPlacement placement(config);
  const train::MeshShape& shape = placement.shape();
  const int zero = shape.dp > 1 ? placement.zero() : 0;
  json ranks = json::array();
  for (int rank = 0; rank < shape.world(); ++rank) {
    const train::MeshCoord at = train::mesh_coord(shape, rank);
    json layers = json::array(), shards = json::array();
    std::map<std::string, std::vector<int>> experts;
    const train::StateElements state = placement.elements(at);
    const int64_t params = state.params, owned = state.optimizer;
    for (const model::ParamLayout& layout : placement.chunks(at)) {
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
    r["cp"] = at.cp;
    if (train::model_spec(config).has_sequence()) r["tokens"] = held_tokens(config, shape, at);
    ranks.push_back(std::move(r));
  }
  json m = {{"dp", shape.dp},
            {"tp", shape.tp},
            {"pp", shape.pp},
            {"ep", shape.ep},
            {"cp", shape.cp},
            {"zero", zero},
            {"params", train::model_layout(config).size()},
            {"ranks", ranks}};
  if (train::model_spec(config).has_sequence()) {
    m["seq"] = config.gpt.seq_len;
    m["sequence_parallel"] = config.sequence_parallel;
  }
  return m;
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
