#!/usr/bin/env bash
# Two dtsim binaries side by side on `dtsim train`'s step time for the demo's strategies at
# the demo's shape (the defaults: MLP D 16 H 64, batch 32):
#
#   bench/strategies_ab.sh BASE NEW [rounds] [steps]      (defaults 15 rounds, 300 steps)
#
# AB_SHAPE="--dim 256 --hidden 1024 --batch 256" (for example) adds its flags to every run:
# layers of megabytes, where allocation matters, instead of the demo's kilobytes.
#
# Each round runs both binaries on each strategy (alternating which goes first); a run's
# step time is the report's seconds_per_step (median over its steps after the first). Prints
# per strategy the median over rounds of the per-round NEW/BASE ratio. Steps here take tens
# of microseconds, so a ratio moves by several percent from run to run on a shared host.
set -euo pipefail
[[ $# -ge 2 && $# -le 4 && -x $1 && -x $2 ]] || {
  echo "usage: bench/strategies_ab.sh BASE_DTSIM NEW_DTSIM [rounds >= 1] [steps >= 2]" >&2
  exit 2
}
base=$1 new=$2 rounds=${3:-15} steps=${4:-300}
strategies=("--strategy ddp" "--strategy zero1" "--strategy zero3" "--strategy tp"
  "--strategy ep --model moe" "--dp 2 --tp 2 --pp 2 --layers 4 --micro-batches 4")
echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; $(date -u '+%F %H:%M UTC')"
echo "uptime before: $(uptime)"
step() { "$1" train $2 ${AB_SHAPE:-} --steps "$steps" --quiet --report - 2>/dev/null |
  sed -n 's/^ *"seconds_per_step": *\([0-9.e-]*\).*/\1/p'; }
declare -A ratios
for ((i = 1; i <= rounds; i++)); do
  for s in "${strategies[@]}"; do
    if ((i % 2)); then
      b=$(step "$base" "$s") && n=$(step "$new" "$s")
    else
      n=$(step "$new" "$s") && b=$(step "$base" "$s")
    fi
    ratios["$s"]+="$(awk -v a="$n" -v b="$b" 'BEGIN{printf "%.4f", a/b}') "
  done
done
echo "uptime after: $(uptime)"
for s in "${strategies[@]}"; do
  median=$(echo ${ratios[$s]} | tr ' ' '\n' | sort -g | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}')
  echo "$s ${AB_SHAPE:-}: new/base per-round median $median over $rounds rounds of $steps steps"
done
