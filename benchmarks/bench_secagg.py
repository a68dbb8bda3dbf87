"""Secure aggregation overhead: MMVFL, V-FedMV and H-FedMV with ``defense="secagg"`` beside the
plain run (Multi-VFL's is in ``bench_defenses.py``).

Each configuration is fitted plain and secure, alternately, ``--repeat`` times in this process
(this machine is noisy: the ratio of medians is what to read); bytes are the message log's
totals (every message, key exchange included). Two data sizes: Handwritten (2,000 samples,
6 views, 10 classes) and a synthetic problem of ``--samples`` rows, where masking cost grows
with ``n x classes x (parties - 1)``; H-FedMV deals the same rows to 4 clients (every view,
pooled scaling), where it grows with ``features x classes x (clients - 1)``. Also checks
that both runs reach the same model (``Z``, or H-FedMV's global ``W_k``).

    python benchmarks/bench_secagg.py [--repeat 3] [--samples 20000] [--json PATH]

``--json PATH`` also writes the table as a record (``benchmarks/_record.py``), whose
``tables`` ``fedviews reproduce secagg_cost`` reads.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
from _args import parser, positive_int, run_cli
from _record import json_option, write_record

from fedviews import data
from fedviews.experiments import Table
from fedviews.linear import MMVFL, HFedMV, VFedMV

COLUMNS = [
    "algorithm", "data", "plain s", "secagg s", "time ratio", "plain MB", "secagg MB",
    "bytes ratio", "max |Δ| of the model vs plain",
]  # fmt: skip


def problems(n_synth: int) -> list[tuple[str, list[np.ndarray], np.ndarray]]:
    ds = data.load("handwritten")
    views, y = ds.views, ds.y
    Xs = [(X - X.mean(0)) / np.where(X.std(0) < 1e-12, 1.0, X.std(0)) for X in views]
    rng = np.random.default_rng(0)
    ys = rng.integers(0, 10, n_synth)
    synth = [
        rng.normal(size=(n_synth, 50)) + np.eye(10)[ys] @ rng.normal(size=(10, 50))
        for _ in range(4)
    ]
    return [("handwritten (n=2000, K=6)", Xs, y), (f"synthetic (n={n_synth}, K=4)", synth, ys)]


def fit(Est: type, kind: str, Xs: list[np.ndarray], y: np.ndarray, rounds: int) -> Any:
    """One fit: the consensus algorithms on all views, H-FedMV on 4 clients' rows."""
    if Est is HFedMV:
        parts = np.array_split(np.random.default_rng(1).permutation(len(y)), 4)
        clients = [([X[p] for X in Xs], y[p]) for p in parts]
        est = HFedMV(n_rounds=rounds, local_iter=1, standardize="pooled", defense=kind)
        return est.fit(clients)
    return Est(max_iter=rounds, tol=0, defense=kind).fit(Xs, y)


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--repeat", type=positive_int, default=3, help="alternating runs of each")
    ap.add_argument(
        "--samples", type=positive_int, default=20000, help="rows of the synthetic problem"
    )
    ap.add_argument("--rounds", type=positive_int, default=10)
    json_option(ap)
    args = ap.parse_args()
    print("| " + " | ".join(COLUMNS) + " |")
    print("|" + "---|" * len(COLUMNS))
    rows = []
    for name, Xs, y in problems(args.samples):
        for Est in (MMVFL, VFedMV, HFedMV):
            times: dict[str, list[float]] = {"none": [], "secagg": []}
            fitted = {}
            for _ in range(args.repeat):
                for kind in ("none", "secagg"):
                    t = time.perf_counter()
                    fitted[kind] = fit(Est, kind, Xs, y, args.rounds)
                    times[kind].append(time.perf_counter() - t)
            plain, secure = fitted["none"], fitted["secagg"]
            tp, ts = np.median(times["none"]), np.median(times["secagg"])
            bp = plain.run_stats_["total_bytes"] / 1e6
            bs = secure.run_stats_["total_bytes"] / 1e6
            if Est is HFedMV:
                diff = max(float(np.abs(a - b).max()) for a, b in zip(plain.W_, secure.W_))
            else:
                diff = float(np.abs(plain.Z_ - secure.Z_).max())
            row = [Est.__name__, name, tp, ts, ts / tp, bp, bs, bs / bp, f"{diff:.1e}"]
            rows.append(row)
            print("| " + " | ".join(f"{v:.2f}" if isinstance(v, float) else v for v in row) + " |")
    note = (
        f"{args.rounds} rounds; median of {args.repeat} alternating runs in one process; "
        "H-FedMV deals the rows to 4 clients, pooled scaling; bytes: every message, key "
        "exchange included."
    )
    table = Table("Secure summation: cost beside the plain run", COLUMNS, rows, note)
    write_record(args.json, table.title, [table.to_dict()])


if __name__ == "__main__":
    run_cli(main)
