// Every strategy without pipeline stages, on one code path: ddp, zero1-3, tp, ep, dp-tp and
// any --dp --tp --ep --zero mesh. Each rank builds its model-parallel layers (parallelize.h)
// and runs MeshRank (mesh_rank.h): the data-parallel wrapper around them.
#include <memory>
#include <vector>

#include "train/launch.h"
#include "train/mesh.h"
#include "train/mesh_rank.h"
#include "train/parallelize.h"
#include "train/placement_plan.h"
#include "train/strategies.h"
#include "train/traced_comm.h"

namespace dtsim::train {

std::optional<RunResult> run_mesh(const TrainConfig& config) {
  const MeshShape shape = config.mesh();
  // Each rank's layout and ZeRO-3 ownership, for assembling the final parameters.
  const auto placement = std::make_shared<const ModelPlacement>(config);
  const LocalLayout local = [placement, shape](int rank) {
    return placement->chunks(mesh_coord(shape, rank)).front();
  };
  HeldRanges held;
  if (placement->zero() == 3) held = [placement](int rank) { return placement->zero3_held(rank); };
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
        const DpParts& parts = placement->dp_parts(mesh.coord()).front();
        run_rank<MeshRank>(runner, trainee, config, mesh, trainee, runner, parts);
      },
      assemble_slices(model_layout(config), local, to_string(config.strategy), held));
}

}  // namespace dtsim::train
