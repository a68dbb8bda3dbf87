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

    python benchmarks/bench_handover.py [--device cpu] [--messages 20000] [--repeats 5] [--json PATH]

``--clock cpu`` (the default; ``_clock.py``) times with this process's CPU time and torch on
one thread. ``--json PATH`` also writes the table as a record (``benchmarks/_record.py``).
Run it with ``PYTHONPATH`` at another checkout's ``src`` to compare two versions.
"""

from __future__ import annotations

import statistics
from functools import partial

import torch
from _args import device_option, parser, positive_int, run_cli
from _clock import clock_option, us_per_call, use_clock
from _record import json_option, write_record

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


def main() -> None:
    ap = parser(__doc__)
    device_option(ap)
    ap.add_argument("--messages", type=positive_int, default=20000, help="messages per timing")
    ap.add_argument("--repeats", type=positive_int, default=5, help="interleaved timings per shape")
    clock_option(ap, default="cpu")
    json_option(ap)
    args = ap.parse_args()
    clock = use_clock(args)
    policy = PrivacyPolicy.of("pass", {("party", "party"): ["h"]})
    transport = InProcessTransport(policy, keep_entries=False)
    federate([Party("a"), Party("b")], policy, transport)
    title = (
        f"in-process hand-over, device {args.device}, torch threads {torch.get_num_threads()}, "
        f"{args.clock} clock, {args.messages} messages x {args.repeats} repeats"
    )
    print(title)
    rows = []
    lending.LEND_MIN_BYTES = 0  # (every lent tensor handed over as an alias, to time it)
    for shape in SHAPES:
        t = torch.randn(shape, device=args.device)
        msg = Message("pass", "a", "b", arrays={"h": t})
        lent = Message("pass", "a", "b", arrays={"h": lend(t.clone())})

        def hand_over(msg: Message = msg) -> Message:
            transport.check_send(msg)
            return transport._hand_over(msg)

        def clone(t: torch.Tensor = t) -> torch.Tensor:
            return t.detach().clone()

        sync = torch.cuda.synchronize if t.is_cuda else (lambda: None)
        runs = []
        for _ in range(args.repeats):  # interleaved: the machine's load hits all alike
            h = us_per_call(hand_over, args.messages, clock)
            sync()
            c = us_per_call(clone, args.messages, clock)
            sync()
            n = us_per_call(partial(hand_over, lent), args.messages, clock)
            sync()
            transport.lends.settle()  # (what a request's end does: forgets the dead aliases)
            runs.append((h, c, n))
        h_us, c_us, n_us = (statistics.median(r[i] for r in runs) for i in range(3))
        ratio = statistics.median(h / c for h, c, _ in runs)
        print(
            f"{str(shape):<16}: {h_us:7.1f} us/message, clone {c_us:6.1f} us, "
            f"ratio {ratio:5.2f}; lent {n_us:6.1f} us/message"
        )
        rows.append([str(shape), round(h_us, 2), round(c_us, 2), round(ratio, 3), round(n_us, 2)])
    columns = ["shape", "µs / message", "clone µs", "× clone (median)", "lent µs / message"]
    note = f"medians of {args.repeats} interleaved timings of {args.messages} messages"
    table = {"title": title, "columns": columns, "rows": rows, "note": note}
    write_record(args.json, title, [table], args.device)


if __name__ == "__main__":
    run_cli(main)
