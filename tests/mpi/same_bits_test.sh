#!/bin/bash
# Issue 10's "same bits": one strategy under --algo deterministic gives bitwise the same
# losses and final parameters in the thread world (4 rank threads), under mpiexec -np 4
# (4 processes) and under -np 2 with 2 rank threads each; the MPI runs also pass --check.
#   tests/mpi/same_bits_test.sh STRATEGY MPIEXEC DTSIM [mpiexec flags...]
set -u
strategy=$1 mpiexec=$2 dtsim=$3
shift 3
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
model=mlp
[ "$strategy" = ep ] && model=moe
args=(train --strategy "$strategy" --model "$model" --algo deterministic --steps 6)
run() {  # name, the run's own flags (one word), then the launcher's words
  local name=$1 flags=$2
  shift 2
  # shellcheck disable=SC2086  # flags holds several words on purpose
  if ! "$@" "${args[@]}" $flags --report "$dir/$name.json" >"$dir/$name.out" 2>&1; then
    echo "FAIL: $name exited non-zero:"; cat "$dir/$name.out"; exit 1
  fi
}
run threads "--ranks 4" "$dtsim"
run np4x1 "--check" "$mpiexec" "$@" -np 4 "$dtsim"
run np2x2 "--threads-per-process 2 --check" "$mpiexec" "$@" -np 2 "$dtsim"
python3 - "$dir" <<'PY'
import json, sys
d = sys.argv[1]
runs = {n: json.load(open(f"{d}/{n}.json")) for n in ("threads", "np4x1", "np2x2")}
ref = runs["threads"]
ok = True
for name, r in runs.items():
    print(f"{name:8} ranks {r['config']['ranks']}  params {r['params_fnv1a']}  "
          f"final loss {r['final_loss']!r}  check {(r['check'] or {}).get('passed')}")
    if r["config"]["ranks"] != 4:
        print(f"FAIL: {name} ran {r['config']['ranks']} ranks, not 4"); ok = False
    if r["losses"] != ref["losses"] or r["params_fnv1a"] != ref["params_fnv1a"]:
        print(f"FAIL: {name} differs from the thread world"); ok = False
    if name != "threads" and not r["check"]["passed"]:
        print(f"FAIL: {name} failed --check"); ok = False
print("PASS" if ok else "FAIL")
sys.exit(0 if ok else 1)
PY
