#!/usr/bin/env bash
# Checkpoint save and load throughput (issue 34) beside dd of the same bytes to the same disk:
#
#   bench/checkpoint_io.sh DTSIM [rounds] [dir]      (defaults 5 rounds, $TMPDIR or /tmp)
#
# The model: MLP D 512 H 4096, 4 blocks (16.8 M parameters), Adam, on --dp 4 --zero 3 rank
# threads: a checkpoint of params, adam_m and adam_v, 3 x 67 MB in 4 shards. The save and
# load times are those dtsim train prints ("saved step 1 into DIR: 201.6 MB in 1.754 s"):
# from the save's start to its last barrier (every rank's shard written and fsync'd, the
# commit), and from the resume's start to its barrier (every rank's chunks read, checksums
# verified); the medians over the rounds. dd writes the same bytes with conv=fsync (as a
# save fsyncs) and reads them back; both reads come from the page cache when the file is
# still in it, as the resume's do. The resume also verifies every checksum before it starts
# (tools.h, validate_resume), outside the load time printed.
set -euo pipefail
. "$(dirname "$0")/stats.sh"
usage() {
  echo "usage: bench/checkpoint_io.sh DTSIM [rounds >= 1] [dir]" >&2
  exit 2
}
[[ $# -ge 1 && $# -le 3 ]] || usage
dtsim=$1 rounds=${2:-5} base=${3:-${TMPDIR:-/tmp}}
[[ -x $dtsim ]] || { echo "bench/checkpoint_io.sh: '$dtsim' is not a dtsim binary" >&2; exit 2; }
[[ $rounds =~ ^[1-9][0-9]*$ ]] || usage
work=$(mktemp -d "$base/dtsim_ckpt_bench.XXXXXX")
trap 'rm -rf "$work"' EXIT
model=(--dim 512 --hidden 4096 --layers 4 --optimizer adam --dp 4 --zero 3 --quiet)
echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; $(date -u '+%F %H:%M UTC')"
echo "disk: $(df -h "$work" | awk 'NR == 2 {print $1 " (" $2 ", " $5 " used)"}')"
echo "uptime before: $(uptime)"
secs() { local t0 t1; t0=$(date +%s.%N); "$@" > /dev/null; t1=$(date +%s.%N); echo "$t1 - $t0" | bc; }
io_secs() { sed -n "s/^  $1 step .* in \([0-9.]*\) s$/\1/p"; }
save=() load=() ddw=() ddr=()
for ((r = 0; r < rounds; ++r)); do
  rm -rf "$work/ck" "$work/dd.bin"
  save+=("$("$dtsim" train "${model[@]}" --steps 1 --save "$work/ck" | io_secs saved)")
  load+=("$("$dtsim" train "${model[@]}" --steps 2 --resume "$work/ck" | io_secs loaded)")
  bytes=$(du -sb "$work/ck" | cut -f1)
  ddw+=("$(secs dd if=/dev/zero of="$work/dd.bin" bs=1M count=$((bytes >> 20)) conv=fsync status=none)")
  ddr+=("$(secs dd if="$work/dd.bin" of=/dev/null bs=1M status=none)")
done
mb=$(echo "$bytes / 1000000" | bc -l)
med() { echo "$@" | median; }
s=$(med "${save[@]}") l=$(med "${load[@]}") w=$(med "${ddw[@]}") d=$(med "${ddr[@]}")
rate() { echo "$mb / $1" | bc -l; }
printf "checkpoint folder: %.1f MB; medians of %d rounds\n" "$mb" "$rounds"
printf "save  %.3f s  %7.1f MB/s   dd write+fsync %.3f s  %7.1f MB/s   save/dd %.2f\n" \
  "$s" "$(rate "$s")" "$w" "$(rate "$w")" "$(echo "$w / $s" | bc -l)"
printf "load  %.3f s  %7.1f MB/s   dd read        %.3f s  %7.1f MB/s   load/dd %.2f\n" \
  "$l" "$(rate "$l")" "$d" "$(rate "$d")" "$(echo "$d / $l" | bc -l)"
echo "uptime after: $(uptime)"
