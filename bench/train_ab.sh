#!/usr/bin/env bash
# Two dtsim binaries side by side on `dtsim train`'s step time (issue 12's MLP: D 256,
# H 1024, one block, global batch 64, SGD, fp32), single on 1 rank and ddp on 4 ranks:
#
#   bench/train_ab.sh BASE NEW [rounds] [steps]      (defaults 11 rounds, 200 steps)
#
# e.g. BASE a copy of main's build/dtsim, NEW this tree's. Each round runs both binaries
# (alternating which goes first) on both strategies; a run's step time is the report's
# seconds_per_step, the median over its steps after the first (wall time). Prints the
# machine and load before and after, then per strategy each binary's median over the
# rounds and the median of the per-round NEW/BASE ratios. Run it from a shell that did
# `echo -10 > /proc/self/autogroup` on a shared machine, so other programs wait first.
set -euo pipefail
. "$(dirname "$0")/stats.sh"
usage() {
  echo "usage: bench/train_ab.sh BASE_DTSIM NEW_DTSIM [rounds >= 1] [steps >= 2]" >&2
  exit 2
}
[[ $# -ge 2 && $# -le 4 ]] || usage
base=$1 new=$2 rounds=${3:-11} steps=${4:-200}
[[ -x $base && -x $new ]] || {
  echo "bench/train_ab.sh: '$base' and '$new' must be dtsim binaries" >&2
  exit 2
}
[[ $rounds =~ ^[1-9][0-9]*$ && $steps =~ ^[1-9][0-9]*$ && $steps -ge 2 ]] || usage
model=(--dim 256 --hidden 1024 --layers 1 --batch 64 --steps "$steps" --quiet --report -)
echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; $(date -u '+%F %H:%M UTC')"
echo "uptime before: $(uptime)"
step_ms() { "$1" train "${@:2}" "${model[@]}" 2>/dev/null |
  sed -n 's/^ *"seconds_per_step": *\([0-9.e-]*\).*/\1/p' | awk '{printf "%.4f", $1 * 1000}'; }
declare -A runs
for ((r = 1; r <= rounds; r++)); do
  order=(base new)
  ((r % 2 == 0)) && order=(new base)
  for strategy in single ddp; do
    ranks=1
    [[ $strategy == ddp ]] && ranks=4
    for which in "${order[@]}"; do
      bin=$base
      [[ $which == new ]] && bin=$new
      runs[$strategy.$which]+="$(step_ms "$bin" --strategy "$strategy" --ranks "$ranks") "
    done
  done
done
echo "uptime after: $(uptime)"
for strategy in single ddp; do
  b=${runs[$strategy.base]} n=${runs[$strategy.new]}
  ratios=$(paste -d' ' <(tr ' ' '\n' <<<"$b" | grep -v '^$') <(tr ' ' '\n' <<<"$n" | grep -v '^$') |
    awk '{printf "%.4f ", $2 / $1}')
  printf "%-6s base median %.3f ms  new median %.3f ms  new/base per-round median %.3f  (%d rounds of %d steps)\n" \
    "$strategy" "$(median <<<"$b")" "$(median <<<"$n")" "$(median <<<"$ratios")" "$rounds" "$steps"
done
