"""Split NN runtime overhead: one federated epoch vs a plain single-process PyTorch loop.

Both train the same networks (every party's bottom MLP with the initial weights of the
federated run, their logits summed) on the same MNIST batches with the same SGD; the
federated run goes through the in-process transport (privacy check, message log, wire
bytes counted; logits and their gradients handed over as tensors on the device, the
passive parties' backward passes run as one). Prints the time ratio, the median over the
interleaved pairs of runs (goal <= 1.1 on a CPU, <= 1.3 on a GPU).

It also times the same split as a hand-written loop without messages (every party's own
SGD, the logits cloned at the cut, one backward pass for the passive parties, every party's
optimiser stepping as one, as in the federated epoch): what any split of these networks
costs; the federated epoch's time beyond it is the runtime's.

    python benchmarks/bench_splitnn.py [--samples 5000] [--parties 4] [--repeats 3] [--device cpu]
    python benchmarks/bench_splitnn.py --clock cpu --profile 30   # CPU seconds; + where they go

The federated epoch is the label owner's ``splitnn.train`` handler (every passive party's
handler runs inside it), timed with ``--clock`` (``_clock.py``; ``cpu``: torch on one
thread); the plain loop, its loop. MNIST holds 10,000 images: a larger ``--samples`` uses
them all (said on stderr).
"""

from __future__ import annotations

import copy
import cProfile
import pstats
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from _args import capped, int_at_least, parser, positive_int, run_cli
from _clock import cpu_of, print_ratio, ratio_options, use_clock, warm_rounds
from _record import json_option, ratio_table, write_record

from fedviews import data
from fedviews.data import PartyData
from fedviews.deep._common import as_strips, device_batches
from fedviews.deep._fusedstep import step_optimizers
from fedviews.deep.splitnn.parties import SplitNNActive
from fedviews.deep.splitnn.spec import SplitNNParams, epoch_seed
from fedviews.federation import (
    InProcessRun,
    InProcessTransport,
    Roster,
    RunSpec,
    build_in_process,
)


def federation(
    images: np.ndarray,
    y: np.ndarray,
    parties: int,
    batch_size: int,
    device: str,
    batch_backward: bool = True,
) -> InProcessRun:
    """A one-epoch split NN run of ``parties`` (the last one the label owner), each holding a
    horizontal strip of the images (``batch_backward=False``: one backward pass per passive
    party instead of one for them all)."""
    names = [f"p{i}" for i in range(parties - 1)] + ["a"]
    ids = np.arange(len(y))
    strips = np.array_split(images, parties, axis=1)
    datas = {n: PartyData(ids, s) for n, s in zip(names, strips, strict=True)}
    datas["a"] = PartyData(ids, strips[-1], y)
    params = SplitNNParams(epochs=1, batch_size=batch_size, evaluate=False, device=device)
    run = RunSpec("splitnn", params, Roster(tuple(names), label_owner="a"))
    return build_in_process(
        run, datas, transport=lambda p: InProcessTransport(p, batch_backward=batch_backward)
    )


def plain_epoch(fed: InProcessRun, clock: Callable[[], float]) -> float:
    """Seconds of the unsplit loop of ``fed``'s networks (as initialised) on its batches."""
    active = fed.parties["a"]
    assert isinstance(active, SplitNNActive)
    parties: list[Any] = [*(fed.parties[p] for p in active.passives), active]
    nets = [copy.deepcopy(p.net) for p in parties]
    xs = [p._X for p in parties]  # every party's strip as its network takes it
    yt, p = active.y, fed.run.params
    opt = torch.optim.SGD(
        [q for net in nets for q in net.parameters()],
        lr=p.lr,
        momentum=p.momentum,
        weight_decay=p.weight_decay,
    )
    t0 = clock()
    rng = np.random.default_rng(epoch_seed(fed.run.seed, 1))
    for idx in device_batches(len(yt), p.batch_size, rng, active.device):
        z = nets[-1](xs[-1].index_select(0, idx))
        for net, x in zip(nets[:-1], xs[:-1], strict=True):
            z = z + net(x.index_select(0, idx))
        loss = torch.nn.functional.cross_entropy(z, yt.index_select(0, idx))
        opt.zero_grad()
        loss.backward()
        opt.step()
    if str(active.device).startswith("cuda"):
        torch.cuda.synchronize()
    return clock() - t0


