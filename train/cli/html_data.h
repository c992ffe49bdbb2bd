// What the --html page draws beyond a run's --report object (report_json.h): the mesh
// diagram (which rank holds which shard on each axis) and, for a pipeline, the
// point-to-point sends and receives over the step its timeline shows.
//
// Thread safety: pure functions of their arguments.
#pragma once

#include <nlohmann/json.hpp>

#include "train/config.h"
#include "train/result.h"

namespace dtsim::cli {

// The mesh of `config`, rank by rank, from the model's layout on each rank (its ModelSpec):
// {"dp", "tp", "pp", "ep", "cp", "zero", "params", "ranks": [...]} (a model with a sequence
// also "seq" and "sequence_parallel"), each rank with its coordinates ("dp", "tp", "pp",
// "ep", "ep_group", "cp"), for a sequence model "tokens" (the positions it holds between the
// blocks: "0–1, 6–7"), "layers" (the names of the model layers
// it holds: its pipeline chunks'), "params" (elements it holds), "tp_shards" (every tensor
// it holds a block of: "tensor", "row0", "rows", "full_rows", "col0", "cols", "full_cols"),
// "experts" (per MoE layer the experts it holds: "layer", "ids") and, under ZeRO, "zero_owned"
// (the elements whose optimizer state it keeps; with ZeRO-2 their gradients, ZeRO-3 their
// weights too).
nlohmann::json mesh_diagram(const train::TrainConfig& config);

// The sends and receives of the pipeline stages over the step of `timeline` (the report's
// pipeline.timeline object; null gives null): per stage "stage", "rank" and "events", each
// "kind" ("send" or "receive"), "start" and "end" in seconds from the timeline's origin,
// clipped to its span, and "bytes" (sent). From the ranks' timelines (TrainConfig::trace).
nlohmann::json pipeline_p2p(const train::TrainConfig& config, const train::RunResult& run,
                            const nlohmann::json& timeline);

}  // namespace dtsim::cli
