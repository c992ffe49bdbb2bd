#!/usr/bin/env bash
# Dependencies inside runtime/ point one way (issue 37). Checks every #include "runtime/..."
# (and "train/", "model/") of runtime/ against these rules and prints each that breaks one:
#   1. the runtime knows nothing of models or training: no train/ or model/ include;
#   2. the stress tool (stress/, schedule/explore.*, schedule/schedule_file.cc) is a client:
#      nothing else in runtime/ includes it;
#   3. algorithms/ talk to an Exchange: no transport implementation (transport/<x>/),
#      no schedule/, no stress/;
#   4. transport/ carries bytes: no algorithms/, no schedule/ (the controlled scheduler
#      plugs in through controller.h), no stress/;
#   5. diagnostics/ observe: no algorithms/, no transport implementation, no schedule/,
#      no stress/;
#   6. the basics (types, fast_clock, reduce_kernels, split, process_model, payload,
#      doorbell) include only each other;
#   7. the planted bugs (mutants/, test and stress binaries only) are included by nothing
#      else in runtime/;
#   8. transport plug-ins (transport/<x>/) are self-contained: none includes another's files;
#   9. nothing outside transport/ names a plug-in: the World reaches them through
#      transport/plugin.h (the planted bugs, which subclass the thread transport, excepted).
# Exit 0 when clean, 1 otherwise.
#   scripts/check_runtime_includes.sh [REPO]
set -u
repo=${1:-$(dirname "$0")/..}
cd "$repo/runtime" || exit 2
allowed=()
is_tool() { [[ $1 == stress/* || $1 == schedule/explore.* || $1 == schedule/schedule_file.cc ]]; }
is_basic() {
  case $1 in
    types.* | fast_clock.* | reduce_kernels.* | split.h | process_model.* | payload.* | doorbell.*)
      return 0
      ;;
  esac
  return 1
}
bad=0
while IFS= read -r file; do
  f=${file#./}
  while IFS= read -r inc; do
    edge="$f -> $inc"
    why=""
    case $inc in
      train/* | model/*) why="rule 1: the runtime knows nothing of models or training" ;;
    esac
    inc=${inc#runtime/}
    edge="$f -> $inc"
    if [ -z "$why" ] && ! is_tool "$f" && is_tool "$inc"; then
      why="rule 2: the stress tool is a client of the runtime"
    fi
    if [ -z "$why" ] && [[ $f == algorithms/* ]] &&
      [[ $inc == transport/*/* || $inc == schedule/* || $inc == stress/* ]]; then
      why="rule 3: algorithms see an Exchange only"
    fi
    if [ -z "$why" ] && [[ $f == transport/* ]] &&
      [[ $inc == algorithms/* || $inc == schedule/* || $inc == stress/* ]]; then
      why="rule 4: transports know no algorithm, scheduler or tool"
    fi
    if [ -z "$why" ] && [[ $f == diagnostics/* ]] &&
      [[ $inc == algorithms/* || $inc == transport/*/* || $inc == schedule/* || $inc == stress/* ]]; then
      why="rule 5: diagnostics observe"
    fi
    if [ -z "$why" ] && is_basic "$f" && ! is_basic "$inc"; then
      why="rule 6: the basics include only each other"
    fi
    if [ -z "$why" ] && [[ $f != mutants/* && $inc == mutants/* ]]; then
      why="rule 7: the planted bugs are linked into test binaries only"
    fi
    if [ -z "$why" ] && [[ $f == transport/*/* && $inc == transport/*/* ]] &&
      [ "$(cut -d/ -f2 <<<"$f")" != "$(cut -d/ -f2 <<<"$inc")" ]; then
      why="rule 8: a transport plug-in includes no other plug-in"
    fi
    if [ -z "$why" ] && [[ $f != transport/* && $f != mutants/* && $inc == transport/*/* ]]; then
      why="rule 9: only transport/ names a plug-in; use transport/plugin.h"
    fi
    [ -z "$why" ] && continue
    for a in ${allowed[@]+"${allowed[@]}"}; do [ "$a" == "$edge" ] && why=""; done
    [ -z "$why" ] && continue
    echo "runtime/$edge: $why"
    bad=1
  done < <(sed -n 's/^#include "\(\(runtime\|train\|model\)\/[^"]*\)".*/\1/p' "$file")
done < <(find . -name '*.h' -o -name '*.cc' | sort)
[ "$bad" -eq 0 ] && echo "runtime/ includes point one way"
exit "$bad"
