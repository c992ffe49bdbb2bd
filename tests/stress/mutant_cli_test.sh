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
exit $status
