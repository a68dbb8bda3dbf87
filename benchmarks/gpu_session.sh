#!/bin/bash
# One prepared device session (see docs/benchmarks.md, "On a GPU"): the CUDA tests, the
# plain-loop ratio benchmarks recorded with --json, the in-process hand-over cost, and as
# much of the paper-length Multi-VFL Fig. 3b run (entry multivfl_fig3_fmnist_paper: 500
# epochs, four server optimizers) as TF seconds allow -- resumable: its finished curves are
# committed in docs/results/multivfl_fig3_fmnist_paper.cells.json, a run folder given as
# FIG3_IN (the fig3paper folder an earlier session brought back) is continued from its
# checkpoints, and the run folder and the cells are copied to $OUT.
#
#   OUT=/tmp/gpu TT=60 TB=80 TF=240 bash benchmarks/gpu_session.sh
#
# Data comes from FEDVIEWS_DATA (the `fedviews datasets fetch mnist` cache) and
# FEDVIEWS_FASHION_MNIST_DIR (the Fashion-MNIST .gz files) that must travel with the tree.
R=$PWD; PY=${PY:-python3}; D=${DEV:-cuda}; N=${N:-60000}
export PYTHONPATH=$R/src:$R/benchmarks PYTHONUNBUFFERED=1
O=${OUT:-/tmp/gpu}; mkdir -p "$O"
(date; nvidia-smi --query-gpu=name,driver_version --format=csv) > "$O/env.txt" 2>&1
timeout "${TT:-100}" "$PY" -m pytest -q -p no:cacheprovider -k cuda tests/deep/test_multivfl.py \
  tests/deep/test_apfed.py tests/deep/test_splitnn.py tests/federation/test_device_messages.py \
  tests/federation/test_lend.py tests/deep/test_sfedmv.py \
  > "$O/tests.txt" 2>&1
B=$O/bench.txt
run() { echo "=== $* ($(date +%T))" >> "$B"; timeout "${TB:-100}" "$PY" "$@" >> "$B" 2>&1; echo "rc=$?" >> "$B"; }
run benchmarks/bench_multivfl.py --device "$D" --samples "$N" --repeats 3 --one-backward-each --json "docs/results/bench_multivfl_$D.json"
run benchmarks/bench_splitnn.py --device "$D" --samples "$N" --repeats 3 --one-backward-each --json "docs/results/bench_splitnn_$D.json"
run benchmarks/bench_apfed.py --device "$D" --samples $((N / 3)) --repeats 3 --json "docs/results/bench_apfed_$D.json"
cp docs/results/bench_*_"$D".json "$O"/ 2>/dev/null
run benchmarks/bench_handover.py --device "$D" --clock wall
# where a federated epoch's time goes on the device (the profile the ratios alone do not show)
run benchmarks/bench_multivfl.py --device "$D" --samples 5000 --repeats 1 --profile 40
run benchmarks/bench_splitnn.py --device "$D" --samples 10000 --repeats 1 --profile 40
if [ "${TF:-0}" -gt 0 ]; then
  F=$O/fig3paper; [ -n "$FIG3_IN" ] && cp -r "$FIG3_IN" "$F"
  echo "=== fig3 paper-length ($(date +%T))" >> "$B"
  timeout "$TF" "$PY" -m fedviews reproduce multivfl_fig3_fmnist_paper --record --continue \
    --out "$F" >> "$O/fig3paper.txt" 2>&1
  echo "rc=$?" >> "$B"
  cp docs/results/multivfl_fig3_fmnist_paper*.json docs/results/cells/multivfl_fig3_fmnist_paper.json.gz "$O"/ 2>/dev/null
fi
date >> "$O/env.txt"
