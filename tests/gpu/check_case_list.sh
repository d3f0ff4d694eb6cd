#!/usr/bin/env bash
# check_case_list.sh PROGRAM NAME... — the case names ctest registers for a
# GPU test program (tests/gpu_tests.cmake) are exactly the ones the program
# knows (PROGRAM --list): a case added to one but not the other fails here.
set -euo pipefail
program=$1
shift
expected=$(printf '%s\n' "$@" | sort)
actual=$("$program" --list | sort)
if [ "$expected" != "$actual" ]; then
  echo "FAIL: ctest's cases and $(basename "$program") --list differ:"
  diff <(echo "$expected") <(echo "$actual") | sed 's/^</  only in gpu_tests.cmake:/; s/^>/  only in --list:/' | grep only || true
  exit 1
fi
echo "ok   $# cases, the same in gpu_tests.cmake and $(basename "$program") --list"
