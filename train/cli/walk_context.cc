// dtsim walk --cp N: context parallelism's ring attention (model/ring_attention.h) as it
// runs: the sequence in 2N chunks, rank r holding query chunks r and 2N-1-r; at each ring
// step, which K/V chunks each rank holds and which causal (query chunk, key chunk) blocks it
// computes, from ring_step_blocks (the very list the kernel loops over); then every block of
// the 2N x 2N causal matrix with the rank and step that computes it, and the ring's sends.
#include "train/cli/walk_context.h"

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "model/ring_attention.h"
#include "train/cli/flags.h"

namespace dtsim::cli {
namespace {

const char* kOtherFlags[] = {"--op", "--ranks",         "--numel",    "--algo",           "--root",
                             "--pp", "--micro-batches", "--schedule", "--virtual-stages", "--wide"};

// Work in c x c blocks: a diagonal (causal triangle) block is half of one.
double work(const std::vector<model::RingBlock>& blocks) {
  double w = 0;
  for (const model::RingBlock& b : blocks) w += b.diagonal ? 0.5 : 1.0;
  return w;
}

int run_walk_context(int n) {
  const int chunks = 2 * n;
  std::printf(
      "dtsim walk: context parallelism, %d ranks; the sequence in %d chunks, rank r "
      "holding query chunks r and %d-r (head-tail)\n",
      n, chunks, chunks - 1);
  std::printf(
      "each step a rank runs the kernel on (its query chunk, a held K/V chunk) pairs "
      "the causal mask leaves, merges by log-sum-exp, then passes its K/V to rank r+1\n"
      "(qA.kB: query chunk A over key chunk B; ◣ a diagonal block, half the work)\n\n");
  std::vector<std::vector<int>> who(chunks, std::vector<int>(chunks, -1));
  std::vector<std::vector<int>> when(chunks, std::vector<int>(chunks, -1));
  std::vector<double> totals(n, 0.0);
  bool balanced = true;
  for (int t = 0; t < n; ++t) {
    std::printf("step %d\n", t);
    double first = -1;
    for (int r = 0; r < n; ++r) {
      const int owner = ((r - t) % n + n) % n;
      const std::vector<model::RingBlock> blocks = model::ring_step_blocks(r, n, t);
      std::string cells;
      for (const model::RingBlock& b : blocks) {
        cells += fmt::format(" q{}.k{}{}", b.q_chunk, b.kv_chunk, b.diagonal ? "◣" : "");
        who[b.q_chunk][b.kv_chunk] = r;
        when[b.q_chunk][b.kv_chunk] = t;
      }
      const double w = work(blocks);
      totals[r] += w;
      if (first < 0) first = w;
      balanced = balanced && w == first;
      const std::string from = owner == r ? "its own" : fmt::format("from rank {}", owner);
      std::printf("  rank %d  holds kv %d+%d (%s)%*s computes%-24s work %.1f\n", r,
                  model::cp_chunk(owner, n, 0), model::cp_chunk(owner, n, 1), from.c_str(),
                  owner == r ? 5 : 1, "", cells.c_str(), w);
    }
    if (t + 1 < n)
      std::printf("  send: each rank passes the K/V it holds (2 chunks) to rank r+1\n");
  }
  std::printf(
      "\nthe causal matrix (query chunk down, key chunk across): rank@step computing "
      "each block, . masked\n     ");
  for (int k = 0; k < chunks; ++k) std::printf(" k%-3d", k);
  std::printf("\n");
  for (int q = 0; q < chunks; ++q) {
    std::printf("  q%-2d", q);
    for (int k = 0; k < chunks; ++k) {
      if (who[q][k] < 0) {
        std::printf("  .  ");
      } else {
        std::printf(" %d@%d ", who[q][k], when[q][k]);
      }
    }
    std::printf("\n");
  }
  std::printf("\nwork per rank (c x c blocks):");
  for (int r = 0; r < n; ++r) std::printf(" %.1f", totals[r]);
  std::printf(" (%s)\na contiguous split (rank r holding chunks 2r, 2r+1) would give:",
              balanced ? "equal at every step" : "NOT balanced");
  for (int r = 0; r < n; ++r) std::printf(" %d", 4 * r + 2);  // (2r + 1/2) + (2r + 1 + 1/2)
  std::printf("\n");
  std::printf(
      "K/V sends per attention: %d shifts x 2 chunks = 2(N - 1) = %d chunks forward; "
      "backward the same K/V again plus %d chunks of dK/dV partials, the last shift "
      "bringing each home\n",
      n - 1, 2 * (n - 1), 2 * (n - 1));
  return balanced ? 0 : 1;
}

}  // namespace

std::function<std::optional<int>()> add_walk_context(CLI::App* walk) {
  auto n = std::make_shared<int>(2);
  walk->add_option("--cp", *n,
                   "context-parallel ranks: walk ring attention's steps instead (the sequence "
                   "in 2 --cp chunks)")
      ->transform(Integer(1, 16))
      ->default_str("");
  return [n, walk]() -> std::optional<int> {
    if (!given(*walk, "--cp")) return std::nullopt;
    for (const char* flag : kOtherFlags) {
      if (given(*walk, flag)) {
        fail("walk", std::string(flag) + " belongs to another walk; --cp takes no other flag");
      }
    }
    return run_walk_context(*n);
  };
}

}  // namespace dtsim::cli
