// dtsim walk --tp T --sequence-parallel: Megatron's sequence parallelism (Korthikanti et al.
// 2022) as it runs. A one-layer gpt (model/gpt_layers.h) runs forward on T rank threads with
// the sharding the trainer gives it, its all-gathers and reduce-scatters wrapped to record,
// per call, the layer, the bytes this rank sent (the runtime's counters) and, for an
// all-gather, where this rank's rows landed in the gathered tensor (found by value): which
// tokens each rank held in the norm region before it. The same model then runs as plain
// tensor parallelism (an all-reduce in place of each pair), and the walk prints both, region
// by region, with the bytes per block side by side and the two runs' outputs compared.
#include "train/cli/walk_sequence.h"

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "model/gpt_layers.h"
#include "model/gpt_model.h"
#include "model/hooks.h"
#include "model/layer_stack.h"
#include "model/param_layout.h"
#include "runtime/communicator.h"
#include "runtime/world.h"
#include "train/cli/flags.h"

namespace dtsim::cli {
namespace sp_walk {  // named: the CLI builds as one unity file

const char* kOtherFlags[] = {"--op", "--ranks",         "--numel",    "--algo",           "--root",
                             "--pp", "--micro-batches", "--schedule", "--virtual-stages", "--wide",
                             "--cp"};

// One collective call on one rank.
struct Call {
  int layer = 0;  // 0 embedding, 1 attention block, 2 MLP block, 3 final norm, 4 head
  const char* op = "";
  uint64_t bytes = 0;     // this rank sent during the call
  std::vector<int> rows;  // all-gather: the gathered rows equal to this rank's input rows
};

struct LayerIndex : model::LayerHooks {
  int layer = 0;
  void before_forward(int l) override { layer = l; }
};

struct RankRun {
  std::vector<Call> calls;
  std::vector<float> logits;  // (S, V), replicated after the final norm's gather
};

model::GptConfig walk_model(int tp) {
  // Two tokens per rank; one head and 4 hidden units per rank.
  return {.vocab = 5,
          .seq_len = 2 * tp,
          .d_model = 8,
          .heads = tp,
          .head_dim = 4,
          .num_layers = 1,
          .mlp_hidden = 4 * tp};
}

// One forward pass of the walk's gpt on rank c.rank(), sequence parallel or plain tp; every
// collective runs the ring algorithm, whose bytes the lesson's formulas state.
RankRun run_rank(Communicator& c, int tp, bool sp) {
  const model::GptConfig g = walk_model(tp);
  RankRun out;
  LayerIndex hooks;
  const auto sent = [&c] { return c.counters().total().bytes_sent; };
  model::SequenceSharding sh;
  sh.rank = c.rank();
  sh.size = tp;
  sh.reduce = [&](std::span<float> x) {
    const uint64_t before = sent();
    c.all_reduce(x, ReduceOp::kSum, Algo::kRing);
    out.calls.push_back({hooks.layer, "all-reduce", sent() - before, {}});
  };
  if (sp) {
    sh.all_gather = [&](std::span<const float> in, std::span<float> all) {
      const uint64_t before = sent();
      c.all_gather(in, all, Algo::kRing);
      Call call{hooks.layer, "all-gather", sent() - before, {}};
      const size_t d = g.d_model, n = all.size() / d;
      for (size_t i = 0; i < in.size() / d; ++i) {
        for (size_t j = 0; j < n; ++j) {
          if (std::memcmp(&in[i * d], &all[j * d], d * sizeof(float)) == 0) {
            call.rows.push_back(static_cast<int>(j));
            break;
          }
        }
      }
      out.calls.push_back(std::move(call));
    };
    sh.reduce_scatter = [&](std::span<const float> in, std::span<float> mine) {
      const uint64_t before = sent();
      c.reduce_scatter(in, mine, ReduceOp::kSum, Algo::kRing);
      out.calls.push_back({hooks.layer, "reduce-scatter", sent() - before, {}});
    };
  }
  model::LayerStack stack(model::gpt_layers(g, sh), model::Precision::kFp32);
  stack.store().set_params(model::init_params(stack.layout(), 1));
  std::vector<float> tokens(g.seq_len);
  for (int t = 0; t < g.seq_len; ++t) tokens[t] = float(1 + t % (g.vocab - 1));
  const std::span<const float> y = stack.forward(0, tokens, 1, &hooks);
  out.logits.assign(y.begin(), y.end());
  return out;
}

std::vector<RankRun> run_world(int tp, bool sp) {
  WorldOptions opts;
  opts.timeout = std::chrono::milliseconds(10000);
  World world(tp, opts);
  std::vector<RankRun> runs(tp);
  world.run([&](Communicator& c) { runs[c.rank()] = run_rank(c, tp, sp); });
  return runs;
}

// "2-3" for rows {2, 3}; "0-7" for all of them; "?" when a row was not found.
std::string rows_text(std::vector<int> rows) {
  if (rows.empty()) return "?";
  std::sort(rows.begin(), rows.end());
  std::string s;
  for (size_t i = 0; i < rows.size();) {
    size_t j = i;
    while (j + 1 < rows.size() && rows[j + 1] == rows[j] + 1) ++j;
    s += (s.empty() ? "" : ",") +
         (j == i ? std::to_string(rows[i]) : fmt::format("{}-{}", rows[i], rows[j]));
    i = j + 1;
  }
  return s;
}

// A table row within 100 columns: the region, a cell per rank (6 wide beyond 6 ranks), bytes.
void print_row(const std::string& region, const std::vector<std::string>& cells,
               const std::string& bytes) {
  const size_t width = cells.size() > 6 ? 6 : 7;
  std::string line = fmt::format("{:<37}", region);
  for (const std::string& cell : cells) line += fmt::format("{:<{}}", cell, width);
  line += bytes;
  while (!line.empty() && line.back() == ' ') line.pop_back();
  std::printf("%s\n", line.c_str());
}

int run_walk_sequence(int tp) {
  begin_work();
  const model::GptConfig g = walk_model(tp);
  const std::vector<RankRun> sp = run_world(tp, true), plain = run_world(tp, false);
  std::printf(
      "dtsim walk: sequence parallelism on %d tensor-parallel ranks: one gpt layer (D %d, %d\n"
      "heads, F %d), one sample of %d tokens, forward, ring collectives; from a real run: the\n"
      "tokens each rank holds (at an all-gather, where its rows landed in the gathered tensor)\n\n",
      tp, g.d_model, g.heads, g.mlp_hidden, g.seq_len);
  std::vector<std::string> header;
  for (int r = 0; r < tp; ++r) header.push_back((tp > 6 ? "r" : "rank ") + std::to_string(r));
  print_row("region (tokens each rank holds)", header, "sent/rank");
  const std::string all = fmt::format("0-{}", g.seq_len - 1);
  const std::vector<std::string> whole(tp, all);
  // The calls of every rank come in the same order (the same layers, the same collectives).
  const std::vector<Call>& calls0 = sp[0].calls;
  const char* kNorm[] = {"", "attention's pre-norm LN", "MLP's pre-norm LN", "final norm"};
  const char* kCore[] = {"", "QKV, attention, out-proj (head r)", "fc1, GELU, fc2 (units 4r..4r+3)",
                         "LM head (replicated)"};
  uint64_t sp_block[3] = {0, 0, 0}, tp_block[3] = {0, 0, 0};
  bool ok = true;
  std::vector<std::string> held(tp);
  for (size_t k = 0; k < calls0.size(); ++k) {
    const Call& c = calls0[k];
    uint64_t most = 0;
    std::vector<std::string> rows(tp);
    for (int r = 0; r < tp; ++r) {
      ok = ok && sp[r].calls.size() == calls0.size();
      if (k >= sp[r].calls.size()) continue;
      most = std::max(most, sp[r].calls[k].bytes);
      rows[r] = rows_text(sp[r].calls[k].rows);
    }
    if (c.layer >= 1 && c.layer <= 2) sp_block[c.layer] += most;
    const std::string sent = fmt::format("{} B", most);
    if (std::strcmp(c.op, "all-gather") == 0) {
      if (c.layer == 1) print_row("embedding (this rank's tokens)", rows, "");
      print_row(kNorm[std::min(c.layer, 3)], rows, "");
      print_row(c.layer < 3 ? "  all-gather (f)" : "  all-gather (for the head)", whole, sent);
      print_row(kCore[std::min(c.layer, 3)], whole, "");
      held = rows;
    } else if (std::strcmp(c.op, "reduce-scatter") == 0) {
      // Its output rows are the next all-gather's input rows (found there by value).
      std::vector<std::string> next = held;
      for (size_t k2 = k + 1; k2 < calls0.size(); ++k2) {
        if (std::strcmp(calls0[k2].op, "all-gather") != 0) continue;
        for (int r = 0; r < tp; ++r) next[r] = rows_text(sp[r].calls[k2].rows);
        break;
      }
      print_row("  reduce-scatter (g), bias, residual", next, sent);
    } else {
      print_row(fmt::format("  {} (layer {})", c.op, c.layer), whole, sent);
    }
  }
  for (size_t k = 0; k < plain[0].calls.size(); ++k) {
    uint64_t most = 0;
    for (int r = 0; r < tp; ++r) {
      ok = ok && plain[r].calls.size() == plain[0].calls.size();
      if (k < plain[r].calls.size()) most = std::max(most, plain[r].calls[k].bytes);
    }
    const int layer = plain[0].calls[k].layer;
    if (layer >= 1 && layer <= 2) tp_block[layer] += most;
  }
  double diff = 0;
  for (int r = 0; r < tp; ++r) {
    for (size_t i = 0; i < sp[r].logits.size() && i < plain[r].logits.size(); ++i) {
      diff = std::max(diff, double(std::abs(sp[r].logits[i] - plain[r].logits[i])));
    }
  }
  const uint64_t activation = uint64_t(g.seq_len) * g.d_model * sizeof(float);
  std::printf(
      "\nbytes one rank sends per block, forward (S x D x 4 B = %llu B activations):\n"
      "  attention: sp all-gather + reduce-scatter %llu B; plain tp all-reduce %llu B\n"
      "  MLP:       sp all-gather + reduce-scatter %llu B; plain tp all-reduce %llu B\n"
      "  formula: (T-1)/T + (T-1)/T = 2(T-1)/T x %llu B = %llu B each (%s)\n",
      static_cast<unsigned long long>(activation), static_cast<unsigned long long>(sp_block[1]),
      static_cast<unsigned long long>(tp_block[1]), static_cast<unsigned long long>(sp_block[2]),
      static_cast<unsigned long long>(tp_block[2]), static_cast<unsigned long long>(activation),
      static_cast<unsigned long long>(2 * (tp - 1) * activation / tp),
      sp_block[1] == tp_block[1] && sp_block[2] == tp_block[2] ? "equal" : "NOT equal");
  std::printf(
      "backward mirrors it: an all-gather of dy at each reduce-scatter, a reduce-scatter of the\n"
      "norm's input gradient at each all-gather (plain tp: one all-reduce), the same bytes;\n"
      "sp also all-reduces the norms' weight gradients. Between the regions each rank holds\n"
      "1/%d of the tokens, so the norms' and residuals' activations shrink %d-fold.\n"
      "check: the sp run's logits against the plain tp run's: max |diff| %.3g (%s)\n",
      tp, tp, diff, diff <= 1e-5 ? "ok" : "DIFFERENT");
  ok = ok && sp_block[1] == tp_block[1] && sp_block[2] == tp_block[2] && diff <= 1e-5;
  return ok ? 0 : 1;
}

}  // namespace sp_walk

std::function<std::optional<int>()> add_walk_sequence(CLI::App* walk) {
  auto tp = std::make_shared<int>(2);
  auto sp = std::make_shared<bool>(false);
  walk->add_option("--tp", *tp,
                   "tensor-parallel ranks: with --sequence-parallel, walk a gpt layer's regions")
      ->transform(Integer(2, 8))
      ->default_str("");
  walk->add_flag("--sequence-parallel", *sp,
                 "with --tp: which tokens each rank holds between the regions, and the bytes");
  return [tp, sp, walk]() -> std::optional<int> {
    const bool has_tp = given(*walk, "--tp");
    if (!has_tp && !*sp) return std::nullopt;
    if (!*sp) fail("walk", "--tp walks sequence parallelism: add --sequence-parallel");
    if (!has_tp) fail("walk", "--sequence-parallel needs --tp 2 or more (the ranks)");
    for (const char* flag : sp_walk::kOtherFlags) {
      if (given(*walk, flag)) {
        fail("walk", std::string(flag) +
                         " belongs to another walk; --tp --sequence-parallel takes no other flag");
      }
    }
    return sp_walk::run_walk_sequence(*tp);
  };
}

}  // namespace dtsim::cli
