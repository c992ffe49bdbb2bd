#!/usr/bin/env bash
# dtsim's AVX2/FMA GEMM against OpenBLAS in the whole N = 1 training step (issue 12):
#
#   bench/gemm_ab.sh [rounds]      (default 16)
#
# Builds bench/mlp_step twice, build/ (DTSIM_OWN_GEMM=ON, the default) and build-blas/
# (-DDTSIM_OWN_GEMM=OFF: every GEMM on OpenBLAS, all else the same), then alternates the
# two on one core (taskset -c 0), 40 steps each, and prints the first quartile, median and
# minimum over rounds of each binary's per-run median step CPU time (bench/mlp_step.cc).
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/stats.sh
rounds=${1:-16}
[[ $rounds =~ ^[1-9][0-9]*$ ]] || {
  echo "usage: bench/gemm_ab.sh [rounds >= 1] (got '$rounds')" >&2
  exit 2
}
for dir in build build-blas; do
  if [[ ! -f $dir/build.ninja ]]; then
    own=ON
    [[ $dir == build-blas ]] && own=OFF
    cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DDTSIM_OWN_GEMM=$own >/dev/null
  fi
  cmake --build "$dir" --target mlp_step >/dev/null
done
echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; $(date -u '+%F %H:%M UTC');" \
  "commit $(git rev-parse --short HEAD)$(git diff --quiet || echo '+dirty'); load $(cut -d' ' -f1-3 /proc/loadavg)"
declare -A runs
for ((r = 1; r <= rounds; r++)); do
  for dir in build-blas build; do
    runs[$dir]+="$(taskset -c 0 "$dir/bench/mlp_step" --steps 40 | awk '{print $5}') "
  done
done
for dir in build-blas build; do
  name="own-avx2"
  [[ $dir == build-blas ]] && name=openblas
  step_summary 9 "$name" "$rounds" <<<"${runs[$dir]}"
done
