#!/usr/bin/env bash
# Runs a command (default: make test) RUNS times in a row (default 2) with N CPU-bound busy
# loops beside it (default 2), as on a loaded CI machine; the loops stop when it ends, however
# it ends. Prints each run's exit status and wall time; exits non-zero if any run failed.
#
#   tests/busy_machine.sh [-n N] [-r RUNS] [command ...]
set -uo pipefail
cd "$(dirname "$0")/.."
loops=2
runs=2
while getopts "n:r:" opt; do
  case $opt in
    n) loops=$OPTARG ;;
    r) runs=$OPTARG ;;
    *) echo "usage: $0 [-n busy_loops] [-r runs] [command ...]" >&2; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
[ $# -gt 0 ] || set -- make test

pids=()
stop_loops() { [ ${#pids[@]} -eq 0 ] || kill "${pids[@]}" 2>/dev/null; wait "${pids[@]}" 2>/dev/null; pids=(); }
trap stop_loops EXIT INT TERM
for _ in $(seq "$loops"); do
  bash -c 'while :; do :; done' &
  pids+=($!)
done

failed=0
for run in $(seq "$runs"); do
  start=$(date +%s)
  "$@"
  rc=$?
  echo "busy_machine: run $run of $runs with $loops busy loops: exit $rc after $(( $(date +%s) - start )) s" >&2
  [ $rc -eq 0 ] || failed=1
done
stop_loops
exit $failed
