"""The cost of each Multi-VFL defense beside the plain run, in one process.

MNIST, 4 data owners (7-row strips), 2 label owners, ``--images`` training images (MNIST's
training split holds 8,000: a larger number uses them all, said on stderr), ``--rounds``
rounds of one local epoch; every defense fitted after the plain run, alternately,
``--repeat`` times after one untimed pass (this machine is noisy: read the ratio of
medians). Bytes are the message log's totals. ``grad_dp`` and ``act_dp`` compute per-sample gradients (``torch.func``), which
is where their time goes. ``--clock cpu`` (the default; ``_clock.py``) times each fit with this
process's CPU time and torch on one thread, so that other jobs on a shared machine stay out of
the ratios (every party runs in this process); ``--clock wall`` for the wall clock.

    python benchmarks/bench_defenses.py [--images 2000] [--rounds 3] [--repeat 2] [--clock cpu]
                                        [--json PATH]

``--json PATH`` also writes the table as a record (``benchmarks/_record.py``), whose
``tables`` ``fedviews reproduce defenses_cost_multivfl`` reads. Needs the ``privacy`` extra
(``label_rr``, ``grad_dp``).
"""

from __future__ import annotations

import numpy as np
import torch
from _args import capped, parser, positive_int, run_cli
from _clock import clock_option, use_clock
from _record import json_option, write_record

from fedviews import data
from fedviews.deep.multivfl import MultiVFL
from fedviews.errors import require
from fedviews.experiments import Table

DEFENSES = {
    "none": None,
    "secagg": "secagg",
    "label_rr": {"kind": "label_rr", "epsilon": 2.0},
    "grad_dp": {"kind": "grad_dp", "epsilon": 8.0, "clip": 1.0},
    "act_dp": {"kind": "act_dp", "epsilon": 1e4, "clip": 5.0},
}


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--images", type=positive_int, default=2000, help="MNIST training images")
    ap.add_argument("--rounds", type=positive_int, default=3)
    ap.add_argument("--repeat", type=positive_int, default=2, help="alternating runs of each")
    clock_option(ap, default="cpu")
    json_option(ap)
    args = ap.parse_args()
    require("dp_accounting", "privacy")  # label_rr, grad_dp: before any fit
    clock = use_clock(args)  # cpu: CPU time of one thread, no idle spinning counted
    Xtr, ytr, *_ = data.image_split("mnist", {}, 0, 0.2)  # MNIST: a stratified fifth
    n = capped(args.images, len(ytr), "MNIST's training split", "--images")
    take = np.random.default_rng(0).permutation(len(ytr))[:n]
    X, y = Xtr[take], ytr[take]
    halves = np.array_split(np.arange(len(y)), 2)  # the two label owners' samples
    times: dict[str, list[float]] = {k: [] for k in DEFENSES}
    stats: dict[str, dict] = {}
    for rep in range(args.repeat + 1):  # the first pass warms up (torch, allocators): not timed
        for name, defense in DEFENSES.items():
            t = clock()
            est = MultiVFL(
                n_data_owners=4, n_label_owners=2, rounds=args.rounds, lr=1e-3,
                local_optimizer="adam", device="cpu", defense=defense,
            ).fit(X, y, label_owner_ids=halves)  # fmt: skip
            if rep:
                times[name].append(clock() - t)
            stats[name] = est.run_stats_
    base_t = float(np.median(times["none"]))
    base_b = stats["none"]["total_bytes"]
    print("| defense | seconds | time ratio | MB | bytes ratio |")
    print("|---|---|---|---|---|")
    rows = []
    for name in DEFENSES:
        t, b = float(np.median(times[name])), stats[name]["total_bytes"]
        rows.append([name, t, t / base_t, b / 1e6, f"{b / base_b:.3f}"])
        print(f"| {name} | {t:.2f} | {t / base_t:.2f} | {b / 1e6:.1f} | {b / base_b:.3f} |")
    table = Table(
        f"Multi-VFL defenses: cost beside the plain run ({args.rounds} rounds)",
        ["defense", "seconds", "time ratio", "MB", "bytes ratio"],
        rows,
        f"MNIST, {n} images, 4 data owners, 2 label owners, Adam local step; "
        f"median of {args.repeat} alternating runs in one process after an untimed pass; "
        f"{args.clock} clock, torch threads {torch.get_num_threads()}.",
    )
    write_record(args.json, table.title, [table.to_dict()])


if __name__ == "__main__":
    run_cli(main)
