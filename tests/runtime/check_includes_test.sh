#!/usr/bin/env bash
# The include-graph check can fail: on a copy of runtime/ with one forbidden include planted
# per rule it must exit 1 naming that rule, and on the tree as it is exit 0.
#   tests/runtime/check_includes_test.sh REPO
set -u
repo=$1
check=$repo/scripts/check_runtime_includes.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
# file to plant in | include it gets | rule the check must name
cases=(
  "transport/thread/thread_transport.cc|runtime/schedule/scheduler.h|rule 4"
  "transport/mpi/mpi_transport.cc|runtime/stress/stress.h|rule 2"
  "algorithms/all_reduce_ring.cc|runtime/transport/thread/thread_transport.h|rule 3"
  "diagnostics/watchdog.cc|runtime/schedule/scheduler.h|rule 5"
  "transport/mpi/mpi_link.cc|runtime/transport/thread/thread_shared.h|rule 8"
  "world.cc|runtime/transport/mpi/mpi_link.h|rule 9"
  "communicator.cc|train/config.h|rule 1"
)
for c in "${cases[@]}"; do
  IFS='|' read -r file inc rule <<<"$c"
  rm -rf "$tmp/runtime" && cp -r "$repo/runtime" "$tmp/runtime"
  echo "#include \"$inc\"" >>"$tmp/runtime/$file"
  out=$("$check" "$tmp")
  rc=$?
  if [ "$rc" -ne 1 ] || ! grep -q "runtime/$file -> ${inc#runtime/}: $rule" <<<"$out"; then
    echo "FAIL: $file including $inc: exit $rc, want 1 naming $rule; got: $out"
    fail=1
  fi
done
if ! out=$("$check" "$repo"); then
  echo "FAIL: the tree itself: $out"
  fail=1
fi
[ "$fail" -eq 0 ] && echo "the include check catches every planted edge"
exit "$fail"
