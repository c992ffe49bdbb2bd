#include "train/cli/report_json.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "runtime/algorithms/registry.h"
#include "train/cli/output_file.h"
#include "train/cli/table.h"
#include "train/models/model_spec.h"
#include "train/pipeline_parallel/pipeline_parallel.h"
#include "train/placement_plan.h"

namespace dtsim::cli {
namespace {

using nlohmann::json;

json config_json(const train::TrainConfig& c) {
  json j = {
      {"strategy", train::to_string(c.strategy)},
      {"model", train::to_string(c.model)},
      {"ranks", c.ranks},
      {"steps", c.steps},
      {"batch", c.global_batch},
      {"micro_batches", c.micro_batches},
      {"optimizer", optimizer_name(c.optimizer)},
      {"lr", std::stod(fmt::format("{:.7g}", c.lr))},  // as typed, not the float's binary tail
      {"precision", precision_name(c.precision)},
      {"algo", to_string(c.algo)},
      {"seed", c.seed},
      {"pitfall", c.pitfall == train::Pitfall::kForgetDivide ? "forget-divide" : "none"},
  };
  if (c.strategy == train::Strategy::kDpTp) j["tp_size"] = c.widths.tp;
  if (c.strategy == train::Strategy::kMesh) {
    const train::MeshShape m = c.mesh();
    j["mesh"] = {{"dp", m.dp}, {"tp", m.tp}, {"pp", m.pp},
                 {"ep", m.ep}, {"cp", m.cp}, {"zero", c.zero}};
  }
  if (train::model_spec(c).has_sequence()) j["sequence_parallel"] = c.sequence_parallel;
  nlohmann::json shape = nlohmann::json::object();
  for (const auto& [name, value] : train::model_spec(c).shape_fields(c)) {
    // Integers as integers; a float field as typed (single precision), not its binary tail.
    if (value == std::floor(value)) {
      shape[name] = static_cast<int64_t>(value);
    } else {
      shape[name] = std::stod(fmt::format("{:.7g}", value));
    }
  }
  j["shape"] = shape;
  return j;
}

// Every tensor's placement on each mesh axis (train/placement_plan.h): the parameter's, the
// gradient's after backward and after its data-parallel sync, the optimizer state's.
json placements_json(const train::TrainConfig& c) {
  const train::ModelPlacement placement(c);
  const auto axes = [](const train::TensorPlacement& t, const train::AxisPlacement& dp) {
    json j = json::object();
    for (int a = 0; a < train::kMeshAxes; ++a) {
      const auto axis = static_cast<train::MeshAxis>(a);
      j[train::axis_name(axis)] = (axis == train::MeshAxis::kDp ? dp : t.on(axis)).str();
    }
    return j;
  };
  json tensors = json::array();
  for (const train::TensorPlacement& t : placement.tensors()) {
    tensors.push_back({{"name", t.name},
                       {"shape", t.vector ? json::array({t.rows}) : json::array({t.rows, t.cols})},
                       {"param", axes(t, t.on(train::MeshAxis::kDp))},
                       {"grad", axes(t, t.grads_dp)},
                       {"synced_grad", axes(t, t.synced_grads_dp)},
                       {"optimizer", axes(t, t.state_dp)}});
  }
  const train::MeshShape& m = placement.shape();
  return {{"mesh", {{"dp", m.dp}, {"tp", m.tp}, {"pp", m.pp}, {"ep", m.ep}}},
          {"zero", placement.zero()},
          {"tensors", tensors}};
}

// "dp[0,2]" -> "dp"; "world" -> "world".
std::string group_kind(const std::string& name) { return name.substr(0, name.find('[')); }

// Per group kind ("world", "dp", "tp", ...), in order of first appearance: the members of
// each communicator of that kind and the world-rank x world-rank matrices of bytes and
// messages sent (row: sender, column: receiver), from each sender's own counters.
json traffic_json(const train::RunResult& run) {
  const size_t n = run.ranks.size();
  json kinds = json::array();
  for (const train::RankReport& r : run.ranks) {
    for (const GroupTraffic& g : r.counters.groups) {
      const std::string kind = group_kind(g.name);
      auto it = std::find_if(kinds.begin(), kinds.end(),
                             [&](const json& k) { return k["group"] == kind; });
      if (it == kinds.end()) {
        const json zeros(json::array_t(n, json(json::array_t(n, 0))));
        kinds.push_back({{"group", kind},
                         {"communicators", json::array()},
                         {"bytes", zeros},
                         {"messages", zeros}});
        it = kinds.end() - 1;
      }
      json& k = *it;
      const json members = g.ranks;
      bool known = false;
      for (const json& c : k["communicators"]) known = known || c["ranks"] == members;
      if (!known) k["communicators"].push_back({{"name", g.name}, {"ranks", members}});
      for (size_t i = 0; i < g.ranks.size(); ++i) {
        json& bytes = k["bytes"][r.rank][g.ranks[i]];
        json& msgs = k["messages"][r.rank][g.ranks[i]];
        bytes = bytes.get<uint64_t>() + g.peers[i].bytes_sent;
        msgs = msgs.get<uint64_t>() + g.peers[i].msgs_sent;
      }
    }
  }
  return kinds;
}

json rank_json(const train::RankReport& r, int steps) {
  json memory = json::object();
  for (int c = 0; c < model::kNumMemoryCategories; ++c) {
    memory[std::string(model::memory_category_name(static_cast<model::MemoryCategory>(c)))] =
        r.memory[c];
  }
  json collectives = json::object();
  for (int k = 0; k < kNumOpKinds; ++k) {
    const OpCounters& o = r.counters.by_op[k];
    if (o.calls == 0 && o.msgs_sent == 0 && o.msgs_recv == 0) continue;
    collectives[to_string(static_cast<OpKind>(k))] = {{"calls", o.calls},
                                                      {"steps", o.steps},
                                                      {"messages_sent", o.msgs_sent},
                                                      {"bytes_sent", o.bytes_sent},
                                                      {"messages_received", o.msgs_recv},
                                                      {"bytes_received", o.bytes_recv},
                                                      {"seconds", o.nanos * 1e-9}};
  }
  json communicators = json::array();
  for (const GroupTraffic& g : r.counters.groups) {
    json peers = json::array();
    for (size_t i = 0; i < g.ranks.size(); ++i) {
      const PeerTraffic& p = g.peers[i];
      peers.push_back({{"rank", g.ranks[i]},
                       {"messages_sent", p.msgs_sent},
                       {"bytes_sent", p.bytes_sent},
                       {"messages_received", p.msgs_recv},
                       {"bytes_received", p.bytes_recv}});
    }
    communicators.push_back({{"name", g.name}, {"group", group_kind(g.name)}, {"peers", peers}});
  }
  json flight = json::array();
  for (const FlightEntry& e : r.flight) {
    flight.push_back(
        {{"communicator", e.comm_name},
         {"seq", e.seq},
         {"call", describe(e.sig)},
         {"state", to_string(e.state)},
         {"bytes_sent", e.bytes_sent},
         {"duration_us", std::chrono::duration<double, std::micro>(e.end - e.start).count()}});
  }
  const OpCounters t = r.counters.total();
  const OpCounters rep = r.reporting.total();
  return {{"rank", r.rank},
          {"memory_bytes", memory},
          {"bytes_sent", t.bytes_sent},
          {"messages_sent", t.msgs_sent},
          {"bytes_sent_per_step", steps > 0 ? double(t.bytes_sent) / steps : 0.0},
          {"collectives", collectives},
          {"reporting", {{"bytes_sent", rep.bytes_sent}, {"messages_sent", rep.msgs_sent}}},
          {"communicators", communicators},
          {"flight_recorder", flight}};
}

// FNV-1a (64 bit) over the final parameters' fp32 bit patterns, as 16 hex digits: two runs
// with the same digest ended with the same parameters, bit for bit (tests/mpi compares them).
std::string params_digest(const std::vector<float>& params) {
  uint64_t h = 14695981039346656037ull;
  for (float f : params) {
    uint32_t bits;
    std::memcpy(&bits, &f, sizeof bits);
    for (int b = 0; b < 4; ++b) h = (h ^ ((bits >> (8 * b)) & 0xff)) * 1099511628211ull;
  }
  return fmt::format("{:016x}", h);
}

// The compute phases (F3, B3, W3; F3.1 with a chunk) of one step of one stage, in order:
// each stage's timeline holds passes x micro-batches x chunks of them per step.
bool is_compute(const train::PhaseEvent& e) {
  return e.name.size() > 1 && (e.name[0] == 'F' || e.name[0] == 'B' || e.name[0] == 'W') &&
         e.name[1] >= '0' && e.name[1] <= '9';
}

// The pipeline timeline the --html page draws: the stages of the replica and step whose
// wall-time bubble is the run's (measured_wall_bubble's median is one of them), each stage's
// forward / backward / weight-gradient phases in seconds from the step's first start; the
// rest of the span is idle (waiting for a receive, or sending). Null without timelines.
json pipeline_timeline(const train::TrainConfig& config, const train::RunResult& run,
                       double median) {
  namespace pp = train::pipeline;
  if (std::isnan(median)) return nullptr;
  const train::MeshShape shape = config.mesh();
  const pp::ScheduleSpec spec = train::schedule_spec(config);
  const int per_step = (spec.kind == pp::ScheduleKind::kZeroBubbleH1 ? 3 : 2) * spec.micro_batches *
                       spec.virtual_stages;
  for (int replica = 0; replica < shape.dp; ++replica) {
    std::vector<const train::RankReport*> stages(spec.stages, nullptr);
    std::vector<const std::vector<train::PhaseEvent>*> timelines(spec.stages, nullptr);
    for (const train::RankReport& r : run.ranks) {
      const train::MeshCoord at = train::mesh_coord(shape, r.rank);
      if (at.dp == replica && at.tp == 0) stages[at.pp] = &r, timelines[at.pp] = &r.timeline;
    }
    if (std::find(stages.begin(), stages.end(), nullptr) != stages.end()) continue;
    for (int step = run.steps > 1 ? 1 : 0; step < run.steps; ++step) {
      const pp::WallBubble w = pp::wall_bubble(timelines, spec, step);
      if (w.span_seconds <= 0 || w.bubble != median) continue;
      auto origin = std::chrono::steady_clock::time_point::max();
      std::vector<std::vector<const train::PhaseEvent*>> phases(spec.stages);
      for (int s = 0; s < spec.stages; ++s) {
        int seen = 0;
        for (const train::PhaseEvent& e : *timelines[s]) {
          if (!is_compute(e) || seen++ / per_step != step) continue;
          phases[s].push_back(&e);
          origin = std::min(origin, e.start);
        }
      }
      const auto seconds = [&](auto t) {
        return std::chrono::duration<double>(t - origin).count();
      };
      json out = json::array();
      for (int s = 0; s < spec.stages; ++s) {
        json events = json::array();
        for (const train::PhaseEvent* e : phases[s]) {
          events.push_back(
              {{"name", e->name}, {"start", seconds(e->start)}, {"end", seconds(e->end)}});
        }
        out.push_back({{"stage", s}, {"rank", stages[s]->rank}, {"phases", events}});
      }
      return {{"replica", replica},
              {"step", step},
              {"span_seconds", w.span_seconds},
              {"busy_seconds", w.busy_seconds},
              {"bubble", w.bubble},
              {"stages", out}};
    }
  }
  return nullptr;
}

}  // namespace

std::vector<std::pair<std::string, std::string>> algorithms_ran(const train::RunResult& run) {
  std::vector<std::pair<std::string, std::string>> out;
  for (OpKind op : collectives()) {
    uint32_t ran = 0, picked = 0;
    for (const train::RankReport& r : run.ranks) {
      ran |= r.counters[op].algos();
      picked |= r.counters[op].auto_algos();
    }
    if (ran == 0 || op == OpKind::kBarrier) continue;
    std::string asked, automatic;  // asked for by name; picked by auto
    for (const AlgoName& a : algo_names()) {
      const uint32_t bit = 1u << static_cast<int>(a.algo);
      if (!(ran & bit)) continue;
      std::string& list = picked & bit ? automatic : asked;
      list += (list.empty() ? "" : ", ") + std::string(a.name);
    }
    if (!automatic.empty()) automatic += " (auto)";
    out.emplace_back(to_string(op),
                     asked + (asked.empty() || automatic.empty() ? "" : ", ") + automatic);
  }
  return out;
}

std::string algorithms_ran_text(const train::RunResult& run) {
  std::string s;
  for (const auto& [op, algos] : algorithms_ran(run)) {
    s += (s.empty() ? "" : ", ") + op + " " + algos;
  }
  if (!s.empty()) return s;
  return run.ranks.size() > 1 ? "none (the ranks only sent point to point)" : "none (one rank)";
}

const char* optimizer_name(model::OptimizerKind k) {
  switch (k) {
    case model::OptimizerKind::kSgd:
      return "sgd";
    case model::OptimizerKind::kSgdMomentum:
      return "sgd-momentum";
    case model::OptimizerKind::kAdam:
      return "adam";
  }
  return "unknown";
}

const char* precision_name(model::Precision p) {
  return p == model::Precision::kFp32 ? "fp32" : "bf16";
}

PipelineBubble pipeline_bubble(const train::TrainConfig& config, const train::RunResult& run) {
  namespace pp = train::pipeline;
  const pp::ScheduleSpec spec = train::schedule_spec(config);
  return {pp::dry_run(pp::make_schedule(spec)).bubble, pp::bubble_formula(spec),
          pp::measured_wall_bubble(config, run)};
}

nlohmann::json report_object(const train::TrainConfig& config, size_t num_params,
                             const train::RunResult& run, const train::CheckResult* check) {
  json ranks = json::array();
  for (const train::RankReport& r : run.ranks) ranks.push_back(rank_json(r, run.steps));
  json j = {{"dtsim_report_version", kReportVersion},
            {"config", config_json(config)},
            {"num_params", num_params},
            {"steps", run.steps},
            {"losses", run.losses},
            {"final_loss", run.losses.empty() ? 0.0 : run.losses.back()},
            {"params_fnv1a", params_digest(run.params)},
            {"seconds_per_step", run.seconds_per_step},
            {"bytes_sent_per_step", run.bytes_sent_per_step()},
            {"ranks", ranks},
            {"traffic", traffic_json(run)},
            {"placements", placements_json(config)},
            {"check", nullptr}};
  if (config.widths.pp > 1) {
    const PipelineBubble b = pipeline_bubble(config, run);
    j["pipeline"] = {{"schedule", train::pipeline::to_string(config.schedule)},
                     {"stages", config.widths.pp},
                     {"micro_batches", config.micro_batches},
                     {"virtual_stages", config.virtual_stages},
                     {"bubble_slots", to_string(b.slots)},
                     {"bubble_formula", to_string(b.formula)},
                     {"bubble_wall", std::isnan(b.wall) ? json(nullptr) : json(b.wall)},
                     {"timeline", pipeline_timeline(config, run, b.wall)}};
  }
  json algorithms = json::object();
  for (const auto& [op, algos] : algorithms_ran(run)) algorithms[op] = algos;
  j["algorithms"] = algorithms;
  if (check != nullptr) {
    const train::Comparison& c = check->comparison;
    j["check"] = {{"reference", check->reference_name},
                  {"criterion", check->criterion},
                  {"passed", check->passed},
                  {"verdict", check->verdict_text},
                  {"floor", check->floor_measured ? json(check->floor) : json(nullptr)},
                  {"bitwise_equal", c.bitwise_equal},
                  {"max_abs_diff", c.max_abs_diff},
                  {"max_rel_diff", c.max_rel_diff},
                  {"max_loss_diff", c.max_loss_diff},
                  {"reference_losses", check->reference_losses}};
  }
  return j;
}

std::string report_json(const train::TrainConfig& config, size_t num_params,
                        const train::RunResult& run, const train::CheckResult* check) {
  return json_with_generator(report_object(config, num_params, run, check).dump(2), "dtsim train") +
         "\n";
}

std::string trace_json(const train::TrainConfig& config, const train::RunResult& run) {
  auto origin = std::chrono::steady_clock::time_point::max();
  for (const train::RankReport& r : run.ranks) {
    for (const train::PhaseEvent& e : r.timeline) origin = std::min(origin, e.start);
  }
  const auto micros = [](auto d) { return std::chrono::duration<double, std::micro>(d).count(); };
  json events = json::array();
  events.push_back({{"ph", "M"},
                    {"name", "process_name"},
                    {"pid", 0},
                    {"args",
                     {{"name", std::string("dtsim ") + train::to_string(config.strategy) + " " +
                                   train::to_string(config.model)}}}});
  for (const train::RankReport& r : run.ranks) {
    events.push_back({{"ph", "M"},
                      {"name", "thread_name"},
                      {"pid", 0},
                      {"tid", r.rank},
                      {"args", {{"name", "rank " + std::to_string(r.rank)}}}});
    for (const train::PhaseEvent& e : r.timeline) {
      const bool phase = e.name == "forward" || e.name == "backward" || e.name == "optimizer";
      json ev = {{"ph", "X"},
                 {"name", e.name},
                 {"cat", phase ? "phase" : "collective"},
                 {"pid", 0},
                 {"tid", r.rank},
                 {"ts", micros(e.start - origin)},
                 {"dur", micros(e.end - e.start)}};
      if (!phase) ev["args"] = {{"bytes", e.bytes}};
      events.push_back(std::move(ev));
    }
  }
  return json_with_generator(json{{"traceEvents", events}, {"displayTimeUnit", "ms"}}.dump(),
                             "dtsim train") +
         "\n";
}

}  // namespace dtsim::cli
