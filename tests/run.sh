#!/usr/bin/env bash
# tests/run.sh — installs what is missing, builds rnn_dist (warnings are
# errors) and runs the whole test suite with ctest. Extra arguments go to
# ctest (e.g. -L torch, -R config, --rerun-failed).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
./launch/install_deps.sh --with-test-tools
build=${RNND_BUILD_DIR:-build}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=ON
cmake --build "$build" -j "$(nproc)"
# Open MPI refuses to run as root unless told; CI runs as root.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
cd "$build"
ctest --output-on-failure -j "$(nproc)" "$@"
