#!/usr/bin/env bash
# Seconds from a fresh clone to the demo's first line (issue 36), two commits back to back:
#
#   bench/first_line.sh BASE_COMMIT NEW_COMMIT [REPO]      (REPO defaults to this clone)
#
# For each commit: clones REPO into a new temporary folder, checks the commit out and runs
# `scripts/quickstart.sh demo` with ccache off until the demo prints its `dtsim demo:` line.
# Prints the wall seconds, the script's CPU seconds (user + sys) and the load before and
# after. Packages must already be installed (apt-get would dominate otherwise).
set -euo pipefail
[[ $# -ge 2 && $# -le 3 ]] || {
  echo "usage: bench/first_line.sh BASE_COMMIT NEW_COMMIT [REPO]" >&2
  exit 2
}
repo=${3:-$(git -C "$(dirname "$0")/.." rev-parse --show-toplevel)}
echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; $(date -u '+%F %H:%M UTC')"
for commit in "$1" "$2"; do
  dir=$(mktemp -d /tmp/dtsim-first-line.XXXXXX)
  git clone -q "$repo" "$dir" && git -C "$dir" checkout -q "$commit"
  echo "== $commit: load before $(cut -d' ' -f1-3 /proc/loadavg)"
  start=$(date +%s.%N)
  (cd "$dir" && /usr/bin/time -f "cpu: user %U s, sys %S s" bash -c \
    "CCACHE_DISABLE=1 scripts/quickstart.sh demo 2>/dev/null | sed -n '/^dtsim demo:/{p;q}'")
  end=$(date +%s.%N)
  echo "$commit: $(echo "$end - $start" | bc) s to the first line; load after" \
    "$(cut -d' ' -f1-3 /proc/loadavg)"
  rm -rf "$dir"
done
