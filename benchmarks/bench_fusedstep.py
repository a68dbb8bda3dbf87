"""The staged parties' optimiser steps of one batch: every optimiser's own ``step()`` against
one multi-tensor step over all of them (``fedviews.deep._fusedstep.step_together``).

The optimisers are those of a run's parties after one epoch (their state created): the split
NN's passive parties (SGD with momentum, ``bench_splitnn.py``'s federation) and Multi-VFL's
data owners (their bottoms as ``bench_multivfl.py`` builds them, with SGD, Multi-VFL's
default local step, and Adam). Each step gets the same small gradients. Prints, per set,
microseconds per batch (the median over ``--repeats`` interleaved timings of ``--batches``
steps) and the saving per batch.

    python benchmarks/bench_fusedstep.py [--batches 2000] [--repeats 5] [--device cpu] [--json PATH]

``--clock cpu`` (the default; ``_clock.py``) times with this process's CPU time and torch on
one thread. ``--json PATH`` also writes the table as a record (``benchmarks/_record.py``).
Run it with ``PYTHONPATH`` at another checkout's ``src`` to compare two versions.
"""

from __future__ import annotations

import statistics
from typing import Any

import numpy as np
import torch
from _args import device_option, parser, positive_int, run_cli
from _clock import clock_option, us_per_call, use_clock
from _record import json_option, write_record
from bench_splitnn import federation

from fedviews.deep._fusedstep import OptimizerStep, step_together
from fedviews.deep.multivfl import build_models


def splitnn_optimizers(device: str) -> list[Any]:
    """The passive parties' SGD optimisers of a 4-party split NN after one epoch on 512
    random strips (their momentum buffers created)."""
    rng = np.random.default_rng(0)
    images, y = rng.random((512, 28, 28), dtype=np.float32), rng.integers(0, 10, 512)
    fed = federation(images, y, 4, 64, device)
    fed()
    passives: list[Any] = [fed.parties[p] for p in ("p0", "p1", "p2")]
    return [p.opt for p in passives]


def multivfl_optimizers(kind: str, device: str) -> list[Any]:
    """Optimisers (``"sgd"`` or ``"adam"``, Multi-VFL's local steps at lr 1e-3) of four data
    owners' bottoms on 7-row strips of 28 x 28 images (not stepped yet)."""
    bottoms, _ = build_models([7, 7, 7, 7], 28, 10, random_state=0)
    opts = []
    for net in bottoms:
        net.to(device)
        opt = (torch.optim.Adam if kind == "adam" else torch.optim.SGD)(net.parameters(), lr=1e-3)
        opts.append(opt)
    return opts


def main() -> None:
    ap = parser(__doc__)
    device_option(ap)
    ap.add_argument("--batches", type=positive_int, default=2000, help="steps per timing")
    ap.add_argument("--repeats", type=positive_int, default=5, help="interleaved timings per set")
    clock_option(ap, default="cpu")
    json_option(ap)
    args = ap.parse_args()
    clock = use_clock(args)
    sets = {
        "split NN, 3 passive parties, SGD momentum 0.9": splitnn_optimizers(args.device),
        "Multi-VFL, 4 data owners, SGD": multivfl_optimizers("sgd", args.device),
        "Multi-VFL, 4 data owners, Adam": multivfl_optimizers("adam", args.device),
    }
    title = (
        f"staged optimiser steps per batch, device {args.device}, torch threads "
        f"{torch.get_num_threads()}, {args.clock} clock, {args.batches} batches x "
        f"{args.repeats} repeats"
    )
    print(title)
    rows = []
    for name, opts in sets.items():
        gen = torch.Generator().manual_seed(0)
        for opt in opts:
            for p in opt.param_groups[0]["params"]:
                p.grad = (torch.randn(p.shape, generator=gen) * 1e-6).to(p.device)
            opt.step()  # the state, as after a first batch

        def own(opts: list[Any] = opts) -> None:
            for opt in opts:
                opt.step()

        def joint(opts: list[Any] = opts) -> None:
            step_together([OptimizerStep(opt) for opt in opts])

        times: dict[str, list[float]] = {"own": [], "joint": []}
        for i in range(args.repeats):  # interleaved, so background load hits both alike
            for k in ("own", "joint") if i % 2 == 0 else ("joint", "own"):
                times[k].append(us_per_call(own if k == "own" else joint, args.batches, clock))
        mine, ours = statistics.median(times["own"]), statistics.median(times["joint"])
        print(
            f"{name:<48}: own step() {mine:7.1f} us, joint {ours:7.1f} us per batch "
            f"(saves {mine - ours:.1f} us, x{ours / mine:.2f})"
        )
        rows.append(
            [name, *(round(v, 2) for v in (mine, ours, mine - ours)), round(ours / mine, 3)]
        )
    columns = ["optimisers", "own step() µs", "joint µs", "saved µs", "joint ÷ own"]
    note = f"µs per batch: medians of {args.repeats} interleaved timings of {args.batches} steps"
    table = {"title": title, "columns": columns, "rows": rows, "note": note}
    write_record(args.json, title, [table], args.device)


if __name__ == "__main__":
    run_cli(main)
