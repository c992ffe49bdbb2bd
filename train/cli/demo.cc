// dtsim demo: the showcase. Trains the MLP and the MoE under every strategy that fits each
// model on 4 rank threads, and the tiny GPT under tp, tp + sequence parallelism and context
// parallelism (the dp x tp x pp row and the gpt's dp x tp x cp row on 8: under mpirun with P
// processes it runs as P x 8/P rank threads, or is skipped when P does not divide 8), checks each
// run against the single-rank reference that tests/train use for it (train/check.h), and prints one
// table: final loss, largest parameter difference, verdict, memory per rank by category, bytes sent
// per rank per step, step time. A DDP run with the division by N forgotten must fail its check (the
// lesson's first pitfall). Ends with the lesson's analytical numbers from the estimator. Exit code
// 0 when every real check passes and the pitfall fails as expected, 1 otherwise.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <array>
#include <chrono>
#include <cstdio>
#include <list>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "model/moe_model.h"
#include "model/param_layout.h"
#include "runtime/job_start.h"
#include "runtime/process_model.h"
#include "train/check.h"
#include "train/cli/commands.h"
#include "train/cli/flags.h"
#include "train/cli/html_data.h"
#include "train/cli/html_report.h"
#include "train/cli/output_file.h"
#include "train/cli/progress.h"
#include "train/cli/report_json.h"
#include "train/cli/table.h"
#include "train/estimate.h"
#include "train/launch.h"
#include "train/models/model_spec.h"
#include "train/strategies.h"

