#!/bin/bash
# `make test` N times in a row on a fresh clone of this repository's HEAD while two busy loops
# load the machine (issue #30: the suite must hold up under load), stopping at the first failure.
#
#   bash benchmarks/loaded_make_test.sh [N=5] [WORK=/tmp/loaded]
#
# WORK/summary.txt gets one line per run (exit status, seconds, pytest's summary line) and
# WORK/runN.log its whole output. Each run is the CI entry point (.ci/run, i.e. `make test`);
# the first one also builds the clone's virtual environment.
N=${1:-5}; W=${2:-/tmp/loaded}; SRC=$(git rev-parse --show-toplevel)
mkdir -p "$W"; rm -rf "$W/clone"; git clone -q "$SRC" "$W/clone" || exit 1
cd "$W/clone" || exit 1
echo "commit $(git rev-parse --short HEAD) start $(date -u +%FT%TZ) nproc $(nproc)" > "$W/summary.txt"
yes > /dev/null & Y1=$!
yes > /dev/null & Y2=$!
trap 'kill $Y1 $Y2 2>/dev/null' EXIT
for i in $(seq 1 "$N"); do
  start=$(date +%s)
  CI=true bash .ci/run > "$W/run$i.log" 2>&1
  rc=$?
  line=$(grep -E "passed|failed" "$W/run$i.log" | tail -1)
  echo "run $i rc=$rc seconds=$(( $(date +%s) - start )) end $(date -u +%FT%TZ) :: $line" >> "$W/summary.txt"
  [ "$rc" -eq 0 ] || { echo "stopped at the first failure" >> "$W/summary.txt"; exit "$rc"; }
done
echo "all $N passed" >> "$W/summary.txt"
