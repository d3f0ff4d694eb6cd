#!/usr/bin/env bash
# prepare_device_run.sh [BUILD_DIR] — gets a checkout ready for the one
# prepared run on a lent GPU machine (tests/gpu/device_check.sh), which has
# no apt, no internet, no `bible` program and maybe no h5py. Fills .deps/
# (git-ignored, named in the run's `carry`, under the 64 MiB it may carry):
#   .deps/usr/...        Debian 12's Open MPI, HDF5, reference BLAS and inih,
#                        downloaded (apt-get download) and unpacked, not installed;
#   .deps/bible/         the prepared test corpus, {train,valid,test}.h5 and
#                        labels/{train,valid,test}.h5, copied from
#                        BUILD_DIR/test_work/bible (run the `bible_data` test first).
# Run it as root on the development machine, from anywhere.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
deps=$root/.deps
grep -qx '/.deps/' "$root/.git/info/exclude" 2>/dev/null || echo '/.deps/' >>"$root/.git/info/exclude"

if [ ! -d "$deps/usr/lib" ]; then
  # The reference BLAS stands in for OpenBLAS there: the GPU runs the model,
  # the CPU backend is only the tests' reference.
  pkgs="libopenmpi-dev libopenmpi3 openmpi-bin openmpi-common libevent-core-2.1-7 libevent-pthreads-2.1-7
        libhwloc15 libpmix2 libfabric1 libucx0 libibverbs1 librdmacm1 libnl-3-200 libnl-route-3-200
        libpsm-infinipath1 libpsm2-2 libhdf5-dev libhdf5-103-1 libsz2 libaec0 libblas3 libblas-dev
        libinih-dev libinih1"
  mkdir -p "$deps/debs"
  apt-get update -qq >/dev/null 2>&1 || true
  (cd "$deps/debs" && apt-get download $pkgs >/dev/null)
  for f in "$deps"/debs/*.deb; do dpkg -x "$f" "$deps"; done
  rm -rf "$deps/debs"
  find "$deps" -name '*.a' -delete
  rm -rf "$deps/usr/share/doc" "$deps/usr/share/man" "$deps/usr/share/lintian"
  # Debian reaches cblas.h and libblas.so through update-alternatives; by hand here.
  ln -sf x86_64-linux-gnu/cblas-netlib.h "$deps/usr/include/cblas.h"
  ln -sf blas/libblas.so.3 "$deps/usr/lib/x86_64-linux-gnu/libblas.so.3"
  ln -sf blas/libblas.so.3 "$deps/usr/lib/x86_64-linux-gnu/libblas.so"
fi

corpus=$build/test_work/bible
for f in train valid test labels/train labels/valid labels/test; do
  [ -f "$corpus/$f.h5" ] || { echo "prepare_device_run.sh: $corpus/$f.h5 missing; run: ctest --test-dir $build -R bible_data" >&2; exit 1; }
done
mkdir -p "$deps/bible/labels"
cp "$corpus"/*.h5 "$deps/bible/"
cp "$corpus"/labels/*.h5 "$deps/bible/labels/"
size=$(du -sm "$deps" | cut -f1)
echo "prepare_device_run.sh: $deps ready ($size MiB; a run may carry 64 MiB)"
[ "$size" -lt 64 ] || { echo "prepare_device_run.sh: too large to carry" >&2; exit 1; }
