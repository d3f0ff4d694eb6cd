#!/usr/bin/env bash
# install_deps.sh [--with-test-tools] [--check] — installs the Debian 12 packages that
# rnn_dist needs and are missing (build tools, Open MPI, HDF5, OpenBLAS,
# oneDNN for bf16 products on the CPU (with the OpenCL headers its CMake
# config requires), Python with h5py, numpy and
# matplotlib for rnn_plot, and
# for the test suite and reference checks Python with PyTorch, h5py, numpy,
# matplotlib, clang with libFuzzer and valgrind, R for the forecasting
# example's sunspot series, and for the emulated cluster (tests/cluster)
# iproute2, iputils-ping, Slurm and munge; bible-kjv for the embedded default
# corpus). Runs apt-get only
# when something is missing; uses sudo when not root. --check installs
# nothing: it names what is missing and exits 1 if anything is.
set -euo pipefail
with_test_tools=0 check_only=0
for arg in "$@"; do
  case $arg in
    --with-test-tools) with_test_tools=1 ;;
    --check) check_only=1 ;;
    *) echo "install_deps: unknown option '$arg' (--with-test-tools, --check)" >&2; exit 2 ;;
  esac
done

packages=(build-essential cmake ninja-build pkg-config bc
          libopenmpi-dev openmpi-bin libhdf5-dev hdf5-tools zlib1g-dev libopenblas-dev libdnnl-dev ocl-icd-opencl-dev
          bible-kjv python3 python3-h5py python3-numpy python3-matplotlib)
if [ "$with_test_tools" = 1 ]; then
  packages+=(python3-torch clang libclang-rt-14-dev valgrind
             r-base-core iproute2 iputils-ping util-linux slurmctld slurmd slurm-client munge)
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && { echo "install_deps: all ${#packages[@]} packages present"; exit 0; }
[ "$check_only" = 1 ] && { echo "install_deps: missing ${missing[*]}"; exit 1; }

echo "install_deps: installing ${missing[*]}"
sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -q
$sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
