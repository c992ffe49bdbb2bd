#!/bin/bash
# Bad input under mpirun: every process meets it before any work and exits 2, process 0
# alone prints the one-line error (so the job prints it once), no process is stopped by
# SIGTERM for it, and no file is made or replaced.
#   tests/mpi/usage_test.sh MPIEXEC DTSIM [mpiexec flags...]
set -u
mpiexec=$1 dtsim=$(realpath "$2")
shift 2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cd "$dir" || exit 1
echo "not dtsim's" >notes.txt
fails=0
# case: processes, expected error text, dtsim arguments
check() {
  local np=$1 want=$2
  shift 2
  local out rc lines
  out=$(timeout 120 "$mpiexec" "$@" 2>&1)
  rc=$?
  lines=$(grep -c '^dtsim' <<<"$out")
  if [ "$rc" -ne 2 ] || [ "$lines" -ne 1 ] || ! grep -qF -- "$want" <<<"$out" ||
    grep -q 'stopped by' <<<"$out" || [ "$(ls)" != notes.txt ] ||
    [ "$(cat notes.txt)" != "not dtsim's" ]; then
    echo "FAIL: -np $np ${*: -4}: exit $rc (want 2), $lines dtsim lines (want 1), files $(ls | tr '\n' ' ')"
    echo "$out"
    fails=$((fails + 1))
  else
    echo "ok: -np $np: $(grep '^dtsim' <<<"$out")"
  fi
}
run() {  # run NP WANT ARGS...: dtsim ARGS under mpiexec -np NP
  local np=$1 want=$2
  shift 2
  check "$np" "$want" "${flags[@]}" -np "$np" "$dtsim" "$@"
}
flags=("$@")
run 4 "unknown flag --stratgy" train --stratgy x
run 4 "--batch 30 is not divisible" train --batch 30
run 4 "--report notes.txt exists and is not a file dtsim wrote" train --report notes.txt --steps 2
run 2 "--trace nowhere/t.json: folder nowhere does not exist" train --trace nowhere/t.json
run 4 "--algo mpi has no bfloat16" train --algo mpi --precision bf16
run 4 "--algo mpi runs MPI's collectives on the world communicator only" \
  train --strategy dp-tp --algo mpi
run 4 "--algo mpi runs MPI's collectives on the world communicator only, and this mesh (dp 4 x tp 1 x pp 1, ep 2)" \
  train --model moe --dp 4 --ep 2 --algo mpi
run 2 "--strategy accum trains in one process; run it without mpirun" train --strategy accum
run 3 "its runs take 4 ranks (the 3D row 8), which 3 MPI processes do not divide" demo
run 2 "--report notes.txt exists" stress --report notes.txt
[ "$fails" -eq 0 ] || exit 1
