#!/usr/bin/env bash
# The one-core GPT training step (issue 33's speed line): dtsim against PyTorch for the same
# model in fp32, in CPU time:
#
#   bench/gpt_vs_torch.sh [rounds]      (default 7)
#
# Two shapes: the README's tiny GPT (D 32, S 10, H 2, L 2, F 64, V 9, batch 32) and a larger
# one (D 128, S 64, H 4, L 2, F 512, V 9, batch 16). Each round runs, for each shape, on one
# core (taskset -c 0): build/bench/gpt_step (zero_grad, forward, backward, Adam: the step of
# `dtsim train --strategy single --model gpt --optimizer adam`) and bench/torch_gpt.py
# (torch.nn layers and autograd, torch.optim.Adam, zero_grad(set_to_none=False), one
# intra-op thread), each the median of its steps after 3 warm-up ones, in the thread's CPU
# time (on a shared host wall time grows with the neighbours, CPU time stays put). The
# shapes and the two programs alternate within each round. Prints both parameter counts
# (they must match), each side's median over the rounds, the per-round torch/dtsim ratios
# and their median. Torch's OpenBLAS runs its fastest kernel for this CPU
# (bench/torch_blas.sh: it ignores an inherited OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE and
# times the detected core and each the flags allow). Needs python3-torch.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/stats.sh
. bench/torch_blas.sh
rounds=${1:-7}
[[ $rounds =~ ^[1-9][0-9]*$ ]] || {
  echo "usage: bench/gpt_vs_torch.sh [rounds >= 1] (got '$rounds')" >&2
  exit 2
}
python=/usr/bin/python3
"$python" -c 'import torch' 2>/dev/null || {
  echo "bench/gpt_vs_torch.sh: PyTorch is missing: apt-get install python3-torch libopenblas0-pthread" >&2
  exit 2
}
cmake --build build --target gpt_step >/dev/null
torch_blas_core
export OMP_NUM_THREADS=1
echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; $(date -u '+%F %H:%M UTC');" \
  "commit $(git rev-parse --short HEAD)$(git diff --quiet || echo '+dirty'); load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "$TORCH_BLAS_NOTE"
names=("tiny D 32 S 10 H 2 L 2 F 64 B 32" "large D 128 S 64 H 4 L 2 F 512 B 16")
shapes=("--dim 32 --seq 10 --heads 2 --layers 2 --hidden 64 --batch 32 --steps 60"
  "--dim 128 --seq 64 --heads 4 --layers 2 --hidden 512 --batch 16 --steps 20")
declare -a dt=("" "") tt=("" "") ratios=("" "") params=("" "")
for ((r = 1; r <= rounds; r++)); do
  for s in 0 1; do
    # shellcheck disable=SC2086
    if ((r % 2)); then
      d=$(taskset -c 0 build/bench/gpt_step ${shapes[$s]})
      t=$(taskset -c 0 "$python" bench/torch_gpt.py ${shapes[$s]})
    else
      t=$(taskset -c 0 "$python" bench/torch_gpt.py ${shapes[$s]})
      d=$(taskset -c 0 build/bench/gpt_step ${shapes[$s]})
    fi
    dc=$(awk '{print $7}' <<<"$d") tc=$(awk '{print $7}' <<<"$t")
    params[$s]="dtsim $(awk '{print $3}' <<<"$d"), torch $(awk '{print $3}' <<<"$t")"
    dt[$s]+="$dc " tt[$s]+="$tc "
    ratios[$s]+="$(awk -v t="$tc" -v d="$dc" 'BEGIN { printf "%.3f", t / d }') "
  done
done
for s in 0 1; do
  echo "${names[$s]}: parameters ${params[$s]}"
  step_summary 8 "  dtsim" "$rounds" <<<"${dt[$s]}"
  step_summary 8 "  torch" "$rounds" <<<"${tt[$s]}"
  echo "  torch/dtsim per round: ${ratios[$s]}-> median $(median <<<"${ratios[$s]}")"
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
