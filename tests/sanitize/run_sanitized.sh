#!/usr/bin/env bash
# run_sanitized.sh BUILD_DIR — the sanitizer job: builds rnn_dist with
# -fsanitize=address,undefined (-DRNND_SANITIZE=ON, CPU only) in BUILD_DIR and
# runs its unit and MPI tests there (labels math, dist, amp, config, data,
# errors, mpi; not the long training runs, GPU, fuzz or fault tests). Any
# AddressSanitizer, LeakSanitizer (suppressions: lsan.supp, third-party
# only) or UndefinedBehaviorSanitizer report fails the test it happens in.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=$1
mkdir -p "$build"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DRNND_SANITIZE=ON -DRNND_CUDA=OFF \
      -DBUILD_TESTING=ON > "$build/configure.log" 2>&1 || { tail -20 "$build/configure.log"; exit 1; }
cmake --build "$build" -j "$(nproc)" > "$build/build.log" 2>&1 || { tail -30 "$build/build.log"; exit 1; }
# Full stacks for every allocation and Open MPI's components kept loaded:
# otherwise a leak inside a dlclose()d MPI plugin has no module name for
# the suppressions to match.
# intercept_tls_get_addr=0: gcc 12's libasan tracks the dynamic TLS of
# dlopen()ed libraries through glibc's DTV, and on some kernels/images it
# reads a bogus block there (seen: "DTLS 12 at 0xbe1-0x400001ce3") and the
# leak checker's tracer dies with "Tracer caught signal 11 ... LeakSanitizer
# does not work under ptrace" after the program has finished correctly.
# Without the interception, dynamic TLS is simply not scanned as a root:
# that can only add leak reports, never hide one.
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:strict_string_checks=1:fast_unwind_on_malloc=0:intercept_tls_get_addr=0
export LSAN_OPTIONS=suppressions=$here/lsan.supp:print_suppressions=0
export OMPI_MCA_mca_base_component_disable_dlclose=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
cd "$build"
ctest --output-on-failure -j "$(nproc)" -L "math|dist|amp|config|data|errors|mpi|torch" \
      -LE "train|gpu|fuzz|faults|launch|sanitize"
