#!/usr/bin/env bash
# Issue 7's targets, measured in ROUNDS rounds (default 7). Every round measures both
# sides of each ratio back to back (dtsim and its yardstick: the raw cache-line handoff,
# memcpy, OpenMPI), so a slow spell of this shared host spoils one round's ratios, not the
# verdict. Prints every round and the median of each ratio.
#   bench/targets.sh                 BUILD=build-bench ROUNDS=7
#   bench/targets.sh --median FILE  the median row of rows "label r1 r2 ..." in FILE
set -euo pipefail

median_row() { # rows "label ratio ratio ..." on stdin -> "median m m ..."
  awk '
    { for (c = 2; c <= NF; ++c) v[c, NR] = $c; cols = NF; n = NR }
    END {
      printf "%-8s", "median"
      for (c = 2; c <= cols; ++c) {
        for (i = 1; i <= n; ++i) a[i] = v[c, i]
        for (i = 1; i <= n; ++i) for (j = i + 1; j <= n; ++j) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
        printf " %8.2f", (n % 2) ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
      }
      printf "\n"
    }'
}
if [[ ${1:-} == --median ]]; then
  median_row <"$2"
  exit 0
fi

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$ROOT/build-bench}
ROUNDS=${ROUNDS:-7}
B=$BUILD/bench
cd "$ROOT"

if [[ ! -x $B/mpi_allreduce ]]; then  # mpi_compare.sh installs OpenMPI and builds it
  NS=2 MIN=8 MAX=8 TRIALS=1 BUILD="$BUILD" bash bench/mpi_compare.sh >/dev/null
fi

# Median time (us) of the single data row of an nccl-tests style table on stdin.
row_time() { awk '!/^#/ && NF >= 5 { print $5; exit }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a > 0 && b > 0) printf "%.2f", a / b; else print "nan" }'; }
mpi_time() { # N bytes
  mpirun --allow-run-as-root --oversubscribe -np "$1" "$B/mpi_allreduce" -b "$2" -e "$2" -t 5 | row_time
}
dtsim_time() { "$B/nccl_table" -o all_reduce -n "$1" -b "$2" -e "$2" -t 5 | row_time; }

echo "# $(date -u +%FT%TZ) $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p'), commit $(git rev-parse --short HEAD), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# mailbox = 8-byte one-way latency / raw handoff, both pinned (target <= 2)"
echo "# 16MiB   = all_reduce busbw N=2 / memcpy bandwidth at 16 MiB (target >= 0.5)"
echo "# 1MiB    = OpenMPI time / dtsim time, all_reduce 1 MiB N=2 (target >= 5)"
echo "# 8B Nn   = dtsim time / OpenMPI time, 8-byte all_reduce (target < 1)"
printf "%-8s %8s %8s %8s %8s %8s %8s\n" round mailbox 16MiB 1MiB "8B N2" "8B N4" "8B N8"
rows=()
for ((r = 1; r <= ROUNDS; ++r)); do
  mb=$("$B/bench_mailbox" '--benchmark_filter=^(handoff/pin:1|pingpong/bytes:8/pin:1)/' \
    --benchmark_repetitions=5 --benchmark_report_aggregates_only=true \
    --benchmark_min_time=0.05 2>/dev/null)
  ho=$(awk '/^handoff\/pin:1\/manual_time_median/ { print $2 }' <<<"$mb")
  pp=$(awk '/^pingpong\/bytes:8\/pin:1\/manual_time_median/ { print $2 }' <<<"$mb")
  big=$("$B/nccl_table" -o all_reduce -n 2 -b 16M -e 16M -t 5 --memcpy |
    awk '!/^#/ && NF >= 9 { print $7, $9; exit }')
  mid=$(ratio "$(mpi_time 2 1M)" "$(dtsim_time 2 1M)")
  small=()
  for n in 2 4 8; do small+=("$(ratio "$(dtsim_time "$n" 8)" "$(mpi_time "$n" 8)")"); done
  row="$(ratio "$pp" "$ho") $(ratio ${big:-0 0}) $mid ${small[*]}"
  rows+=("$r $row")
  printf "%-8s %8s %8s %8s %8s %8s %8s\n" "$r" $row
done
printf "%s\n" "${rows[@]}" | median_row
