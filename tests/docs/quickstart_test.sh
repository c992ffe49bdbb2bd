#!/usr/bin/env bash
# scripts/quickstart.sh demo must build the dtsim target alone (a third of the tree), and
# `test` everything: runs a copy of the script beside stand-ins for cmake, dpkg-query,
# ctest and build/dtsim that record how they were called, and checks the calls.
set -euo pipefail
script=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/repo/scripts" "$tmp/repo/build" "$tmp/bin"
cp "$script" "$tmp/repo/scripts/quickstart.sh"
log=$tmp/calls
for tool in cmake ctest; do
  printf '#!/bin/sh\necho "%s $*" >> %s\n' "$tool" "$log" > "$tmp/bin/$tool"
done
printf '#!/bin/sh\necho "install ok installed"\n' > "$tmp/bin/dpkg-query"
printf '#!/bin/sh\necho "dtsim $*" >> %s\n' "$log" > "$tmp/repo/build/dtsim"
chmod +x "$tmp"/bin/* "$tmp/repo/build/dtsim"

run() {
  : > "$log"
  PATH="$tmp/bin:$PATH" bash "$tmp/repo/scripts/quickstart.sh" "$1" > /dev/null
}
fail() { echo "FAIL: $*"; echo "calls:"; cat "$log"; exit 1; }

run demo
builds=$(grep -c '^cmake --build' "$log" || true)
[[ $builds == 1 ]] || fail "demo ran $builds builds, want one"
grep -q '^cmake --build build .*--target dtsim' "$log" || fail "demo's build is not --target dtsim"
grep -qx 'dtsim demo' "$log" || fail "demo did not run build/dtsim demo"

run test
grep '^cmake --build' "$log" | grep -q -- '--target' && fail "test's build is restricted to a target"
grep -q '^ctest ' "$log" || fail "test did not run ctest"
echo "quickstart: demo builds --target dtsim alone, test builds everything and runs ctest"
