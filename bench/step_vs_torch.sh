#!/usr/bin/env bash
# The one-core MLP training step (issue 12's N = 1 targets), dtsim's two gradient modes and
# PyTorch's two zero_grad modes side by side, in CPU time:
#
#   bench/step_vs_torch.sh [rounds]      (default 11)
#
# Each round runs, on one core (taskset -c 0), 50 steps of: build/bench/mlp_step with
# zero_grad + accumulate (--overwrite 0), with forward_backward_overwrite (--overwrite 1),
# with the SGD step inside backward (--fused 1: what dtsim train --strategy single runs
# with plain SGD), bench/torch_mlp.py with zero_grad(set_to_none=False) and with
# set_to_none=True. Prints each one's first quartile, median and minimum over the rounds of
# its per-run median step CPU time; the per-round torch/dtsim ratios of the same round's
# runs for four pairings (median, quartiles, how many rounds reach issue 12's 2); the
# host's speed per round (build/bench/fma_floor's floor for the step, run after each
# round's five) and the first pairing's median over the rounds with the quicker half of
# the floors; then the floor once more. Needs python3-torch
# (scripts/quickstart.sh does not install it: bench/torch_compare.sh says how). Torch's
# OpenBLAS runs its fastest kernel for this CPU (bench/torch_blas.sh; the header says which).
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/stats.sh
. bench/torch_blas.sh
rounds=${1:-11}
[[ $rounds =~ ^[1-9][0-9]*$ ]] || {
  echo "usage: bench/step_vs_torch.sh [rounds >= 1] (got '$rounds')" >&2
  exit 2
}
/usr/bin/python3 -c 'import torch' 2>/dev/null || {
  echo "bench/step_vs_torch.sh: PyTorch is missing: apt-get install python3-torch libopenblas0-pthread" >&2
  exit 2
}
cmake --build build --target mlp_step fma_floor >/dev/null
python=/usr/bin/python3
torch_blas_core
echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; $(date -u '+%F %H:%M UTC');" \
  "commit $(git rev-parse --short HEAD)$(git diff --quiet || echo '+dirty'); load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "$TORCH_BLAS_NOTE"
names=("dtsim zero_grad + accumulate" "dtsim forward_backward_overwrite"
  "torch set_to_none=False" "torch set_to_none=True" "dtsim SGD inside backward")
declare -a runs=("" "" "" "" "")
# Pairings (torch run, dtsim run) whose per-round ratio is printed: each side at its faster
# setting, and each dtsim mode beside torch's mode of the same gradient semantics.
pair_names=("torch False / dtsim SGD in backward (dtsim train's step)"
  "torch False / dtsim overwrite (separate SGD pass)"
  "torch False / dtsim accumulate (both accumulate)"
  "torch True / dtsim overwrite (both write fresh)")
pair_t=(2 2 2 3) pair_d=(4 1 0 1)
declare -a ratios=("" "" "" "")
floors=""
for ((r = 1; r <= rounds; r++)); do
  v=()
  v[0]=$(taskset -c 0 build/bench/mlp_step --steps 50 --overwrite 0 | awk '{print $5}')
  v[1]=$(taskset -c 0 build/bench/mlp_step --steps 50 --overwrite 1 | awk '{print $5}')
  v[2]=$(taskset -c 0 "$python" bench/torch_mlp.py --steps 50 | awk '{print $7}')
  v[3]=$(taskset -c 0 "$python" bench/torch_mlp.py --steps 50 --set-to-none | awk '{print $7}')
  v[4]=$(taskset -c 0 build/bench/mlp_step --steps 50 --fused 1 | awk '{print $5}')
  # The host's speed this round: fma_floor's floor for the step (ms; lower is quicker).
  floors+="$(taskset -c 0 build/bench/fma_floor | sed -n 's/.*-> floor \([0-9.]*\) ms.*/\1/p') "
  for i in 0 1 2 3 4; do runs[$i]+="${v[$i]} "; done
  for p in 0 1 2 3; do
    ratios[$p]+="$(awk -v t="${v[${pair_t[$p]}]}" -v d="${v[${pair_d[$p]}]}" 'BEGIN { printf "%.4f", t / d }') "
  done
done
for i in 0 1 4 2 3; do
  step_summary 33 "${names[$i]}" "$rounds" <<<"${runs[$i]}"
done
for p in 0 1 2 3; do
  tr ' ' '\n' <<<"${ratios[$p]}" | grep -v '^$' | sort -g | awk -v n="${pair_names[$p]}" \
    '{a[NR] = $1; if ($1 >= 2) hit++}
     END {printf "per round %-56s median %.2f q1 %.2f q3 %.2f; >= 2 in %d of %d\n", n,
       (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2, a[int(NR / 4) + 1],
       a[NR - int(NR / 4)], hit, NR}'
done
# The ratio moves with the host's speed (a busy host stretches torch's step more than
# dtsim's), so the first pairing's rounds are also split by their round's floor.
by_floor=$(paste -d' ' <(tr ' ' '\n' <<<"$floors" | grep -v '^$') \
  <(tr ' ' '\n' <<<"${ratios[0]}" | grep -v '^$') | sort -g)
half=$(((rounds + 1) / 2))
floor_sorted=$(awk '{print $1}' <<<"$by_floor")
printf 'per round fma_floor floor ms: min %.3f median %.3f max %.3f; %s over the %d %s: median %.2f\n' \
  "$(head -n 1 <<<"$floor_sorted")" "$(median <<<"$floor_sorted")" "$(tail -n 1 <<<"$floor_sorted")" \
  "torch False / dtsim SGD in backward" "$half" "quickest-host rounds" \
  "$(head -n "$half" <<<"$by_floor" | awk '{print $2}' | median)"
taskset -c 0 build/bench/fma_floor | tail -1
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
