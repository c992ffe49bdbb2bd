#!/usr/bin/env bash
# The attention kernel's forward + backward (one head, causal) on one core beside the
# one-core FMA floor of the same run: builds fma_floor and attention_step in BUILD (default
# build), pins both to core 0 and prints attention_step's ratio to the floor.
#
#   bench/attention_vs_floor.sh [BUILD] [attention_step options, e.g. --seq 256 --head-dim 64]
set -euo pipefail
build=${1:-build}
shift || true
cmake --build "$build" --target fma_floor attention_step >/dev/null
floor_line=$(taskset -c 0 "$build/bench/fma_floor" | head -n -1)
echo "$floor_line"
gflops=$(echo "$floor_line" | awk '{ if ($2 + 0 > best) best = $2 + 0 } END { print best }')
taskset -c 0 "$build/bench/attention_step" --floor-gflops "$gflops" "$@"
