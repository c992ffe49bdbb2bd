# Sourced by the job tests of tests/mpi.
# wait_job_end PID SECONDS WHAT: waits up to SECONDS for the mpiexec job PID to end and sets
# rc to its exit code; if it still runs then, kills it and its processes, prints
# "FAIL: the job still runs SECONDS s after WHAT" and exits 1.
wait_job_end() {
  local pid=$1 seconds=$2 what=$3
  for _ in $(seq $((seconds * 10))); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$pid" 2>/dev/null; then
    echo "FAIL: the job still runs $seconds s after $what"
    pkill -9 -P "$pid"; kill -9 "$pid"
    exit 1
  fi
  wait "$pid"
  rc=$?
}
