#!/usr/bin/env bash
# The issue's "Done means", as a new user would try it: for every mutant,
#   dtsim stress --scheduler pct --depth 2 --ranks 4 --schedules 200 --seed 1 --mutant M
# must fail and print a replay command, and that command, run twice, must print the same
# FAIL line both times and say it failed as recorded.
# usage: mutant_cli_test.sh path/to/dtsim
set -u
DTSIM=$(realpath "$1")
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
cd "$WORK" || exit 1
status=0
for mutant in $("$DTSIM" stress --help 2>&1 | sed -n 's/.*--mutant {none|\([^}]*\)}.*/\1/p' | tr '|' ' '); do
  "$DTSIM" stress --scheduler pct --depth 2 --ranks 4 --schedules 200 --seed 1 \
      --mutant "$mutant" > found.txt 2>&1
  fail=$(grep -m1 '^FAIL' found.txt)
  cmd=$(sed -n 's/^replay: dtsim //p' found.txt)
  if [ -z "$fail" ] || [ -z "$cmd" ]; then
    echo "$mutant: not found, or no replay command"; cat found.txt; status=1; continue
  fi
  a=$("$DTSIM" $cmd 2>&1)
  b=$("$DTSIM" $cmd 2>&1)
  if [ "$(grep -m1 '^FAIL' <<< "$a")" != "$fail" ] || [ "$a" != "$b" ] ||
     ! grep -q '^replay: failed as recorded' <<< "$a"; then
    echo "$mutant: the replay did not reproduce: $fail"; echo "$a"; echo "$b"; status=1
    continue
  fi
  echo "$mutant: $(grep '^found at' found.txt); replayed twice: $fail"
done
# Issue 36: the unsafe switch is a planted bug too; its replay file must carry it, so that the
# replay fails as recorded (it used to record only "mutant none" and report NONDETERMINISTIC).
"$DTSIM" stress --scheduler pct --depth 2 --ranks 4 --schedules 200 --seed 3 \
    --unsafe-live-sends > unsafe.txt 2>&1
cmd=$(sed -n 's/^replay: dtsim //p' unsafe.txt)
a=$([ -n "$cmd" ] && "$DTSIM" $cmd 2>&1)
if [ -z "$cmd" ] || ! grep -q '^replay: failed as recorded' <<< "$a"; then
  echo "unsafe-live-sends: the replay did not reproduce"; cat unsafe.txt; echo "$a"; status=1
else
  echo "unsafe-live-sends: replayed: $(grep -m1 '^FAIL' <<< "$a")"
fi
# Issue 36: --keep-going runs every schedule after a failure (it used to stop at the first).
# (Schedule 0 of this command fails: see ring-wrong-chunk above.)
"$DTSIM" stress --scheduler pct --depth 2 --ranks 4 --schedules 6 --seed 1 --keep-going \
    --mutant ring-wrong-chunk > keep.txt 2>&1
if ! grep -q '^schedules: 6$' keep.txt || ! grep -q '^found at schedule 0 (6 schedules run)' keep.txt ||
   ! grep -q '^replay: dtsim stress --replay' keep.txt; then
  echo "--keep-going: did not run all 6 schedules, or no replay"; cat keep.txt; status=1
else
  echo "--keep-going: $(grep '^schedules:' keep.txt), $(grep '^failures:' keep.txt)"
fi
exit $status
