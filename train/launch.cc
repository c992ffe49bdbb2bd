#include "train/launch.h"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <string>
#include <utility>

#include "train/intra_op.h"
#include "train/report_channel.h"

namespace dtsim::train {
namespace {

// result.steps counts the steps run: config.steps, or fewer after a --resume.
RunResult build_result(std::vector<RankOutcome>& outcomes, const AssembleParams& assemble) {
  RunResult result;
  result.steps = static_cast<int>(outcomes[0].losses.size());
  result.losses = std::move(outcomes[0].losses);
  result.seconds_per_step = median_seconds(outcomes[0].step_seconds);
  std::vector<std::vector<float>> parts;
  for (size_t step = 0; step < outcomes[0].history.size(); ++step) {
    parts.clear();
    for (RankOutcome& o : outcomes) parts.push_back(std::move(o.history.at(step)));
    result.param_history.push_back(assemble(parts));
  }
  if (outcomes.size() == 1) result.step_sizes = std::move(outcomes[0].step_sizes);
  parts.clear();
  for (RankOutcome& o : outcomes) {
    parts.push_back(std::move(o.params));
    result.ranks.push_back(std::move(o.report));
  }
  result.params = assemble(parts);
  return result;
}

}  // namespace

std::unique_ptr<World> make_world(const TrainConfig& config) {
  // Under mpirun the ranks are this job's processes x config.threads_per_process.
  const ProcessModel model =
      ProcessModel::from_environment(config.ranks, config.threads_per_process);
  if (model.mpi && model.world_size() != config.ranks) {
    throw UsageError("--ranks " + std::to_string(config.ranks) + " but mpirun started " +
                     model.describe() + " = " + std::to_string(model.world_size()) +
                     " ranks; drop --ranks or make them match");
  }
  return std::make_unique<World>(model, config.world);
}

bool holds_global_rank0() { return ProcessModel::from_environment(1, 1).process == 0; }

std::optional<RunResult> launch(const TrainConfig& config, const RankJob& job,
                                const AssembleParams& assemble, int loss_slots) {
  IntraOpLimit intra_op(config.ranks);
  std::unique_ptr<World> world = make_world(config);
  std::optional<RunResult> result;
  world->run([&](Communicator& comm) {
    ReportChannel channel(comm);
    StepRunner runner(config, &channel, loss_slots);
    job(comm, runner);
    RankOutcome mine = runner.take_outcome();
    // Snapshot before the gather, so that it describes training only.
    mine.report.counters = channel.training_counters();
    mine.report.reporting = channel.reporting_counters();
    mine.report.flight = channel.training_flight_record();
    std::vector<RankOutcome> all = channel.gather_to_root(mine);
    if (comm.rank() == 0) result = build_result(all, assemble);  // rank 0's process
  });
  return result;
}

RunResult solo_result(const TrainConfig& /*config*/, RankOutcome outcome) {
  std::vector<RankOutcome> one;
  one.push_back(std::move(outcome));
  return build_result(one, params_of_rank0);
}

std::vector<float> params_of_rank0(std::vector<std::vector<float>>& parts) {
  return std::move(parts.at(0));
}

AssembleParams assemble_slices(model::ParamLayout full, LocalLayout local, std::string strategy,
                               HeldRanges held) {
  return [full = std::move(full), local = std::move(local), strategy = std::move(strategy),
          held = std::move(held)](std::vector<std::vector<float>>& parts) {
    std::vector<float> out(full.size());
    std::vector<int> owner(full.size(), -1);  // the first rank that wrote each element
    for (int r = 0; r < static_cast<int>(parts.size()); ++r) {
      const model::ParamLayout mine = local(r);
      if (parts[r].size() != mine.size()) {
        throw Error(strategy + ": rank " + std::to_string(r) + " returned " +
                    std::to_string(parts[r].size()) + " parameters, its layout holds " +
                    std::to_string(mine.size()));
      }
      std::vector<char> is_held;
      if (held) {
        is_held.assign(mine.size(), 0);
        for (const model::ParamRange& h : held(r)) {
          std::fill(is_held.begin() + h.begin, is_held.begin() + h.end, 1);
        }
      }
      for (const model::ParamSlice& s : model::slices_into(mine, full)) {
        for (size_t i = 0; i < s.count; ++i) {
          if (!is_held.empty() && !is_held[s.local + i]) continue;
          const float v = parts[r][s.local + i];
          const size_t f = s.full + i;
          if (owner[f] < 0) {
            out[f] = v;
            owner[f] = r;
          } else if (std::bit_cast<uint32_t>(out[f]) != std::bit_cast<uint32_t>(v)) {
            std::string name;
            for (const model::ParamView& view : full.views()) {
              if (f >= view.offset && f < view.offset + view.size()) name = view.name;
            }
            throw Error(strategy + ": rank " + std::to_string(r) + "'s copy of " + name +
                        " diverged from rank " + std::to_string(owner[f]) +
                        "'s; replicated parameters must get identical updates on every rank");
          }
        }
      }
    }
    for (size_t f = 0; f < owner.size(); ++f) {
      if (owner[f] < 0) throw Error(strategy + ": no rank holds parameter " + std::to_string(f));
    }
    return out;
  };
}

}  // namespace dtsim::train