namespace dtsim::cli {
namespace {

using train::ModelKind;
using train::Strategy;

constexpr int kRanks = 4;
constexpr int kSteps = 200;
constexpr int kNameWidth = 29;  // the strategy column: "dp 2 x tp 2 x pp 2 1f1b zero1"
constexpr int kGptBatch = 8;    // sequences per step: the gpt's rows cost about the mlp's

struct Row {
  Strategy strategy;
  ModelKind model;
  Algo algo;
  bool pitfall = false;  // forget-divide, run with SGD as the tests do: Adam divides by the
                         // gradient's scale, so it would hide most of an N-times-too-large step
  train::MeshShape mesh = {};  // Strategy::kMesh only
  int zero = 0;
  int micro = 1;                   // micro-batches per replica (a pipeline's m; 1F1B schedule)
  bool sequence_parallel = false;  // gpt with tp > 1
};

train::TrainConfig base_config(ModelKind model, int steps) {
  train::TrainConfig c;
  c.model = model;
  c.ranks = kRanks;
  c.steps = steps;
  c.global_batch = 256;
  c.optimizer = model::OptimizerKind::kAdam;
  c.lr = 0.01f;
  c.precision = model::Precision::kFp32;
  c.mlp = {.input_dim = 16, .hidden_dim = 64, .num_blocks = 2, .output_dim = 4};
  c.moe.input_dim = 16;
  c.moe.num_classes = 4;
  c.moe.moe = {.d_model = 16,
               .d_ff = 32,
               .num_experts = 4,
               .top_k = 2,
               .capacity_factor = 1.25f,
               .aux_alpha = 0.01f};
  if (model == ModelKind::kGpt) {  // reversing 4 symbols; 4 heads, so tp 4 holds one each
    c.global_batch = kGptBatch;
    c.gpt = {.vocab = 9,
             .seq_len = 8,
             .d_model = 16,
             .heads = 4,
             .head_dim = 4,
             .num_layers = 2,
             .mlp_hidden = 32};
  }
  return c;
}

// DDP uses the deterministic all-reduce (bitwise check); the rest the bandwidth-optimal
// ring, so that their traffic is the lesson's 2(N - 1)/N.
std::vector<Row> rows() {
  const Algo det = Algo::kDeterministic, ring = Algo::kRing;
  std::vector<Row> r;
  for (ModelKind m : {ModelKind::kMlp, ModelKind::kMoe}) {
    r.push_back({Strategy::kSingle, m, ring});
    r.push_back({Strategy::kAccum, m, ring});
    r.push_back({Strategy::kDdp, m, det});
    for (Strategy z : {Strategy::kZero1, Strategy::kZero2, Strategy::kZero3})
      r.push_back({z, m, ring});
    if (m == ModelKind::kMlp) {
      r.push_back({Strategy::kTp, m, ring});
      r.push_back({Strategy::kDpTp, m, ring});
      r.push_back({Strategy::kMesh, m, ring, false, {.dp = 2, .tp = 2, .pp = 1, .ep = 1}, 1});
      r.push_back({Strategy::kMesh, m, det, false, {.dp = 2, .tp = 1, .pp = 2, .ep = 1}, 0, 4});
      // 3D: 8 ranks, the only row that is not 4.
      r.push_back({Strategy::kMesh, m, ring, false, {.dp = 2, .tp = 2, .pp = 2, .ep = 1}, 1, 4});
      r.push_back({Strategy::kDdp, m, det, true});
    } else {
      r.push_back({Strategy::kEp, m, ring});
      r.push_back({Strategy::kMesh, m, ring, false, {.dp = 4, .tp = 1, .pp = 1, .ep = 2}, 0});
    }
  }
  // The gpt: heads over tp, then its norm regions' tokens too (sp), the sequence over a ring
  // (cp, ring attention), and all three with dp on 8 ranks.
  const ModelKind gpt = ModelKind::kGpt;
  r.push_back({Strategy::kSingle, gpt, ring});
  r.push_back({Strategy::kTp, gpt, ring});
  r.push_back({Strategy::kTp, gpt, ring, false, {}, 0, 1, true});
  r.push_back({Strategy::kMesh, gpt, ring, false, {.cp = 4}});
  r.push_back({Strategy::kMesh, gpt, ring, false, {.dp = 2, .tp = 2, .cp = 2}, 0, 1, true});
  return r;
}

// The rank threads per process a run of `ranks` ranks takes in this job: 1 when every rank
// is a thread of this process; under mpirun with P processes ranks / P (the hybrid form,
// as train's --threads-per-process; run_demo admits only a P that divides every row's).
int threads_per_process_for(int ranks) {
  if (!ProcessModel::launched_by_mpi()) return 1;
  return ranks / ProcessModel::from_environment(ranks, 1).processes;
}

std::string reference_key(const train::TrainConfig& c) {
  return fmt::format("{}/{}/{}/{}/{}/{}", train::to_string(c.strategy), train::to_string(c.model),
                     optimizer_name(c.optimizer), c.ranks, c.micro_batches,
                     int(c.reverse_accumulation));
}

// A mesh row's name: "dp 2 x tp 2 x pp 2 1f1b zero1", "dp 4 ep 2", "dp 2 x tp 2 sp x cp 2".
std::string mesh_label(const train::TrainConfig& c) {
  const train::MeshShape& m = c.widths;
  std::string s;
  const auto axis = [&s](const char* name, int width) {
    if (width > 1) s += fmt::format("{}{} {}", s.empty() ? "" : " x ", name, width);
  };
  axis("dp", m.dp);
  axis("tp", m.tp);
  if (c.sequence_parallel) s += " sp";
  axis("pp", m.pp);
  if (m.pp > 1) s += " 1f1b";
  axis("cp", m.cp);
  if (m.ep > 1) s += fmt::format(" ep {}", m.ep);
  if (c.zero > 0) s += fmt::format(" zero{}", c.zero);
  return s;
}

// "8.5/8.5/17/17/17": weights/grads/master/adam_m/adam_v in KiB, the largest on any rank.
std::string memory_text(const train::RunResult& run) {
  const auto m = max_memory(run);
  std::string s;
  for (int c = 0; c < model::kNumMemoryCategories; ++c) {
    if (c == static_cast<int>(model::MemoryCategory::kActivations)) continue;
    s += (s.empty() ? "" : "/") + fmt::format("{:.3g}", m[c] / 1024.0);
  }
  return s;
}

// "ddp mlp, rank 0: 4 + 4 + 0 + 4 + 4 = 16 bytes of model state per parameter".
void print_bytes_per_param(const std::array<int64_t, model::kNumMemoryCategories>& memory,
                           size_t params) {
  std::string terms;
  double total = 0;
  for (int c = 0; c < model::kNumMemoryCategories; ++c) {
    if (c == static_cast<int>(model::MemoryCategory::kActivations)) continue;
    const double per_param = double(memory[c]) / params;
    terms += (terms.empty() ? "" : " + ") + fmt::format("{:.3g}", per_param);
    total += per_param;
  }
  std::printf("ddp mlp, rank 0, measured: %s = %.3g bytes of model state per parameter\n",
              terms.c_str(), total);
}

void print_lesson() {
  train::EstimateInput in;
  in.params = 7e9;
  in.ranks = 8;
  const train::Estimate e = train::estimate(in);
  std::printf(
      "\nthe lesson at scale (dtsim estimate --params 7e9 --ranks 8): mixed-precision Adam "
      "holds\n%.3g B/param, %s per GPU for 7B parameters under DDP; its ring all-reduce of %s "
      "of\nbf16 gradients sends %s per GPU per step.\n",
      e.static_bytes / in.params, gb_text(e.static_bytes).c_str(),
      gb_text(e.gradient_bytes).c_str(), gb_text(e.bytes_sent_per_step).c_str());
}

struct DemoFlags {
  int steps = kSteps;
  std::string html;
  bool quiet = false;
  bool wide = false;
};

int run_demo(const CLI::App& a, const DemoFlags& f) {
  const int steps = f.steps;
  const bool quiet = f.quiet;
  if (ProcessModel::launched_by_mpi()) {  // P processes x 4 / P rank threads per run
    const int processes = ProcessModel::from_environment(kRanks, 1).processes;
    if (kRanks % processes != 0) {  // then P divides the 3D row's 8 too
      fail("demo", fmt::format("its runs take {} ranks (the 3D row 8), which {} MPI processes do "
                               "not divide; start 1, 2 or 4 (mpirun -np 4)",
                               kRanks, processes));
    }
  }
  // Declared before any work: a bad path is a usage error, not a lost demo. Only the
  // process of global rank 0 writes it.
  OutputFile html;
  if (given(a, "--html")) html = OutputFile("demo", "html", f.html, train::holds_global_rank0());
  begin_work();
  const auto start = std::chrono::steady_clock::now();
  const std::vector<Row> plan = rows();
  const train::TrainConfig mlp = base_config(ModelKind::kMlp, steps);
  const train::TrainConfig moe = base_config(ModelKind::kMoe, steps);
  const train::TrainConfig gpt = base_config(ModelKind::kGpt, steps);
  if (train::holds_global_rank0()) {
    // Under mpirun the ranks are processes (x threads): the header says so.
    const std::string ranks =
        ProcessModel::launched_by_mpi()
            ? fmt::format("{} ranks as {} MPI processes x {} rank threads (the 3D rows 8)", kRanks,
                          kRanks / threads_per_process_for(kRanks), threads_per_process_for(kRanks))
            : fmt::format("{} rank threads (the 3D rows 8)", kRanks);
    const std::string gpt_shape = train::model_spec(gpt).describe(gpt);  // "gpt D 16 H 4x4 ..."
    std::printf(
        "dtsim demo: %s, %d steps, global batch %d, fp32 Adam lr "
        "%g\n  mlp: D %d H %d L %d (%zu params)   moe: D %d F %d E %d top-%d (%zu params)\n"
        "  gpt: %s (%zu params), batch %d sequences, reversing %d symbols\n\n",
        ranks.c_str(), steps, mlp.global_batch, mlp.lr, mlp.mlp.input_dim, mlp.mlp.hidden_dim,
        mlp.mlp.num_blocks, train::model_layout(mlp).size(), moe.moe.moe.d_model, moe.moe.moe.d_ff,
        moe.moe.moe.num_experts, moe.moe.moe.top_k, train::model_layout(moe).size(),
        gpt_shape.substr(4).c_str(), train::model_layout(gpt).size(), gpt.global_batch,
        gpt.gpt.seq_len / 2);
  }
  std::fflush(stdout);

  const std::vector<std::string> header{"strategy",           "model",     "final loss",
                                        "max |dparam|",       "check",     "verdict",
                                        "KiB w/g/master/m/v", "sent/step", "step"};
  Table t(header, {false, false, true, true, false, false, true, true, true});
  // Each row is printed as its run finishes, so the widths are fixed up front (the widest
  // cells the rows make: "dp 2 x tp 2 x pp 2 1f1b zero1", "rtol 1e-05 atol 1e-06 vs single",
  // ...). --wide prints that one table (161 columns); by default it is cut in two that fit
  // 100: the checks as the runs finish (the tolerance named "tol" and spelled out below),
  // then what each run held, sent and took.
  t.set_widths({kNameWidth, 5, 10, 12, 31, 20, 21, 9, 7});
  Table checks({header.begin(), header.begin() + 6}, {false, false, true, true, false, false});
  checks.set_widths({kNameWidth, 5, 10, 12, 16, 15});
  Table costs({"strategy", "model", "KiB w/g/master/m/v", "sent/step", "step"},
              {false, false, true, true, true});
  std::vector<std::vector<std::string>> cost_rows;
  std::string tolerances;  // the criteria "tol" stands for, in the order first met
  const bool root = train::holds_global_rank0();  // only its process prints
  HtmlTable html_table{header, {}, /*links=*/true};
  std::vector<HtmlPanel> panels;
  std::map<std::string, train::RunResult> references;
  bool ok = true;
  std::array<int64_t, model::kNumMemoryCategories> ddp_memory{};
  size_t ddp_params = 1;
  bool drifted = false;               // a row passed within float drift
  std::string gpt_row, gpt_accuracy;  // the last gpt row's name and held-out accuracy
  {
    Progress progress(static_cast<int>(plan.size()), root && !quiet);
    if (root) progress.print_line(f.wide ? t.header_text() : checks.header_text());
    for (const Row& row : plan) {
      train::TrainConfig c = row.model == ModelKind::kMlp   ? mlp
                             : row.model == ModelKind::kMoe ? moe
                                                            : gpt;
      c.strategy = row.strategy;
      c.algo = row.algo;
      c.sequence_parallel = row.sequence_parallel;
      std::string label = train::to_string(c.strategy);
      if (row.strategy == Strategy::kMesh) {
        c.widths = row.mesh;
        c.zero = row.zero;
        c.micro_batches = row.micro;
        c.ranks = c.widths.world();  // ep shards within the data axis
        label = mesh_label(c);
      } else if (c.sequence_parallel) {
        label += " sp";
      }
      if (row.pitfall) {
        c.pitfall = train::Pitfall::kForgetDivide;
        c.optimizer = model::OptimizerKind::kSgd;
        c.lr = 0.05f;
      }
      const std::string name = label + (row.pitfall ? " forget-divide sgd" : "");
      progress.advance(name + " " + train::to_string(c.model));
      // Under mpirun P processes x ranks / P threads (the 1-rank rows run on every process).
      if (c.ranks > 1) c.threads_per_process = threads_per_process_for(c.ranks);
      c.record_history = true;  // for the lockstep check
      c.on_step = [&progress, steps = c.steps](int done, double) {
        progress.set_steps(done, steps);
      };
      const std::optional<train::RunResult> trained = train::launch_training(c);
      if (!trained) continue;  // global rank 0 is in another process: it prints
      const train::RunResult& run = *trained;
      // Lockstep (check.h): the reference and floor partner restart every step from this
      // run's parameters, so they are this row's own, not shared with other rows.
      const train::CheckPlan check = train::lockstep_plan(train::plan_check(c), run);
      std::vector<std::string> cells{name, train::to_string(c.model),
                                     fmt::format("{:.4g}", run.losses.back())};
      train::CheckResult judged;
      const bool judging = check.reference.strategy != c.strategy;
      if (!judging) {  // a reference itself
        references[reference_key(c)] = run;
        cells.insert(cells.end(), {"-", "reference", ""});
      } else {
        std::list<train::RunResult> own;  // this row's lockstep runs (stable addresses)
        const auto cached = [&](const train::TrainConfig& ref) -> const train::RunResult& {
          if (ref.lockstep != nullptr) {
            train::TrainConfig quiet_ref = ref;
            quiet_ref.on_step = nullptr;
            return own.emplace_back(train::run_training(quiet_ref));
          }
          const std::string key = reference_key(ref);
          if (!references.count(key)) {
            train::TrainConfig quiet_ref = ref;  // the bar counts this row's own steps only
            quiet_ref.on_step = nullptr;
            references[key] = train::run_training(quiet_ref);
          }
          return references[key];
        };
        const train::CheckResult& r = judged =
            train::judge(check, run, cached(check.reference), cached);
        const bool good = row.pitfall ? !r.passed : r.passed;
        ok = ok && good;
        std::string verdict = r.verdict_text;
        if (row.pitfall) verdict += good ? " (expected FAIL)" : " (UNEXPECTED)";
        cells.insert(cells.end(), {fmt::format("{:.3g}", r.comparison.max_abs_diff),
                                   r.criterion + " vs " + r.reference_name, verdict});
        if (c.strategy == Strategy::kAccum) references[reference_key(c)] = run;
      }
      cells.insert(cells.end(), {memory_text(run), bytes_text(run.bytes_sent_per_step()),
                                 seconds_text(run.seconds_per_step)});
      if (html.open()) {
        html_table.rows.push_back(cells);
        panels.push_back(
            {name + " " + train::to_string(c.model),
             report_object(c, train::model_layout(c).size(), run, judging ? &judged : nullptr),
             mesh_diagram(c)});
      }
      // The terminal's verdict of a pass past tol but within float drift (check.h): "PASS
      // (drift)"; its numbers are in the html table and train --check's line.
      std::vector<std::string> shown = cells;
      if (judging && judged.verdict == train::Verdict::kWithinDrift && !row.pitfall) {
        shown[5] = "PASS (drift)";
        drifted = true;
      }
      if (root && f.wide) progress.print_line(t.row_text(shown));  // 1-rank rows: every process
      if (root && !f.wide) {
        std::vector<std::string> narrow(shown.begin(), shown.begin() + 6);
        if (const size_t at = narrow[4].find(" vs "); narrow[4].rfind("rtol", 0) == 0) {
          const std::string criterion = narrow[4].substr(0, at);
          if (tolerances.find(criterion) == std::string::npos) {
            tolerances += (tolerances.empty() ? "" : ", ") + criterion + " (" +
                          precision_name(c.precision) + ")";
          }
          narrow[4] = "tol" + narrow[4].substr(at);
        }
        if (const size_t at = narrow[5].find(" (expected FAIL)"); at != std::string::npos) {
          narrow[5] = narrow[5].substr(0, at) + " (expected)";
        }
        progress.print_line(checks.row_text(narrow));
        cost_rows.push_back({cells[0], cells[1], cells[6], cells[7], cells[8]});
      }
      if (c.model == ModelKind::kGpt) {
        gpt_row = name;
        gpt_accuracy = train::model_spec(c).evaluate(c, run.params);
      }
      if (c.strategy == Strategy::kDdp && c.model == ModelKind::kMlp && !row.pitfall) {
        ddp_memory = run.ranks[0].memory;
        ddp_params = train::model_layout(c).size();
      }
    }
  }
  if (!root) return 0;
  if (!f.wide) {
    std::printf(
        "\ncheck: bitwise = equal to the bit; tol = within %s%s\n\nwhat each run held, "
        "sent and took per rank:\n",
        tolerances.c_str(),
        drifted ? "\nPASS (drift) = past tol, within 4 x the floor that two correct "
                  "single-rank runs drift apart"
                : "");
    for (const auto& r : cost_rows) costs.add(r);
    costs.print(stdout);
  }
  std::printf(
      "\nmemory: peak KiB per rank (largest over the ranks) of weights/gradients/fp32 master/"
      "Adam m/Adam v;\nsent/step: bytes one rank sends per step (largest over the ranks); "
      "step: median wall time.\nsp: sequence parallel (tp's norm regions hold 1/tp of the "
      "tokens); cp: context parallel\n(ring attention, rank r holding sequence chunks r and "
      "2cp-1-r).\n");
  if (f.wide && drifted) {
    std::printf(
        "PASS (drift) = past tol, within 4 x the floor that two correct single-rank runs "
        "drift apart\n");
  }
  print_bytes_per_param(ddp_memory, ddp_params);
  if (!gpt_accuracy.empty()) {
    std::printf("gpt, the %s row's trained parameters:\n  %s\n", gpt_row.c_str(),
                gpt_accuracy.c_str());
  }
  print_lesson();
  if (html.open()) {
    html.commit(html_page("dtsim demo",
                          fmt::format("{} rank threads, {} steps per run; the table as printed, "
                                      "then one panel per run",
                                      kRanks, steps),
                          panels, &html_table));
    std::printf("\nhtml: %s\n", html.name().c_str());
  }
  std::printf("\n%s (%.1f s)\n",
              ok ? "every check passed; the forgotten division failed as expected"
                 : "SOME CHECKS DID NOT GO AS EXPECTED",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  return ok ? 0 : 1;
}

}  // namespace

Command add_demo(CLI::App& dtsim) {
  CLI::App* app = dtsim.add_subcommand(
      "demo", "every strategy on 4 ranks, checked against single-rank training, in one table");
  describe(
      app,
      "Trains a small MLP and a small MoE under every strategy that fits each on 4 rank\n"
      "threads (fp32 Adam), and a tiny GPT under tp, tp with sequence parallelism (sp),\n"
      "context parallelism (cp, ring attention) and dp x tp sp x cp on 8, and checks each\n"
      "against single-rank training with\n"
      "the reference and tolerance the tests use: ddp under the deterministic all-reduce\n"
      "bitwise against accumulation over the same micro-batches, the others within tolerance.\n"
      "A ddp run that forgets to divide the summed gradients by N must FAIL its check.\n"
      "Prints one table, then the lesson's numbers from the analytical estimator.\n"
      "Exit code 0 when every check passes and the pitfall fails as expected.");
  app->option_defaults()->always_capture_default();
  app->fallthrough();  // --config belongs to dtsim
  auto flags = std::make_shared<DemoFlags>();
  app->add_option("--steps", flags->steps, "optimizer steps per run")->transform(Integer(1, 10000));
  app->add_option("--html", flags->html,
                  "write a self-contained HTML page: the table, then per run its loss curve, "
                  "memory, traffic and collective time (README, \"Pictures\")")
      ->type_name("FILE")
      ->default_str("");
  app->add_flag("--quiet", flags->quiet, "no progress bar");
  app->add_flag("--wide", flags->wide,
                "one table of every column (161 wide) instead of two that fit 100 columns");
  app->footer("example: dtsim demo");
  return {app, [app, flags] { return run_demo(*app, *flags); }};
}

}  // namespace dtsim::cli
