#!/usr/bin/env bash
# expect_error.sh CODE REGEX -- COMMAND...
# Runs COMMAND and passes only if it exits with CODE and its stderr is exactly
# one line that matches the extended regular expression REGEX. Prints what it
# got on failure, so ctest --output-on-failure shows the difference.
set -u
want_code=$1; want_regex=$2; shift 2
[ "${1:-}" = "--" ] && shift
err=$(mktemp); out=$(mktemp)
"$@" >"$out" 2>"$err"; code=$?
lines=$(grep -c '' "$err")
fail=0
[ "$code" = "$want_code" ] || { echo "FAIL: exit code $code, expected $want_code"; fail=1; }
[ "$lines" = 1 ] || { echo "FAIL: stderr has $lines lines, expected exactly 1"; fail=1; }
grep -Eq -- "$want_regex" "$err" || { echo "FAIL: stderr does not match /$want_regex/"; fail=1; }
if [ $fail = 1 ]; then echo "command: $*"; echo "--- stderr:"; cat "$err"; echo "--- stdout (tail):"; tail -5 "$out"; fi
rm -f "$err" "$out"
[ $fail = 0 ] && echo "ok: exit $code, stderr: matches /$want_regex/"
exit $fail
