#!/usr/bin/env bash
# dtsim against PyTorch on the same MLP, side by side in one run (issue 12):
#
#   bench/torch_compare.sh [rounds] [steps]      (defaults: 5 rounds, 50 steps)
#
# MLP D 256, H 1024, one block, 4 outputs, global batch 64, SGD, fp32, `steps` steps. Per
# round, for N = 1, 2, 4: PyTorch (bench/torch_mlp.py: one intra-op thread per process, gloo
# DDP for N > 1), then dtsim (`dtsim train --strategy single|ddp`); rounds interleave the
# two so load drifts hit both. N = 1 runs on one core (taskset -c 0) for both. Each run
# reports the median step time over its steps; the table gives the median over rounds, the
# ratio torch / dtsim, and the one-core FMA floor (bench/fma_floor.cc) of the same run.
# A last row compares the N = 1 step's CPU time (torch's main thread with one intra-op
# thread; dtsim's bench/mlp_step.cc on one thread): on a shared machine wall time also
# counts the waits for the core, CPU time only the step's own work.
#
# Torch's OpenBLAS runs its fastest kernel for this CPU (bench/torch_blas.sh; the header
# says which). Installs python3-torch and libopenblas0-pthread (Debian, apt-get) if missing: PyTorch is
# a yardstick here only, never a dependency of dtsim or its tests. Builds build/ (configured
# as in the Quick start) if needed.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/stats.sh
. bench/torch_blas.sh

rounds=${1:-5}
steps=${2:-50}
[[ $rounds =~ ^[1-9][0-9]*$ && $steps =~ ^[1-9][0-9]*$ && $steps -gt 3 ]] || {
  echo "usage: bench/torch_compare.sh [rounds >= 1] [steps > 3] (got '$rounds' '$steps')" >&2
  exit 2
}

missing=()
for p in python3-torch libopenblas0-pthread; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "installing: ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${missing[@]}" >/dev/null
fi
python=/usr/bin/python3 # Debian's python3, where python3-torch lives
torch_blas_core

if [[ ! -f build/build.ninja ]]; then
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
fi
cmake --build build --target dtsim fma_floor mlp_step >/dev/null

model=(--dim 256 --hidden 1024 --layers 1 --batch 64 --optimizer sgd --steps "$steps")
declare -A torch_ms dtsim_ms
torch_cpu="" dtsim_cpu=""
echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; $(date -u '+%F %H:%M UTC');" \
  "commit $(git rev-parse --short HEAD)$(git diff --quiet || echo '+dirty')"
echo "$TORCH_BLAS_NOTE"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
for ((r = 1; r <= rounds; r++)); do
  for n in 1 2 4; do
    pin=()
    ((n == 1)) && pin=(taskset -c 0)
    tout=$("${pin[@]}" "$python" bench/torch_mlp.py --ranks "$n" --steps "$steps" \
      --port $((29500 + r * 10 + n)))
    t=$(awk '/^torch ranks/ {print $5}' <<<"$tout")
    strategy=ddp
    ((n == 1)) && strategy=single
    d=$("${pin[@]}" build/dtsim train --strategy "$strategy" --ranks "$n" "${model[@]}" --quiet |
      awk '/^step time/ {v = $3; if ($4 == "us") v /= 1000; if ($4 == "s") v *= 1000; print v}')
    torch_ms[$n]+="$t "
    dtsim_ms[$n]+="$d "
    echo "round $r N=$n: torch $t ms, dtsim $d ms" >&2
    if ((n == 1)); then
      tc=$(awk '/^torch ranks/ {print $7}' <<<"$tout")
      dc=$(taskset -c 0 build/bench/mlp_step --steps "$steps" | awk '{print $5}')
      torch_cpu+="$tc " dtsim_cpu+="$dc "
      echo "round $r N=1 CPU time: torch $tc ms, dtsim $dc ms" >&2
    fi
  done
done
floor=$(build/bench/fma_floor --dim 256 --hidden 1024 --out 4 --batch 64)
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "$floor"
floor_ms=$(awk '/floor/ {for (i = 1; i <= NF; i++) if ($i == "floor") print $(i + 1)}' <<<"$floor")

echo
echo "MLP D 256 H 1024, 1 block, global batch 64, SGD fp32, $steps steps; medians of $rounds rounds"
printf '%6s %14s %14s %14s %16s\n' ranks "torch ms" "dtsim ms" "torch/dtsim" "dtsim/FMA floor"
for n in 1 2 4; do
  t=$(median <<<"${torch_ms[$n]}")
  d=$(median <<<"${dtsim_ms[$n]}")
  awk -v n="$n" -v t="$t" -v d="$d" -v f="$floor_ms" 'BEGIN {
    fl = (n == 1) ? sprintf("%.2f", d / f) : "-";
    printf "%6d %14.2f %14.2f %14.2f %16s\n", n, t, d, t / d, fl }'
done
t=$(median <<<"$torch_cpu")
d=$(median <<<"$dtsim_cpu")
awk -v t="$t" -v d="$d" -v f="$floor_ms" 'BEGIN {
  printf "%6s %14.2f %14.2f %14.2f %16.2f\n", "1 cpu", t, d, t / d, d / f }'
echo "(N = 1: one core for both, taskset -c 0; N > 1: both cores; torch: 1 intra-op thread per rank;"
echo " 1 cpu: CPU time of the N = 1 step, torch's main thread vs bench/mlp_step.cc)"
