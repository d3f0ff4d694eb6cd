#!/usr/bin/env bash
# valgrind_build.sh BUILD_DIR TEXT_DIR WORK — the valgrind job: builds
# rnn_dist and rnn_prep in BUILD_DIR for the compiler's default ISA and runs
# valgrind_run.sh on them. Its own build because valgrind (3.19, Debian
# 12's) decodes no AVX-512 and stops at the first such instruction
# ("Illegal instruction"), while the main build uses AVX-512 where the CPU
# has it (CMakeLists.txt, RNND_MARCH); the ISA level changes no result, so
# the memory checked is the same code. Skips (77) without valgrind.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=$1 text=$2 work=$3
command -v valgrind >/dev/null || { echo "SKIPPED: valgrind not installed (apt-get install valgrind)"; exit 77; }
mkdir -p "$build"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DRNND_MARCH= -DRNND_CUDA=OFF \
      -DBUILD_TESTING=OFF > "$build/configure.log" 2>&1 || { tail -20 "$build/configure.log"; exit 1; }
cmake --build "$build" -j "$(nproc)" --target rnn_dist rnn_prep > "$build/build.log" 2>&1 ||
  { tail -30 "$build/build.log"; exit 1; }
exec "$here/valgrind_run.sh" "$build/rnn_dist" "$build/rnn_prep" "$text" "$work"
