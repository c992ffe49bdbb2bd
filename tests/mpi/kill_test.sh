#!/bin/bash
# A process of an MPI job killed (SIGKILL) or frozen (SIGSTOP) mid-run: the job must end
# (no hang) within the 5 s deadline plus a few seconds, non-zero, with a line naming the
# lost rank, and no process left. With KILL, OpenMPI's mpirun names the rank and ends the
# job itself; with STOP it notices nothing, and dtsim's deadlines must end the job.
# KILL-train kills a process of a training run that writes --report and --trace: no output
# file and no temporary may be left.
#   tests/mpi/kill_test.sh KILL|STOP|KILL-train MPIEXEC DTSIM [mpiexec flags...]
set -u
. "$(dirname "$0")/job_end.sh"
sig=${1%-train} mpiexec=$2 dtsim=$(realpath "$3")
mode=stress
[ "$1" = "$sig" ] || mode=train
shift 3
out=$(mktemp)
dir=$(mktemp -d)
trap 'rm -rf "$out" "$dir"' EXIT
cd "$dir" || exit 1
job=(stress --iterations 1000000 --timeout-ms 5000)
[ "$mode" = stress ] || job=(train --steps 100000 --report out.json --trace trace.json)
# Line-buffered, so that the lead's first line shows when it is printed.
"$mpiexec" "$@" -np 4 stdbuf -oL "$dtsim" "${job[@]}" >"$out" 2>&1 &
launcher=$!
# Wait until all four processes run and have passed the job's start (MPI_Init and the
# agreement, up to 30 s under load; the lead prints its first line after it), so that the
# signal lands in the work; then a second more, and signal the third.
for _ in $(seq 600); do
  mapfile -t pids < <(pgrep -P "$launcher" -f "${job[*]:0:2}")
  [ "${#pids[@]}" -eq 4 ] && grep -q "^dtsim $mode:" "$out" && break
  sleep 0.1
done
[ "${#pids[@]}" -eq 4 ] || { echo "FAIL: 4 processes did not start"; cat "$out"; exit 1; }
grep -q "^dtsim $mode:" "$out" || { echo "FAIL: the job did not start within 60 s"; cat "$out"; exit 1; }
sleep 1
victim=${pids[2]}
rank=$(tr '\0' '\n' </proc/"$victim"/environ | sed -n 's/^OMPI_COMM_WORLD_RANK=//p')
kill -"$sig" "$victim"
killed=$(date +%s)
# The deadline is 5 s: give the job 5 + 10 s to end.
wait_job_end "$launcher" 15 "a process was killed"
ended=$(date +%s)
cat "$out"
echo "exit code $rc, ended $((ended - killed)) s after the kill"
[ "$rc" -ne 0 ] || { echo "FAIL: exit code 0 after a process was killed"; exit 1; }
if [ "$sig" = KILL ]; then
  grep -q "process rank $rank .*exited on signal 9" "$out" || { echo "FAIL: no line names the lost rank"; exit 1; }
else
  # A rank waiting in a ring names its own predecessor, which may itself wait on the stopped
  # rank; the end-of-run check that follows names the stopped one, on the same line. When
  # the stop lands between an iteration's last collective and the stopped process's
  # end-of-run message, the others are in no collective and that check's line alone names
  # it ("rank R: lost process R (rank R): no end-of-run message ... within 8.0 s"); when it
  # lands before a run begins, the others' start-of-run wait names it ("... did not begin
  # the run ...").
  grep -qE "lost process $rank \(rank $rank\): (no end-of-run message|did not begin the run)" "$out" ||
    { echo "FAIL: no line names the lost rank"; exit 1; }
fi
for p in "${pids[@]}"; do
  for _ in $(seq 20); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$p" 2>/dev/null && { echo "FAIL: process $p still runs"; ps -o pid,stat,etime,args -p "$p"; exit 1; }
done
[ -z "$(ls -A)" ] || { echo "FAIL: files left behind: $(ls -A)"; exit 1; }
echo "PASS"
