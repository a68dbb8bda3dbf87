"""Opt-in wire encodings of split learning: bytes per round against final accuracy, beside the exact run.

Every setting trains the same federation (same initialisation and batches) for ``--rounds``
rounds (epochs) on ``--samples`` random training images and evaluates on ``--eval`` random test
images; only how activations and their gradients travel differs (``wire_activations`` /
``wire_gradients``, :class:`fedviews.federation.Codec`). Multi-VFL: 4 data owners, 1 label owner,
Adam local step. APFed-R: setting 2-1 (the active party holds the top half), SGD lr 0.01; its
accuracy is the active party's, predicting alone. Prints one line per run; writes nothing
unless given a path: ``--plot PATH`` the figure, ``--json PATH`` one table per algorithm as a
record (``benchmarks/_record.py``) and, without ``--plot``, the figure beside it
(``wire_codecs_<algorithms>.png``: what ``fedviews reproduce`` takes from its run folder).
A dataset's split holds fewer images than asked: all of them are used (said on stderr).

    python benchmarks/bench_wire.py [--algorithms multivfl apfed] [--datasets mnist fashion_mnist]
    python benchmarks/bench_wire.py --samples 500 --rounds 1 --plot /tmp/wire.png

The committed tables and figures (``docs/results/wire_*.json``, ``docs/img/wire_codecs_*.png``)
are made by ``fedviews reproduce wire_multivfl --record`` and ``fedviews reproduce wire_apfed
--record`` (``reproductions.toml``: this script with ``--json`` into the run folder).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np
from _args import capped, parser, positive_int, run_cli
from _record import json_option, write_record

from fedviews import data
from fedviews.deep import APFed
from fedviews.deep.multivfl import MultiVFL
from fedviews.errors import FedViewsError
from fedviews.experiments import Table

#: (label, wire_activations, wire_gradients)
SETTINGS = [
    ("exact (float32)", "none", "none"),
    ("fp16 both ways", "fp16", "fp16"),
    ("bf16 both ways", "bf16", "bf16"),
    ("int8 both ways", "int8", "int8"),
    ("int8 + top-10% gradients", "int8", "topk"),
]
ALGORITHMS = ("multivfl", "apfed")
DATASETS = ("mnist", "fashion_mnist")


def train(algorithm: str, acts: str, grads: str, split: tuple, rounds: int) -> tuple[float, float]:
    """``(MB per round, test accuracy %)`` of one run."""
    X, y, Xte, yte = split
    wire: dict[str, Any] = {"wire_activations": acts, "wire_gradients": grads, "topk_ratio": 0.1}
    if algorithm == "multivfl":
        est = MultiVFL(
            n_data_owners=4, n_label_owners=1, rounds=rounds, local_optimizer="adam", lr=1e-3,
            device="cpu", **wire,
        ).fit(X, y, label_owner_ids=[np.arange(len(y))], eval_set=(Xte, yte))  # fmt: skip
        return est.run_stats_["train_bytes_per_round"] / 1e6, 100 * est.history_["accuracy"][-1]
    est = APFed(variant="R", m=2, i=1, epochs=rounds, lr=0.01, device="cpu", **wire).fit(X, y)
    return est.message_log_["total_bytes"] / rounds / 1e6, 100 * est.score(Xte, yte)


def split_of(name: str, args: argparse.Namespace) -> tuple[np.ndarray, ...]:
    """``(X, y, X_test, y_test)``: ``--samples`` random training and ``--eval`` random test
    images of dataset ``name`` (as many as its split holds, where it holds fewer)."""
    Xtr, ytr, _, Xte, yte, _ = data.image_split(name, {}, 0, 0.2)  # MNIST: a stratified fifth
    rng = np.random.default_rng(0)
    take = rng.permutation(len(ytr))[: capped(args.samples, len(ytr), f"{name}'s training split")]
    keep = rng.permutation(len(yte))[
        : capped(args.eval, len(yte), f"{name}'s test split", "--eval")
    ]
    return Xtr[take], ytr[take], Xte[keep], yte[keep]


def run(
    algorithm: str, name: str, split: tuple[np.ndarray, ...], rounds: int
) -> list[tuple[str, float, float]]:
    out = []
    for label, acts, grads in SETTINGS:
        try:
            mb, acc = train(algorithm, acts, grads, split, rounds)
        except FedViewsError as exc:  # e.g. fp16 refuses values beyond its range
            print(f"{algorithm:9s} {name:14s} {label:26s} refused: {exc}", flush=True)
            continue
        out.append((label, mb, acc))
        print(
            f"{algorithm:9s} {name:14s} {label:26s} {mb:9.1f} MB/round  accuracy {acc:6.2f} %",
            flush=True,
        )
    return out


def counted(sizes: dict[str, int]) -> str:
    """``2000``, or ``2000 mnist, 1500 fashion_mnist`` where the datasets' counts differ."""
    if len(set(sizes.values())) == 1:
        return str(next(iter(sizes.values())))
    return ", ".join(f"{n} {name}" for name, n in sizes.items())


