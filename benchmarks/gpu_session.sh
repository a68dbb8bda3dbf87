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
# Data comes from FEDVIEWS_DATA (the `fedviews datasets fetch mnist` cache: MNIST, 10,000
# images) and FEDVIEWS_FASHION_MNIST_DIR (the four Fashion-MNIST *-ubyte.gz files, 60,000
# training images; default /usr/share/datasets/fashion-mnist), which must travel with the
# tree. Without Fashion-MNIST the Multi-VFL runs (benchmarks and Fig. 3b) are skipped, said
# on stderr and in $OUT/bench.txt, and the script ends with status 1.
# Each benchmark sizes its run by what its dataset holds: Multi-VFL all of Fashion-MNIST's
# training set (FN), split NN and APFed all of MNIST (MN).
R=$PWD; PY=${PY:-python3}; D=${DEV:-cuda}; FN=${FN:-60000}; MN=${MN:-10000}
export PYTHONPATH=$R/src:$R/benchmarks PYTHONUNBUFFERED=1
O=${OUT:-/tmp/gpu}; mkdir -p "$O"
B=$O/bench.txt; STATUS=0
START=$(mktemp); trap 'rm -f "$START"' EXIT  # records newer than it: this session's
(date; nvidia-smi --query-gpu=name,driver_version --format=csv) > "$O/env.txt" 2>&1
# the Fashion-MNIST files, looked up as fedviews looks them up ($FEDVIEWS_FASHION_MNIST_DIR)
if FMNIST=$("$PY" -c 'import sys
from fedviews.data._mnist import fetch_fashion_mnist
from fedviews.errors import DataError
try:
    print(fetch_fashion_mnist())
except DataError as exc:
    sys.exit(str(exc))' 2>&1); then
  echo "Fashion-MNIST: $FMNIST" >> "$O/env.txt"
else
  echo "error: Multi-VFL runs skipped: $FMNIST" | tee -a "$B" "$O/env.txt" >&2
  FMNIST=""; STATUS=1
fi
timeout "${TT:-100}" "$PY" -m pytest -q -p no:cacheprovider -k cuda tests/deep/test_multivfl.py \
  tests/deep/test_apfed.py tests/deep/test_splitnn.py tests/federation/test_device_messages.py \
  tests/federation/test_lend.py tests/deep/test_sfedmv.py \
  > "$O/tests.txt" 2>&1
run() { echo "=== $* ($(date +%T))" >> "$B"; timeout "${TB:-100}" "$PY" "$@" >> "$B" 2>&1; echo "rc=$?" >> "$B"; }
[ -n "$FMNIST" ] && run benchmarks/bench_multivfl.py --device "$D" --samples "$FN" --repeats 3 --one-backward-each --json "docs/results/bench_multivfl_$D.json"
run benchmarks/bench_splitnn.py --device "$D" --samples "$MN" --repeats 3 --one-backward-each --json "docs/results/bench_splitnn_$D.json"
run benchmarks/bench_apfed.py --device "$D" --samples "$MN" --repeats 3 --json "docs/results/bench_apfed_$D.json"
# only the records this session wrote: a benchmark that failed left the committed one as it was
find docs/results -maxdepth 1 -name "bench_*_$D.json" -newer "$START" -exec cp {} "$O"/ \;
run benchmarks/bench_handover.py --device "$D" --clock wall
# where a federated epoch's time goes on the device (the profile the ratios alone do not show)
[ -n "$FMNIST" ] && run benchmarks/bench_multivfl.py --device "$D" --samples 5000 --repeats 1 --profile 40
run benchmarks/bench_splitnn.py --device "$D" --samples "$MN" --repeats 1 --profile 40
if [ "${TF:-0}" -gt 0 ] && [ -n "$FMNIST" ]; then
  F=$O/fig3paper; [ -n "$FIG3_IN" ] && cp -r "$FIG3_IN" "$F"
  echo "=== fig3 paper-length ($(date +%T))" >> "$B"
  timeout "$TF" "$PY" -m fedviews reproduce multivfl_fig3_fmnist_paper --record --continue \
    --out "$F" >> "$O/fig3paper.txt" 2>&1
  echo "rc=$?" >> "$B"
  find docs/results docs/results/cells -maxdepth 1 -newer "$START" \
    \( -name "multivfl_fig3_fmnist_paper*.json" -o -name "multivfl_fig3_fmnist_paper.json.gz" \) \
    -exec cp {} "$O"/ \;
fi
date >> "$O/env.txt"
exit "$STATUS"
