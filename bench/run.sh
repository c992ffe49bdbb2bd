#!/usr/bin/env bash
# Regenerates bench/RESULTS.md: builds the suites, runs every one, and writes each table
# under the exact command that produced it, with the machine, date and load.
#
#   bench/run.sh                 # ~4 minutes on 2 cores; run it on a quiet machine
#   QUICK=1 bench/run.sh         # smaller matrix, for checking the script (~2 minutes)
#   OUT=/tmp/r.md bench/run.sh   # write elsewhere
#
# Medians: Google Benchmark suites use --benchmark_repetitions=5 with aggregates only
# (the _median rows are kept); nccl_table and mpi_allreduce print the median of 5 trials.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$ROOT/build-bench}
OUT=${OUT:-$ROOT/bench/RESULTS.md}
QUICK=${QUICK:-0}
cd "$ROOT"

if [[ ! -f $BUILD/build.ninja ]]; then
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release >&2
fi
targets=(bench_mailbox bench_collectives bench_memory nccl_table)
grep -q 'build dtsim:' "$BUILD/build.ninja" && targets+=(dtsim)
grep -q bench_training "$BUILD/build.ninja" && targets+=(bench_training)
# Another engineer's folder may be mid-edit: then run the binaries of the last good build.
cmake --build "$BUILD" -j2 --target "${targets[@]}" >&2 ||
  echo "run.sh: build failed; using the existing binaries in $BUILD" >&2

B=${BUILD#"$ROOT"/}/bench  # paths as printed in RESULTS.md, relative to the repo
REPS=(--benchmark_repetitions=5 --benchmark_report_aggregates_only=true --benchmark_color=false)
if [[ $QUICK == 1 ]]; then
  NCCL_MAX=1M MATRIX_FILTER='N:2/bytes:(8|32768|1048576)/' MPI_NS="2" MPI_MAX=1M
else
  # Every algorithm at every size to 64 MiB.
  NCCL_MAX=64M MATRIX_FILTER='.' MPI_NS="2 4 8" MPI_MAX=16M
fi

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

load() { cut -d' ' -f1-3 /proc/loadavg; }

# section TITLE COMMAND...: runs COMMAND, keeps its stdout (medians only for Google
# Benchmark), and appends the command and the output to the report body.
section() {
  local title=$1
  shift
  echo "## $title" >&2
  local start=$SECONDS
  {
    echo
    echo "### $title"
    echo
    echo "Load before: $(load)."
    echo
    echo '```'
    echo "\$ $*"
  } >>"$TMP/body"
  "$@" 2>"$TMP/err" | grep -v -e '_mean ' -e '_stddev ' -e '_cv ' | tee "$TMP/last" >>"$TMP/body" ||
    { echo "(failed: $(tail -1 "$TMP/err"))" >>"$TMP/body"; }
  echo '```' >>"$TMP/body"
  echo "($((SECONDS - start)) s)" >>"$TMP/body"
  cp "$TMP/last" "$TMP/$(echo "$title" | tr -c 'a-z0-9' '_')"
}

START=$SECONDS
LOAD0=$(load)

# The targets: one round of bench/targets.sh (both sides of every ratio back to back)
# before and after each section, so that the rounds sample the whole run: this host's
# slow spells last up to half a minute, long enough to spoil rounds run in a row.
target_round() {
  env ROUNDS=1 BUILD="$BUILD" bench/targets.sh 2>>"$TMP/err" |
    awk -v t="$(date -u +%T)" '$1 == "1" { $1 = t; print }' >>"$TMP/target_rows" || true
}
: >"$TMP/target_rows"
target_round

section "Mailbox: one-way latency, streaming, raw cache-line handoff" \
  "$B/bench_mailbox" "${REPS[@]}" --benchmark_min_time=0.05
target_round

section "OpenMPI side by side (all_reduce)" env NS="$MPI_NS" MAX="$MPI_MAX" BUILD="$BUILD" \
  bench/mpi_compare.sh
target_round
cp "$TMP/last" "$TMP/mpi"

section "Memory: resident set with N idle ranks" "$B/bench_memory" --benchmark_color=false
target_round

section "Collectives, default algorithm, nccl-tests layout (median of 5 trials)" \
  "$B/nccl_table" -o all -n 2,4,8 -b 8 -e "$NCCL_MAX" -f 4 -t 5 --memcpy
target_round
cp "$TMP/last" "$TMP/nccl"


section "Collectives, every algorithm (Google Benchmark, median of 3)" \
  "$B/bench_collectives" --benchmark_repetitions=3 --benchmark_report_aggregates_only=true \
  --benchmark_color=false --benchmark_min_time=0.005 "--benchmark_filter=$MATRIX_FILTER"
target_round


if [[ -x $BUILD/bench/bench_training ]]; then
  section "Training step per strategy (SGD, fp32, global batch 64)" \
    "$B/bench_training" "${REPS[@]}"
  target_round
  cp "$TMP/last" "$TMP/training"
fi

DEMO="dtsim demo: pending (\`$BUILD/dtsim demo --help\` fails: the command does not exist yet)."
if [[ -x $BUILD/dtsim ]] && "$BUILD/dtsim" demo --help >/dev/null 2>&1; then
  echo "## dtsim demo" >&2
  demo_rc=0
  /usr/bin/time -v "$BUILD/dtsim" demo --quiet >"$TMP/demo.out" 2>"$TMP/demo" || demo_rc=$?
  DEMO="dtsim demo peak RSS (VmHWM): $(sed -n 's/.*Maximum resident set size (kbytes): //p' "$TMP/demo") KiB,"
  DEMO+=" wall $(sed -n 's/.*Elapsed (wall clock) time (h:mm:ss or m:ss): //p' "$TMP/demo"), exit code $demo_rc"
  DEMO+=" (\`/usr/bin/time -v ${BUILD#"$ROOT"/}/dtsim demo --quiet\`)."
fi

# The rounds, as a section of their own, first in the body.
{
  echo
  echo "### Targets: one round before and after each section ($(wc -l <"$TMP/target_rows") rounds)"
  echo
  echo '```'
  echo "\$ ROUNDS=1 bench/targets.sh    # once before and after each section; ratios as below"
  env ROUNDS=0 BUILD="$BUILD" bench/targets.sh 2>/dev/null | grep '^#' | grep -v ' cores, ' || true
  printf "%-8s %8s %8s %8s %8s %8s %8s\n" time mailbox 16MiB 1MiB "8B N2" "8B N4" "8B N8"
  awk '{ printf "%-8s %8s %8s %8s %8s %8s %8s\n", $1, $2, $3, $4, $5, $6, $7 }' "$TMP/target_rows"
  bench/targets.sh --median "$TMP/target_rows"
  echo '```'
} >"$TMP/targets_section"
bench/targets.sh --median "$TMP/target_rows" >"$TMP/targets_rounds"

# Targets, read back from the outputs above.
med() { awk -v n="$2" '$1 == n { print $2; exit }' "$1"; }  # median time of row $2
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a > 0 && b > 0) printf "%.2f", a / b; else print "n/a" }'; }
{
  echo
  echo "## Targets (issue 7)"
  echo
  # The median row of bench/targets.sh: mailbox 16MiB 1MiB 8B-N2 8B-N4 8B-N8.
  read -r _ MB BIG MID S2 S4 S8 <<<"$(awk '$1 == "median"' "$TMP/targets_rounds")" || true
  echo "Ratios are medians over the rounds of \`bench/targets.sh\` (each round measures both"
  echo "sides back to back; one round runs before and after each section; all of them are in"
  echo "the first section below)."
  echo
  echo "- Mailbox one-way latency (8 B, pinned) <= 2x raw cache-line handoff: ${MB:-n/a}x."
  echo "- all_reduce busbw at 1 MiB, N=2, >= 5x OpenMPI: ${MID:-n/a}x (OpenMPI time / dtsim time)."
  echo "- 8-byte all_reduce latency below OpenMPI (dtsim time / OpenMPI time < 1): N=2 ${S2:-n/a}," \
    "N=4 ${S4:-n/a}, N=8 ${S8:-n/a}."
  echo "- 16 MiB all_reduce busbw, N=2, >= half memcpy: ${BIG:-n/a} of memcpy."
  if [[ -f $TMP/training ]]; then
    S1=$(med "$TMP/training" mlp/single/N:1/iterations:1/manual_time_median)
    D4=$(med "$TMP/training" mlp/ddp/N:4/iterations:1/manual_time_median)
    echo "- MLP training step at N=4 (ddp) <= 1.5x single-rank: ${D4} ms vs ${S1} ms = $(ratio "$D4" "$S1")x."
  fi
  echo "- $DEMO"
} >"$TMP/targets"