def tables(results: dict, args: argparse.Namespace, splits: dict) -> list[dict]:
    """One table per algorithm: setting, MB per round (of the first dataset), accuracy per
    dataset (``refused`` where the encoding refused the run)."""
    train = counted({name: len(s[1]) for name, s in splits.items()})
    test = counted({name: len(s[3]) for name, s in splits.items()})
    out = []
    for algorithm in args.algorithms:
        by_name = {
            n: {label: (mb, acc) for label, mb, acc in results[algorithm, n]} for n in args.datasets
        }
        rows = []
        for label, *_ in SETTINGS:
            got = [by_name[n].get(label) for n in args.datasets]
            mb = next((g[0] for g in got if g is not None), float("nan"))
            rows.append([label, mb, *(g[1] if g is not None else "refused" for g in got)])
        unit = "round" if algorithm == "multivfl" else "epoch"
        out.append(
            Table(
                f"{algorithm}: wire encodings, bytes against accuracy",
                ["setting", f"MB per {unit}", *(f"{n} accuracy %" for n in args.datasets)],
                rows,
                f"{train} training images, {args.rounds} {unit}s, {test} test "
                "images; same initialisation and batches for every setting.",
            ).to_dict()
        )
    return out


def plot(results: dict, args: argparse.Namespace, splits: dict) -> None:
    """The figure: a panel per algorithm and dataset, MB per round against accuracy."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ncols = len(args.datasets)
    fig, axes = plt.subplots(
        len(args.algorithms), ncols, figsize=(5 * ncols, 3.6 * len(args.algorithms)), squeeze=False
    )
    for ax, ((algorithm, name), rows) in zip(axes.ravel(), results.items(), strict=True):
        for label, mb, acc in rows:
            ax.scatter(mb, acc, s=36, label=label)
        ax.set_xlabel("MB on the wire per round")
        ax.set_ylabel(f"test accuracy after {args.rounds} rounds (%)")
        ax.set_title(f"{algorithm}, {name}, {len(splits[name][1])} images", fontsize=10)
        ax.grid(alpha=0.3)
    axes.ravel()[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(args.plot, dpi=110)
    print(f"figure: {args.plot}")


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--algorithms", nargs="+", default=list(ALGORITHMS), choices=ALGORITHMS)
    ap.add_argument("--datasets", nargs="+", default=list(DATASETS), choices=DATASETS)
    ap.add_argument("--samples", type=positive_int, default=2000, help="training images")
    ap.add_argument("--eval", type=positive_int, default=1000, help="test images")
    ap.add_argument("--rounds", type=positive_int, default=5, help="rounds (epochs) per run")
    ap.add_argument(
        "--plot",
        type=Path,
        metavar="PATH",
        help="write the figure here (default: none; with --json, wire_codecs_<algorithms>.png "
        "beside the JSON file)",
    )
    json_option(ap)
    args = ap.parse_args()
    if args.plot is None and args.json is not None:
        args.plot = args.json.parent / f"wire_codecs_{'_'.join(args.algorithms)}.png"
    splits = {name: split_of(name, args) for name in args.datasets}
    results = {
        (a, n): run(a, n, splits[n], args.rounds) for a in args.algorithms for n in args.datasets
    }
    title = f"Wire encodings of {', '.join(args.algorithms)}: bytes against accuracy"
    write_record(args.json, title, tables(results, args, splits))
    if args.plot is not None:
        plot(results, args, splits)


if __name__ == "__main__":
    run_cli(main)
