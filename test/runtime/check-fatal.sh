#!/bin/sh
# Usage: check-fatal.sh EXPECTED-MESSAGE COMMAND...
# Runs COMMAND (bounded by `timeout 60`) and checks that it exits with code 1
# and that its stderr contains EXPECTED-MESSAGE.
expected="$1"
shift
err=$(mktemp)
timeout 60 "$@" 2>"$err" >/dev/null
code=$?
cat "$err" >&2
if ! grep -qF -- "$expected" "$err"; then
  echo "check-fatal: stderr lacks: $expected" >&2
  rm -f "$err"
  exit 1
fi
rm -f "$err"
if [ "$code" -ne 1 ]; then
  echo "check-fatal: exit code $code, expected 1 (124: timed out)" >&2
  exit 1
fi
echo "check-fatal: exit code 1 and message as expected"
