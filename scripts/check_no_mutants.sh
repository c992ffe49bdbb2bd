#!/usr/bin/env bash
# Issue 37: the planted bugs (runtime/mutants/) are built only into test and stress
# binaries. Fails if the release binary or runtime library holds a mutant symbol (nm, any
# case) or the release `dtsim stress` offers --mutant; and, so that the check itself can
# fail, if the test binary holds none.
#   scripts/check_no_mutants.sh build/dtsim build/runtime/libdtsim_runtime.a build/dtsim_with_mutants
set -u
[ $# -eq 3 ] || { echo "usage: $0 DTSIM RUNTIME_LIB DTSIM_WITH_MUTANTS" >&2; exit 2; }
status=0
for f in "$1" "$2"; do
  hits=$(nm -C "$f" 2>/dev/null | grep -ci mutant)
  if [ "$hits" -ne 0 ]; then
    echo "$f: $hits mutant symbols, e.g.:"; nm -C "$f" | grep -i mutant | head -5; status=1
  else
    echo "$f: no mutant symbol"
  fi
done
if "$1" stress --help 2>&1 | grep -q -- '--mutant'; then
  echo "$1: stress offers --mutant"; status=1
fi
test_hits=$(nm -C "$3" | grep -ci mutant)
if [ "$test_hits" -eq 0 ]; then
  echo "$3: no mutant symbol: the check cannot tell"; status=1
else
  echo "$3: $test_hits mutant symbols (the test binary)"
fi
exit $status
