#!/usr/bin/env bash
# device_check.sh — the one prepared run for a lent GPU machine (one H100 or
# H200, about 15 minutes in all; ../shared/gpu/README.md). Within 8 minutes
# it:
#   1. prints the machine (nvidia-smi, nvcc, where cuDNN and NCCL are);
#   2. configures and builds for sm_90;
#   3. runs every ctest test labelled `gpu` (one test per case, so one run
#      reports every finding), in parallel;
#   4. reruns each failed test once with cuDNN 9's logging
#      (CUDNN_LOGLEVEL_DBG=2, CUDNN_LOGDEST_DBG=stderr), log kept;
#   5. runs compute-sanitizer --tool memcheck and --tool initcheck on one
#      small training case (test_cuda_step --case fp16_scaled: five steps
#      of the device-resident step, all-reduce path included);
#   6. runs the GPU benchmark (bench/gpu_bench.sh) last, under the time left;
# and writes $OUT/summary.md: a table of every check (pass, fail or skip,
# and seconds), the logs beside it. Exit code 0 when nothing failed.
#
# The machine has no apt, no bible program and maybe no h5py: Open MPI,
# HDF5, a BLAS and inih come as Debian packages unpacked into .deps/, and
# the prepared corpus as .deps/bible/ (tests/gpu/prepare_device_run.sh on
# the development machine). Name .deps in the run's `carry`.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
out=${OUT:-$root/gpu_out}
mkdir -p "$out"
exec > >(tee "$out/device_check.log") 2>&1
start=$(date +%s)
budget=${BUDGET_S:-480}   # the whole run, seconds
build=$root/build-gpu
jobs=$(nproc)
rows=()

step() { echo; echo "=== $* ($(date +%T), $(( $(date +%s) - start )) s in)"; }
left() { echo $(( budget - ($(date +%s) - start) )); }
record() { rows+=("| $1 | $2 | $3 |"); }  # check, result, seconds
# timed NAME LIMIT_S LOG COMMAND...: runs it under a timeout, records the row.
timed() {
  local name=$1 limit=$2 log=$3 t0 rc result
  shift 3
  t0=$(date +%s)
  timeout "$limit" "$@" >"$log" 2>&1
  rc=$?
  result=pass
  [ $rc -eq 0 ] || result="fail (exit $rc$([ $rc -eq 124 ] && echo ", timed out after ${limit} s"))"
  record "$name" "$result" $(( $(date +%s) - t0 ))
  return $rc
}

step "machine"
D=$root/.deps/usr
if [ -d "$D" ]; then
  export LD_LIBRARY_PATH=$D/lib/x86_64-linux-gnu:$D/lib/x86_64-linux-gnu/blas:$D/lib/x86_64-linux-gnu/openmpi/lib:$D/lib/x86_64-linux-gnu/hdf5/serial:${LD_LIBRARY_PATH:-}
  export OPAL_PREFIX=$D PATH=$D/bin:$PATH CMAKE_PREFIX_PATH=$D
else
  echo "no .deps/ (tests/gpu/prepare_device_run.sh): relying on the machine's own MPI, HDF5 and BLAS"
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export PATH=/usr/local/cuda/bin:$PATH
nvidia-smi || true
device=$(nvidia-smi -L 2>/dev/null | head -n 1 | sed 's/ (UUID.*//')
nvcc --version | tail -2 || true
python=$(command -v python3 || echo /usr/bin/python3)
site=$("$python" -c 'import site; print(site.getsitepackages()[0])' 2>/dev/null || true)
hints=()
for lib in cudnn nccl; do
  if [ -f /usr/local/cuda/include/$lib.h ]; then
    echo "$lib: /usr/local/cuda"
  elif [ -d "$site/nvidia/$lib" ]; then
    echo "$lib: $site/nvidia/$lib"
    upper=$(echo $lib | tr a-z A-Z)
    hints+=("-D${upper}_ROOT=$site/nvidia/$lib")
    # the pip wheels ship libX.so.N without the unversioned name find_library looks for
    for f in "$site/nvidia/$lib"/lib/lib$lib.so.*; do
      [ -e "$site/nvidia/$lib/lib/lib$lib.so" ] || ln -sf "$(basename "$f")" "$site/nvidia/$lib/lib/lib$lib.so"
      break
    done
    export LD_LIBRARY_PATH=$site/nvidia/$lib/lib:$LD_LIBRARY_PATH
  else
    echo "$lib: NOT FOUND"
  fi
done

step "configure and build (sm_90)"
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
timed "configure (sm_90)" 120 "$out/configure.log" \
  cmake -S . -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=ON \
        -DCMAKE_CUDA_ARCHITECTURES=90 -DRNND_PYTHON="$python" "${hints[@]}"
tail -n 4 "$out/configure.log"
timed "build" 240 "$out/build.log" cmake --build "$build" -j "$jobs"
tail -n 3 "$out/build.log"
if [ ! -x "$build/rnn_dist" ] || ! grep -q "CUDA backend ON" "$out/configure.log"; then
  echo "BUILD FAILED (or no CUDA backend): see $out/configure.log and $out/build.log"
  grep -E "error|CUDA backend|WARNING" "$out/configure.log" "$out/build.log" | head -n 20