{
  echo "# dtsim benchmark results"
  echo
  echo "Generated by \`bench/run.sh\` (one command; $((SECONDS - START)) s this time)."
  echo "Date: $(date -u +%FT%TZ). Machine: $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p')," \
    "$(free -g | awk '/^Mem:/ { print $2 }') GiB RAM, $(uname -sr). Commit: $(git rev-parse --short HEAD)."
  echo "Load average at start: $LOAD0; at end: $(load). The 2 cores are shared with other"
  echo "engineers' compiles; the load average also counts this run's own rank threads (up to 8)"
  echo "for a minute after each section, so read \"Load before\" as an upper bound on contention."
  echo "The target sections run first, while the machine is as quiet as it will be."
  echo "GB/s is 1e9 B/s; busbw uses nccl-tests' factors. Times are medians (see each command)."
  cat "$TMP/targets"
  # The hand-kept notes and issue 12's compute-speed runs (minutes each; they install
  # PyTorch) live in one file each: linked, never pasted, so there is one copy to correct.
  echo
  echo "## Reading the targets: what was missed, by how much, and why"
  echo
  echo "Kept in [\`results_notes.md\`](results_notes.md), one copy; \`bench/run.sh\` links it here instead of pasting it."
  echo
  echo "## Compute speed (issue 12)"
  echo
  echo "Kept in [\`compute_results.md\`](compute_results.md), one copy; \`bench/run.sh\` links it here instead of pasting it."
  cat "$TMP/targets_section" "$TMP/body"
} >"$OUT"
echo "wrote $OUT in $((SECONDS - START)) s" >&2