def split_epoch(fed: InProcessRun, clock: Callable[[], float]) -> float:
    """Seconds of ``fed``'s split as a hand-written loop without messages: every party's own
    SGD, the logits cloned at the cut, the passive parties' backward passes as one, the
    optimisers' steps as one (what the federated epoch computes; the rest of its time is the
    runtime's)."""
    active = fed.parties["a"]
    assert isinstance(active, SplitNNActive)
    parties: list[Any] = [*(fed.parties[p] for p in active.passives), active]
    nets = [copy.deepcopy(p.net) for p in parties]
    xs, yt, p = [q._X for q in parties], active.y, fed.run.params
    sgd = {"lr": p.lr, "momentum": p.momentum, "weight_decay": p.weight_decay}
    opts = [torch.optim.SGD(net.parameters(), **sgd) for net in nets]
    t0 = clock()
    rng = np.random.default_rng(epoch_seed(fed.run.seed, 1))
    for idx in device_batches(len(yt), p.batch_size, rng, active.device):
        outs = [net(x.index_select(0, idx)) for net, x in zip(nets[:-1], xs[:-1], strict=True)]
        cut = [o.detach().clone().requires_grad_(True) for o in outs]
        loss = torch.nn.functional.cross_entropy(
            nets[-1](xs[-1].index_select(0, idx)) + sum(cut), yt.index_select(0, idx)
        )
        for opt in opts:
            opt.zero_grad()
        loss.backward()
        torch.autograd.backward(outs, [c.grad.clone() for c in cut])
        step_optimizers(opts)
    if str(active.device).startswith("cuda"):
        torch.cuda.synchronize()
    return clock() - t0


def federated_epoch(fed: InProcessRun, clock: Callable[[], float]) -> float:
    """Seconds of ``fed``'s epoch (the label owner's ``splitnn.train``)."""
    with cpu_of(SplitNNActive, "on_train", clock) as seconds:
        fed()
    return seconds[0]


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument(
        "--samples", type=positive_int, default=5000, help="MNIST images (at most 10,000)"
    )
    ap.add_argument(
        "--parties", type=int_at_least(2), default=4, help="parties, the label owner included"
    )
    ap.add_argument("--batch-size", type=positive_int, default=64)
    ap.add_argument("--repeats", type=positive_int, default=3, help="interleaved rounds of runs")
    ratio_options(ap, "passive party")
    json_option(ap)
    args = ap.parse_args()
    clock = use_clock(args)
    ds = data.load("mnist")
    assert ds.images is not None  # an image dataset
    n = capped(args.samples, len(ds.y), "MNIST")
    images, y = ds.images[:n], ds.y[:n]

    def runs() -> tuple[float, float, float, float]:
        """Plain, split-loop, federated and (``--one-backward-each``) unbatched seconds, in
        turn."""
        fed = federation(images, y, args.parties, args.batch_size, args.device)
        plain = plain_epoch(fed, clock)  # before fed() trains the networks it copies
        split = split_epoch(fed, clock)
        each = 0.0
        if args.one_backward_each:
            unbatched = federation(images, y, args.parties, args.batch_size, args.device, False)
            each = federated_epoch(unbatched, clock)
        return plain, split, federated_epoch(fed, clock), each

    timings = warm_rounds(runs, args.repeats)  # interleaved: load hits all alike
    plain_t, split_t, fed_t, each_t = (list(t) for t in zip(*timings, strict=True))
    shape: Any = as_strips(np.array_split(images[:1], args.parties, axis=1)[0]).shape[1:]
    print(
        f"split NN, {args.parties} parties (strips {tuple(shape)}), {len(y)} samples, batch "
        f"{args.batch_size}, device {args.device}, torch threads {torch.get_num_threads()}, "
        f"{args.clock} clock"
    )
    print(
        f"plain loop      : {min(plain_t):8.3f} s/epoch  (runs {', '.join(f'{t:.3f}' for t in plain_t)})"
    )
    print(
        f"split NN        : {min(fed_t):8.3f} s/epoch  (runs {', '.join(f'{t:.3f}' for t in fed_t)})"
    )
    print_ratio("ratio", fed_t, plain_t)
    print(
        f"split loop, no messages: {min(split_t):.3f} s/epoch  "
        f"(runs {', '.join(f'{t:.3f}' for t in split_t)})"
    )
    print_ratio("ratio, split loop", split_t, plain_t)
    if args.one_backward_each:
        print(
            f"one backward per passive party: {min(each_t):.3f} s/epoch  "
            f"(runs {', '.join(f'{t:.3f}' for t in each_t)})"
        )
        print_ratio("ratio, unbatched", each_t, plain_t)
    if args.profile:
        fed = federation(images, y, args.parties, args.batch_size, args.device)
        prof = cProfile.Profile()
        prof.enable()
        fed()
        prof.disable()
        print(f"\none more federated epoch, profiled ({args.profile} costliest by own time):")
        pstats.Stats(prof).sort_stats("tottime").print_stats(args.profile)
    measured = {"split NN, in-process": fed_t, "split loop, no messages": split_t} | (
        {"one backward per passive party": each_t} if args.one_backward_each else {}
    )
    title = (
        f"split NN epoch: {args.parties} parties (strips {tuple(shape)}), {len(y)} MNIST samples, "
        f"batch {args.batch_size}, device {args.device}, torch threads {torch.get_num_threads()}, "
        f"{args.clock} clock"
    )
    write_record(args.json, title, [ratio_table(title, plain_t, measured)], args.device)


if __name__ == "__main__":
    run_cli(main)
