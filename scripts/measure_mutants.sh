#!/usr/bin/env bash
# Measures how fast each planted mutant (runtime/mutants/) is found by each mode of
# `dtsim_with_mutants stress` (the test binary with the planted bugs): jitter, random walk, PCT d = 1, 2, 3. For each mutant x mode it runs
# seeds 1..SEEDS with a budget of BUDGET schedules (jitter: iterations) at RANKS ranks and
# prints a Markdown row: found/seeds, median schedules to the first failure (1 = the
# first schedule) and median seconds; and whether replaying the failure twice printed the
# same FAIL line both times (jitter: its `reproduce:` command; the schedulers: --replay).
# usage: scripts/measure_mutants.sh [build/dtsim_with_mutants] (env: SEEDS=3 BUDGET=200 RANKS=4 MUTANTS="...")
set -u
DTSIM=$(realpath "${1:-build/dtsim_with_mutants}")
SEEDS=${SEEDS:-3}
BUDGET=${BUDGET:-200}
RANKS=${RANKS:-4}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
MUTANTS=${MUTANTS:-"lend-overwrite missing-settle ring-wrong-chunk split-off-by-one recv-wrong-step lend-claim-race shared-early-release shared-release-before-sum"}
MODES="jitter random pct1 pct2 pct3"

median() { sort -g | awk '{a[NR]=$1} END {if (NR == 0) print "-"; else print a[int((NR + 1) / 2)]}'; }

echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
echo "| mutant | $(echo $MODES | sed 's/ / | /g') |"
echo "|---|$(for m in $MODES; do printf -- '---|'; done)"
for mutant in $MUTANTS; do
  row="| $mutant |"
  for mode in $MODES; do
    found=0; : > "$WORK/n"; : > "$WORK/s"; same=yes
    for seed in $(seq 1 "$SEEDS"); do
      case $mode in
        jitter) args="--iterations $BUDGET" ;;
        random) args="--scheduler random --schedules $BUDGET" ;;
        pct*) args="--scheduler pct --depth ${mode#pct} --schedules $BUDGET" ;;
      esac
      (cd "$WORK" && "$DTSIM" stress --ranks "$RANKS" --seed "$seed" --mutant "$mutant" \
          $args > out.txt 2>&1)
      out="$WORK/out.txt"
      grep -q '^FAIL' "$out" || continue
      found=$((found + 1))
      if [ "$mode" = jitter ]; then
        grep '^iterations:' "$out" | awk '{print $2}' >> "$WORK/n"
        cmd=$(sed -n 's/^reproduce: dtsim //p' "$out")
      else
        sed -n 's/^found at schedule [0-9]* (\([0-9]*\) schedules run).*/\1/p' "$out" >> "$WORK/n"
        cmd=$(sed -n 's/^replay: dtsim //p' "$out")
      fi
      grep '^time:' "$out" | awk '{print $2}' >> "$WORK/s"
      a=$(cd "$WORK" && "$DTSIM" $cmd 2>&1 | grep -m1 '^FAIL')
      b=$(cd "$WORK" && "$DTSIM" $cmd 2>&1 | grep -m1 '^FAIL')
      { [ -n "$a" ] && [ "$a" = "$b" ]; } || same=no
    done
    if [ $found -eq 0 ]; then
      row="$row 0/$SEEDS |"
    else
      row="$row $found/$SEEDS: $(median < "$WORK/n") sched, $(median < "$WORK/s") s, replay $same |"
    fi
  done
  echo "$row"
done
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
