#!/bin/bash
# Interleaved rounds of the waits' benchmarks for two builds, alone or with 4 busy loops in
# this shell's session (same autogroup, so they compete with the ranks at equal weight):
# nccl_table's 8-byte all_reduce at N=2,4,8,16 (us per call), a ddp training run on 8
# ranks and the demo (wall seconds). Prints one line per measurement, then the medians.
#
#   bench/wait_under_load.sh alone|loaded ROUNDS DEMO_STEPS TRAIN_STEPS BUILD_A BUILD_B
#   bench/wait_under_load.sh alone 9 200 2000 /tmp/main/build build
#
# "alone" raises this shell's autogroup (echo -10 > /proc/self/autogroup) against the
# machine's other work, as bench/RESULTS.md's measurements do; "loaded" leaves it at 0.
set -u
if [ $# -ne 6 ] || { [ "$1" != alone ] && [ "$1" != loaded ]; }; then
  echo "usage: $0 alone|loaded ROUNDS DEMO_STEPS TRAIN_STEPS BUILD_A BUILD_B" >&2
  exit 2
fi
mode=$1 rounds=$2 demo_steps=$3 train_steps=$4 builds=("$5" "$6")
for b in "${builds[@]}"; do
  if [ ! -x "$b/dtsim" ] || [ ! -x "$b/bench/nccl_table" ]; then
    echo "$0: $b has no dtsim and bench/nccl_table; build them first" >&2
    exit 2
  fi
done
out=$(mktemp)
trap 'rm -f "$out"' EXIT
loops=()
if [ "$mode" = alone ]; then
  echo -10 > /proc/self/autogroup
else
  for _ in 1 2 3 4; do (while :; do :; done) & loops+=($!); done
fi
stop_loops() { [ ${#loops[@]} -gt 0 ] && { kill "${loops[@]}"; wait "${loops[@]}" 2>/dev/null; }; }
trap 'stop_loops; rm -f "$out"' EXIT
seconds() {  # wall seconds of "$@"
  local s e
  s=$(date +%s.%N)
  timeout 900 "$@" > /dev/null
  e=$(date +%s.%N)
  echo "$e - $s" | bc
}
echo "# $mode, uptime before: $(uptime)"
for r in $(seq 1 "$rounds"); do
  for b in "${builds[@]}"; do
    for n in 2 4 8 16; do
      t=$("$b/bench/nccl_table" -o all_reduce -n "$n" -b 8 -e 8 2>&1 | grep -v '^#' |
          awk 'NF > 5 { print $5; exit }')
      echo "$r $b all_reduce_8B_N$n $t" | tee -a "$out"
    done
    echo "$r $b ddp8_${train_steps}_steps_s $(seconds "$b/dtsim" train --strategy ddp --ranks 8 \
      --steps "$train_steps" --quiet)" | tee -a "$out"
    echo "$r $b demo_${demo_steps}_steps_s $(seconds "$b/dtsim" demo --quiet --steps "$demo_steps")" |
      tee -a "$out"
  done
done
echo "# $mode, uptime after: $(uptime)"
[ "$mode" = alone ] && echo 0 > /proc/self/autogroup
python3 - "$out" <<'PY'
import collections, statistics, sys
d = collections.defaultdict(list)
order = []
for line in open(sys.argv[1]):
    _, build, what, value = line.split()
    if what not in order:
        order.append(what)
    d[(what, build)].append(float(value))
for what in order:
    print(what, " ".join(f"{b}: median {statistics.median(d[(what, b)]):.4g}"
                         for (w, b) in d if w == what))
PY
