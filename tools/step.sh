#!/usr/bin/env bash
# Runs one step of `make lint` or `make test` and notes how long it took in target/ci-steps.tsv
# (name, seconds, exit status); .ci/run prints them as a table at the end.
#   tools/step.sh NAME COMMAND [ARG]...
set -uo pipefail
name=$1
shift
start=$(date +%s)
"$@"
rc=$?
mkdir -p target
printf '%s\t%s\t%s\n' "$name" "$(($(date +%s) - start))" "$rc" >>target/ci-steps.tsv
exit "$rc"
