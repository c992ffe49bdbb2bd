#!/usr/bin/env bash
# Checkpoint save and load throughput (issue 34) beside dd of the same bytes to the same disk:
#
#   bench/checkpoint_io.sh DTSIM [rounds] [dir]      (defaults 5 rounds, $TMPDIR or /tmp)
#
# The model: MLP D 512 H 4096, 4 blocks (16.8 M parameters), Adam, on --dp 4 --zero 3 rank
# threads: a checkpoint of params, adam_m and adam_v, 3 x 67 MB in 4 shards. Each round runs,
# one after the other, every dtsim measurement and the dd it is set beside:
#   save   what dtsim train --save prints ("saved step 1 into DIR: 201.6 MB in 0.4 s"): from
#          the save's start to its last barrier (every rank's shard written and fsync'd, the
#          commit) | dd of as many bytes from /dev/zero with conv=fsync (a fresh file, as the
#          save's are);
#   load   what dtsim train --resume prints: from the resume's start to its barrier (every
#          rank's chunks read with pread, checksums verified), the files in the page cache
#          | dd reading the dd file back, in the page cache too;
#   verify dtsim checkpoint inspect: the pass that reads every chunk and checks its checksum
#          (a resume makes it before any work, outside the load time above) | dd read.
#          As root with a writable /proc/sys/vm/drop_caches both run cold (sync, echo 3 >
#          drop_caches before each): a read from the disk; else from the page cache.
#   start  dtsim --version, as cold as verify: the process start inside verify's time (dtsim
#          maps MPI, OpenBLAS, TBB and a dozen more libraries; dd maps libc).
# Prints the medians over the rounds and the host's load before and after.
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
cold=0
if [[ $(id -u) == 0 ]] && (echo 1 > /proc/sys/vm/drop_caches) 2> /dev/null; then cold=1; fi
drop() { if ((cold)); then sync && echo 3 > /proc/sys/vm/drop_caches; fi; }
echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; $(date -u '+%F %H:%M UTC')"
echo "disk: $(df -h "$work" | awk 'NR == 2 {print $1 " (" $2 ", " $5 " used)"}')"
echo "uptime before: $(uptime)"
secs() { local t0 t1; t0=$(date +%s.%N); "$@" > /dev/null; t1=$(date +%s.%N); echo "$t1 - $t0" | bc; }
io_secs() { sed -n "s/^  $1 step .* in \([0-9.]*\) s$/\1/p"; }
save=() load=() verify=() ddw=() ddr=() ddv=() start=()
for ((r = 0; r < rounds; ++r)); do
  rm -rf "$work/ck" "$work/dd.bin"
  save+=("$("$dtsim" train "${model[@]}" --steps 1 --save "$work/ck" | io_secs saved)")
  bytes=$(du -sb "$work/ck" | cut -f1)
  ddw+=("$(secs dd if=/dev/zero of="$work/dd.bin" bs=1M count="$bytes" iflag=count_bytes conv=fsync status=none)")
  load+=("$("$dtsim" train "${model[@]}" --steps 2 --resume "$work/ck" | io_secs loaded)")
  ddr+=("$(secs dd if="$work/dd.bin" of=/dev/null bs=1M status=none)")
  drop
  verify+=("$(secs "$dtsim" checkpoint inspect "$work/ck")")
  drop
  ddv+=("$(secs dd if="$work/dd.bin" of=/dev/null bs=1M status=none)")
  drop
  start+=("$(secs "$dtsim" --version)")
done
mb=$(echo "$bytes / 1000000" | bc -l)
med() { echo "$@" | median; }
s=$(med "${save[@]}") l=$(med "${load[@]}") v=$(med "${verify[@]}")
w=$(med "${ddw[@]}") d=$(med "${ddr[@]}") dv=$(med "${ddv[@]}") st=$(med "${start[@]}")
rate() { echo "$mb / $1" | bc -l; }
where=$( ((cold)) && echo "cold (caches dropped)" || echo "page cache")
printf "checkpoint folder: %.1f MB; medians of %d rounds\n" "$mb" "$rounds"
printf "save    %.3f s  %7.1f MB/s   dd write+fsync %.3f s  %7.1f MB/s   save/dd %.2f\n" \
  "$s" "$(rate "$s")" "$w" "$(rate "$w")" "$(echo "$w / $s" | bc -l)"
printf "load    %.3f s  %7.1f MB/s   dd read        %.3f s  %7.1f MB/s   load/dd %.2f   (page cache)\n" \
  "$l" "$(rate "$l")" "$d" "$(rate "$d")" "$(echo "$d / $l" | bc -l)"
printf "verify  %.3f s  %7.1f MB/s   dd read        %.3f s  %7.1f MB/s   verify/dd %.2f   (%s)\n" \
  "$v" "$(rate "$v")" "$dv" "$(rate "$dv")" "$(echo "$dv / $v" | bc -l)" "$where"
printf "start   %.3f s  (dtsim --version, %s: the process start inside verify)\n" "$st" "${where%% (*}"
echo "uptime after: $(uptime)"
