#!/usr/bin/env bash
# Two bench/mlp_step binaries side by side on the one-core N = 1 step (issue 12's MLP):
#
#   bench/step_ab.sh BASE NEW [rounds] [steps] [mode]   (defaults 11, 150, 1)
#
# mode: mlp_step --overwrite 0 or 1, or fused (--fused 1: the SGD step inside backward).
# e.g. BASE a copy of main's build/bench/mlp_step, NEW this tree's. Each round runs both
# on core 0 (taskset -c 0), alternating which goes first; a run gives its median step CPU
# time and its 10th percentile (bench/mlp_step.cc). Prints the machine and load, each
# binary's first quartile, median and minimum over the rounds of both, and the median of
# the per-round NEW/BASE ratios of the run medians.
set -euo pipefail
. "$(dirname "$0")/stats.sh"
usage() {
  echo "usage: bench/step_ab.sh BASE_MLP_STEP NEW_MLP_STEP [rounds >= 1] [steps >= 2] [mode 0|1|fused]" >&2
  exit 2
}
[[ $# -ge 2 && $# -le 5 ]] || usage
base=$1 new=$2 rounds=${3:-11} steps=${4:-150} mode=${5:-1}
[[ -x $base && -x $new ]] || {
  echo "bench/step_ab.sh: '$base' and '$new' must be mlp_step binaries" >&2
  exit 2
}
[[ $rounds =~ ^[1-9][0-9]*$ && $steps =~ ^[0-9]+$ && $steps -ge 2 && $mode =~ ^([01]|fused)$ ]] || usage
if [[ $mode == fused ]]; then flags=(--fused 1); else flags=(--overwrite "$mode"); fi
echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; $(date -u '+%F %H:%M UTC');" \
  "load $(cut -d' ' -f1-3 /proc/loadavg); $rounds rounds of $steps steps, ${flags[*]}"
med_b="" med_n="" p10_b="" p10_n="" ratios=""
for ((r = 1; r <= rounds; r++)); do
  order=(base new)
  ((r % 2 == 0)) && order=(new base)
  for which in "${order[@]}"; do
    bin=$base
    [[ $which == new ]] && bin=$new
    read -r med p10 < <(taskset -c 0 "$bin" --steps "$steps" "${flags[@]}" | awk '{print $5, $7}')
    if [[ $which == base ]]; then
      med_b+="$med " p10_b+="$p10 " mb=$med
    else
      med_n+="$med " p10_n+="$p10 " mn=$med
    fi
  done
  ratios+="$(awk -v a="$mn" -v b="$mb" 'BEGIN { printf "%.4f", a / b }') "
done
step_summary 22 "base median" "$rounds" <<<"$med_b"
step_summary 22 "new  median" "$rounds" <<<"$med_n"
step_summary 22 "base p10" "$rounds" <<<"$p10_b"
step_summary 22 "new  p10" "$rounds" <<<"$p10_n"
echo "new/base per round: median $(median <<<"$ratios")"
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
