#!/usr/bin/env bash
# device_check.sh — the one prepared run for a lent GPU machine
# (../shared/gpu/README.md): probe, build for sm_90, run the `gpu` tests and
# the GPU benchmark, and keep everything under $OUT (default ./gpu_out).
#
# The machine has no apt: Open MPI, HDF5, a BLAS and inih come as Debian
# packages unpacked into .deps/ (../shared/gpu/bundle-debs.sh .deps), and the
# prepared test corpus as .deps/bible/{train,valid,test}.h5 (copied from
# build/test_work/bible here). Name .deps in the run's `carry`.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
out=${OUT:-$root/gpu_out}
mkdir -p "$out"
exec > >(tee "$out/device_check.log") 2>&1

step() { echo; echo "=== $* ($(date +%T))"; }

D=$root/.deps/usr
if [ -d "$D" ]; then
  export LD_LIBRARY_PATH=$D/lib/x86_64-linux-gnu:$D/lib/x86_64-linux-gnu/blas:$D/lib/x86_64-linux-gnu/openmpi/lib:$D/lib/x86_64-linux-gnu/hdf5/serial:${LD_LIBRARY_PATH:-}
  export OPAL_PREFIX=$D PATH=$D/bin:$PATH CMAKE_PREFIX_PATH=$D
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

step "machine"
nvidia-smi || true
nvcc --version | tail -2 || true
python=$(command -v python3)
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
build=$root/build-gpu
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
      -DRNND_PYTHON="$python" "${hints[@]}" 2>&1 | tail -8
cmake --build "$build" -j "$(nproc)" 2>&1 | tail -5
if [ ! -x "$build/rnn_dist" ]; then echo "BUILD FAILED"; exit 1; fi

step "gpu tests"
mkdir -p "$build/test_work/bible"
cp -n "$root"/.deps/bible/*.h5 "$build/test_work/bible/" 2>/dev/null || true
(cd "$build" && ctest -L gpu --output-on-failure --timeout 400) | tee "$out/ctest_gpu.txt"

step "GPU benchmark"
STEPS=${STEPS:-20} WARMUP=${WARMUP:-3} PYTHON=$python "$root/bench/gpu_bench.sh" "$build" "$out/gpu_bench.md"
step "done"
