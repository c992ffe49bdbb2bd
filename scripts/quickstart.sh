#!/usr/bin/env bash
# Installs what is missing (Debian 12, as root), builds Release into build/, then:
#   scripts/quickstart.sh demo   builds build/dtsim alone and runs build/dtsim demo
#   scripts/quickstart.sh test   runs the whole test suite through ctest
set -euo pipefail
cd "$(dirname "$0")/.."

what=${1:-demo}
case "$what" in demo | test) ;; *)
  echo "usage: scripts/quickstart.sh demo|test (got '$what')" >&2
  exit 2
  ;;
esac

packages=(build-essential cmake ninja-build libtbb-dev libboost-dev libeigen3-dev
  libgtest-dev libgmock-dev libbenchmark-dev nlohmann-json3-dev libcli11-dev libfmt-dev
  libopenblas-dev python3 openmpi-bin libopenmpi-dev)
# The html tests render dtsim's --html pages in headless Chromium.
if [[ $what == test ]]; then packages+=(chromium); fi
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "installing: ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${missing[@]}" >/dev/null
fi

launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "${launcher[@]}" >/dev/null
# The demo needs the dtsim binary alone (79 compiles: the CLI and dtsim_train build in
# unity batches); the test command builds everything: the tests, the benchmarks and the
# MPI helpers.
if [[ $what == demo ]]; then
  cmake --build build -j "$(nproc)" --target dtsim
  exec build/dtsim demo
fi
cmake --build build -j "$(nproc)"
ctest --test-dir build --output-on-failure -j "$(nproc)"
