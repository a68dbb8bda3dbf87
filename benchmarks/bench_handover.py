"""The fixed cost of one in-process message: microseconds per tensor handed over by the
in-process transport, against a plain ``t.detach().clone()`` of the same tensor.

One message is what a split-learning batch sends per party: one float32 tensor, sent by
``a`` to ``b`` through the transport's hand-over (the sender's and the receiver's policy
checks, the copy, the finiteness check, the header and its byte count, the log record),
without a handler. Prints, per shape, the median over ``--repeats`` timings of
``--messages`` messages, and its ratio to the clone (the copy a hand-over makes); and the
same tensor lent (``fedviews.federation.lend``: handed over as a read-only alias, whatever
its size here, with its version recorded and checked), which is what sets the size from
which a lent tensor is handed over without a copy (``_lend.LEND_MIN_BYTES``).

    python benchmarks/bench_handover.py [--device cpu] [--messages 20000] [--repeats 5]

Run it with ``PYTHONPATH`` at another checkout's ``src`` to compare two versions.
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable
from functools import partial

import torch
from _clock import CLOCKS

import fedviews.federation._lend as lending
from fedviews.federation import (
    InProcessTransport,
    Message,
    Party,
    PrivacyPolicy,
    federate,
    lend,
)

#: (batch rows, features): an activation batch, a 10-class logit batch, an image strip batch,
#: a Multi-VFL activation batch (1.6 MB)
SHAPES = [(64, 256), (64, 10), (64, 1, 7, 28), (64, 32, 7, 28)]


def per_message(fn: Callable[[], object], n: int, clock: Callable[[], float]) -> float:
    """Microseconds per call of ``fn`` over ``n`` calls."""
    t0 = clock()
    for _ in range(n):
        fn()
    return (clock() - t0) / n * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--messages", type=int, default=20000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--clock", choices=sorted(CLOCKS), default="cpu")
    args = ap.parse_args()
    clock = CLOCKS[args.clock]
    policy = PrivacyPolicy.of("pass", {("party", "party"): ["h"]})
    transport = InProcessTransport(policy, keep_entries=False)
    federate([Party("a"), Party("b")], policy, transport)
    print(
        f"in-process hand-over, device {args.device}, torch threads {torch.get_num_threads()}, "
        f"{args.clock} clock, {args.messages} messages x {args.repeats} repeats"
    )
    lending.LEND_MIN_BYTES = 0  # (every lent tensor handed over as an alias, to time it)
    for shape in SHAPES:
        t = torch.randn(shape, device=args.device)
        msg = Message("pass", "a", "b", arrays={"h": t})
        lent = Message("pass", "a", "b", arrays={"h": lend(t.clone())})

        def hand_over(msg: Message = msg) -> Message:
            transport._check_send(msg)
            return transport._hand_over(msg)

        def clone(t: torch.Tensor = t) -> torch.Tensor:
            return t.detach().clone()

        sync = torch.cuda.synchronize if t.is_cuda else (lambda: None)
        runs = []
        for _ in range(args.repeats):  # interleaved: the machine's load hits all alike
            h = per_message(hand_over, args.messages, clock)
            sync()
            c = per_message(clone, args.messages, clock)
            sync()
            n = per_message(partial(hand_over, lent), args.messages, clock)
            sync()
            transport.lends.settle()  # (what a request's end does: forgets the dead aliases)
            runs.append((h, c, n))
        h_us, c_us, n_us = (statistics.median(r[i] for r in runs) for i in range(3))
        print(
            f"{str(shape):<16}: {h_us:7.1f} us/message, clone {c_us:6.1f} us, "
            f"ratio {statistics.median(h / c for h, c, _ in runs):5.2f}; "
            f"lent {n_us:6.1f} us/message"
        )


if __name__ == "__main__":
    main()
