// Every strategy without pipeline stages, on one code path: ddp, zero1-3, tp, ep, dp-tp and
// any --dp --tp --ep --zero mesh. Each rank builds its model-parallel layers (parallelize.h)
// and runs MeshRank (mesh_rank.h): the data-parallel wrapper around them.
#include <memory>
#include <vector>

#include "train/launch.h"
#include "train/mesh.h"
#include "train/mesh_rank.h"
#include "train/parallelize.h"
#include "train/strategies.h"
#include "train/traced_comm.h"

namespace dtsim::train {

HeldRanges zero3_held(const TrainConfig& config, const MeshShape& shape, const LocalLayout& local) {
  if (zero_stage(config) != 3) return {};
  return [config, shape, local](int rank) {
    const MeshCoord at = mesh_coord(shape, rank);
    const model::ParamLayout layout = local(rank);
    const int sizes[2] = {shape.dp_cp(), shape.ep > 1 ? shape.dp / shape.ep : 1};
    const int ranks[2] = {at.dp_cp, shape.ep > 1 ? at.ep_group : 0};
    std::vector<model::ParamRange> out;
    for (const Zero3Segment& s :
         zero3_segments(layout, rank_dp_parts(config, shape, layout), sizes)) {
      out.push_back(zero3_owned(s, ranks[s.part]));
    }
    return out;
  };
}

std::optional<RunResult> run_mesh(const TrainConfig& config) {
  const MeshShape shape = config.mesh();
  const LocalLayout local = [config, shape](int rank) {
    return model::layout_of(rank_layers(config, shape, mesh_coord(shape, rank)));
  };
  return launch(
      config,
      [&](Communicator& world, StepRunner& runner) {
        Mesh mesh(world, shape);
        // An axis of width 1 needs no group: its layers are the plain ones.
        std::unique_ptr<TracedComm> tp, ep, cp;
        if (shape.tp > 1)
          tp = std::make_unique<TracedComm>(*mesh.tp(), runner.timeline(), config.algo);
        if (shape.ep > 1)
          ep = std::make_unique<TracedComm>(*mesh.ep(), runner.timeline(), config.algo);
        if (shape.cp > 1)
          cp = std::make_unique<TracedComm>(*mesh.cp(), runner.timeline(), config.algo);
        Trainee trainee(config,
                        rank_layers(config, shape, mesh.coord(), {tp.get(), ep.get(), cp.get()}),
                        rank_copies_input(config, shape), shape, mesh.coord());
        run_rank<MeshRank>(runner, trainee, config, mesh, trainee, runner);
      },
      assemble_slices(model_layout(config), local, to_string(config.strategy),
                      zero3_held(config, shape, local)));
}

}  // namespace dtsim::train
