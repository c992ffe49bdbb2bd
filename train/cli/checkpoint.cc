// dtsim train's checkpoint flags (--save DIR, --save-every K, --resume DIR) and the
// dtsim checkpoint command: inspect DIR (tensors, chunks, the mesh it was saved from, the
// step; every checksum verified) and consolidate DIR OUT.safetensors (one unsharded file).
// The format and the crash-safe commit are train/checkpoint/'s (docs/checkpoints.md).
#include "train/cli/checkpoint.h"

#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include "runtime/job_start.h"
#include "runtime/types.h"
#include "train/checkpoint/tools.h"
#include "train/cli/commands.h"
#include "train/cli/flags.h"

namespace dtsim::cli {

void declare_checkpoint_flags(CLI::App* app, train::checkpoint::Options& o) {
  app->add_option("--save", o.save_dir,
                  "save a sharded checkpoint into DIR after the last step (and every "
                  "--save-every steps); the previous one is kept until the new one is complete")
      ->type_name("DIR")
      ->default_str("");
  app->add_option("--save-every", o.save_every, "with --save: also save after every K-th step")
      ->type_name("K")
      ->transform(Integer(1, 100000))
      ->default_str("");
  app->add_option("--resume", o.resume_dir,
                  "continue from the checkpoint in DIR, on this or any other mesh; --steps "
                  "counts the whole run")
      ->type_name("DIR")
      ->default_str("");
}

void check_checkpoint_flags(const CLI::App& app, train::TrainConfig& config) {
  train::checkpoint::Options& o = config.checkpoint;
  if (given(app, "--save-every") && o.save_dir.empty()) {
    fail("train", "--save-every needs --save DIR");
  }
  if (!o.active()) return;
  try {
    train::checkpoint::validate_resume(config);
    train::checkpoint::validate_save(config);
  } catch (const UsageError& e) {
    fail("train", e.what());
  }
  o.on_io = [dir = o.save_dir, from = o.resume_dir](const char* what, int64_t step, uint64_t bytes,
                                                    double seconds) {
    const bool saved = std::string(what) == "saved";
    const bool mb = bytes >= 1000000;
    std::printf("  %s step %lld %s %s: %.1f %s in %.3f s\n", what, static_cast<long long>(step),
                saved ? "into" : "from", (saved ? dir : from).c_str(), bytes / (mb ? 1e6 : 1e3),
                mb ? "MB" : "kB", seconds);
    std::fflush(stdout);
  };
}

namespace {

struct CheckpointFlags {
  std::string dir, out;
};

int run_inspect(const CheckpointFlags& f) {
  std::string text;
  try {
    text = train::checkpoint::inspect(f.dir);
  } catch (const UsageError& e) {
    fail("checkpoint", e.what());
  }
  begin_work();
  std::fputs(text.c_str(), stdout);
  return 0;
}

int run_consolidate(const CheckpointFlags& f) {
  std::error_code ec;
  if (std::filesystem::exists(f.out, ec)) {
    fail("checkpoint", "consolidate: " + f.out + " exists; give a new file name");
  }
  begin_work();
  int tensors = 0;
  try {
    tensors = train::checkpoint::consolidate(f.dir, f.out);
  } catch (const UsageError& e) {
    fail("checkpoint", e.what());
  }
  std::printf("consolidated %d tensors into %s\n", tensors, f.out.c_str());
  return 0;
}

}  // namespace

Command add_checkpoint(CLI::App& dtsim) {
  CLI::App* app = dtsim.add_subcommand(
      "checkpoint", "inspect or consolidate a sharded checkpoint that dtsim train --save wrote");
  describe(app,
           "A checkpoint is one folder per saved step of safetensors shards, one per rank that\n"
           "wrote, with a metadata.json naming each global tensor's chunks (docs/checkpoints.md).");
  app->require_subcommand(1);
  auto flags = std::make_shared<CheckpointFlags>();
  CLI::App* inspect = app->add_subcommand(
      "inspect",
      "tensors, chunks, sizes, the mesh it was saved from, the step; verifies checksums");
  inspect->add_option("DIR", flags->dir, "the directory --save wrote")->required();
  CLI::App* consolidate =
      app->add_subcommand("consolidate", "write one unsharded safetensors file of every tensor");
  consolidate->add_option("DIR", flags->dir, "the directory --save wrote")->required();
  consolidate->add_option("OUT", flags->out, "the .safetensors file to write (must not exist)")
      ->required();
  return {app, [inspect, flags] {
            return inspect->parsed() ? run_inspect(*flags) : run_consolidate(*flags);
          }};
}

}  // namespace dtsim::cli