fi

step "gpu tests"
mkdir -p "$build/test_work/bible/labels"
cp -n "$root"/.deps/bible/*.h5 "$build/test_work/bible/" 2>/dev/null || true
cp -n "$root"/.deps/bible/labels/*.h5 "$build/test_work/bible/labels/" 2>/dev/null || true
t0=$(date +%s)
(cd "$build" && timeout $(( $(left) - 200 > 60 ? $(left) - 200 : 60 )) \
   ctest -L gpu -j 4 --timeout 150 --output-on-failure) >"$out/ctest_gpu.txt" 2>&1
echo "ctest -L gpu: exit $? after $(( $(date +%s) - t0 )) s"
grep -E "tests passed|tests failed" "$out/ctest_gpu.txt" || true
# One row per test: "  Test  #12: gpu.step.fp32 ......   Passed    1.02 sec"
failed=()
while read -r name status seconds; do
  case $status in
    Passed) record "$name" pass "$seconds" ;;
    Skipped) record "$name" "skip (exit 77: no CUDA device, or the reason it prints)" "$seconds" ;;
    *) record "$name" "fail ($status)" "$seconds"; failed+=("$name") ;;
  esac
done < <(awk '/Test +#[0-9]+: / {
              for (i = 1; i <= NF; i++) if ($i ~ /^#[0-9]+:$/) name = $(i + 1)
              status = "Failed"
              if ($0 ~ /Passed/) status = "Passed"; else if ($0 ~ /Skipped/) status = "Skipped";
              else if ($0 ~ /Timeout/) status = "Timeout"; else if ($0 ~ /Not Run/) status = "NotRun"
              sec = "-"; for (i = 1; i < NF; i++) if ($(i + 1) == "sec") sec = $i
              print name, status, sec }' "$out/ctest_gpu.txt")

step "rerun failures with cuDNN logging"
for name in "${failed[@]:0:6}"; do
  [ "$(left)" -gt 150 ] || { echo "no time left to rerun $name"; break; }
  timed "rerun $name (cuDNN log: rerun_$name.log)" 90 "$out/rerun_$name.log" \
    env CUDNN_LOGLEVEL_DBG=2 CUDNN_LOGDEST_DBG=stderr \
    ctest --test-dir "$build" -R "^${name//./\\.}\$" --output-on-failure
  # keep the log within what comes back from the machine
  tail -c 4000000 "$out/rerun_$name.log" >"$out/rerun_$name.tmp" && mv "$out/rerun_$name.tmp" "$out/rerun_$name.log"
done

step "compute-sanitizer on one small training case"
sanitizer=$(command -v compute-sanitizer || true)
for tool in memcheck initcheck; do
  if [ -z "$sanitizer" ]; then
    record "compute-sanitizer --tool $tool" "skip (compute-sanitizer not found)" 0
  elif [ ! -x "$build/test_cuda_step" ]; then
    record "compute-sanitizer --tool $tool" "skip (test_cuda_step not built)" 0
  elif [ "$(left)" -lt 120 ]; then
    record "compute-sanitizer --tool $tool" "skip (no time left)" 0
  else
    extra=()
    [ $tool = memcheck ] && extra=(--leak-check full)
    timed "compute-sanitizer --tool $tool: test_cuda_step --case fp16_scaled" 100 "$out/sanitizer_$tool.log" \
      "$sanitizer" --tool $tool "${extra[@]}" --error-exitcode 9 "$build/test_cuda_step" --case fp16_scaled
    grep -E "ERROR SUMMARY|LEAK SUMMARY" "$out/sanitizer_$tool.log" | tail -n 2
  fi
done

step "GPU benchmark (last, under the time left)"
bench_limit=$(( $(left) - 10 ))
if [ "$bench_limit" -gt 30 ]; then
  timed "bench/gpu_bench.sh (table: gpu_bench.md)" "$bench_limit" "$out/gpu_bench.log" \
    env STEPS="${STEPS:-20}" WARMUP="${WARMUP:-3}" PYTHON="$python" \
    "$root/bench/gpu_bench.sh" "$build" "$out/gpu_bench.md"
  cat "$out/gpu_bench.md" 2>/dev/null || tail -n 20 "$out/gpu_bench.log"
else
  record "bench/gpu_bench.sh" "skip (no time left)" 0
fi

step "summary"
{
  echo "# device_check.sh on ${device:-an unknown device}"
  echo
  echo "$(date -u +%F\ %T) UTC; $(nvcc --version 2>/dev/null | tail -n 1); $(( $(date +%s) - start )) s in all."
  echo
  echo "| check | result | seconds |"
  echo "|---|---|---:|"
  printf '%s\n' "${rows[@]}"
  echo
  n_pass=$(printf '%s\n' "${rows[@]}" | grep -c '| pass |')
  n_fail=$(printf '%s\n' "${rows[@]}" | grep -c '| fail')
  n_skip=$(printf '%s\n' "${rows[@]}" | grep -c '| skip')
  echo "$n_pass passed, $n_fail failed, $n_skip skipped."
} | tee "$out/summary.md"
grep -q '| fail' "$out/summary.md" && exit 1
exit 0
