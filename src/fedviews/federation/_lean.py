"""The in-process transport's lean hand-over: a message's checks done once per signature.

A run sends the same few messages over and over (a split NN batch: the same kinds, parties,
array names, dtypes and shapes, only the round and the values change). The first message of
a *signature* (its kind, sender, receiver, and every array's name, type, dtype, shape and
layout; an empty meta table) goes through every check of the hand-over (``_transport``,
``_handover``: the receiver, the policy at the sender and the receiver, the header as
decoding checks it, the arrays' dtypes, the bytes its encoding takes); a later one of the
same signature passes every one of them by construction, so it is handed over with one dict
lookup: copied (detached, contiguous), its floating-point tensors queued for the deferred
finiteness checks, its log entry the one of its signature and round. A message of another
signature (a different shape, dtype, name, sender, any meta, a type other than a plain
``str`` kind and names, ``int`` round, ``torch.Tensor`` or ``np.ndarray`` array) misses and
is checked in full.
"""

from __future__ import annotations

import sys
from collections.abc import Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from fedviews.federation._log import LogEntry
from fedviews.federation._message import MAX_ROUND, Header, Message, _little

if TYPE_CHECKING:
    import torch

    from fedviews.federation._party import Party

#: the signatures a transport remembers (a peer's made-up ones cannot grow it beyond)
MAX_LANES = 4096


@dataclass
class Lane:
    """What the messages of one signature have in common once the first one passed: its
    receiver (hosted here, or ``None``), its plain kind and parties, its arrays (name, whether
    a tensor, the numpy dtype an array is copied as), the names of its floating-point tensors,
    the bytes of its encoding but the round's digits, and the log entry of the last round."""

    party: Party | None
    kind: str
    sender: str
    receiver: str
    arrays: tuple[tuple[str, bool, Any], ...]
    finite: frozenset[str]
    names: tuple[str, ...]
    shapes: tuple[tuple[int, ...], ...]
    fixed: int
    entry: LogEntry | None = None

    def log_entry(self, rnd: int) -> LogEntry:
        """The log entry of this signature's message of round ``rnd``."""
        entry = self.entry
        if entry is None or entry.round != rnd:
            entry = self.entry = LogEntry(
                self.sender,
                self.receiver,
                rnd,
                self.kind,
                self.names,
                self.shapes,
                self.fixed + len(str(rnd)),
            )
        return entry


def signature(msg: Message) -> tuple[Any, ...] | None:
    """The signature of ``msg`` (see the module), or ``None`` for a message that has none
    (meta, a round out of range or not an ``int``, an array neither a tensor nor a numpy
    array): those are always checked in full."""
    rnd = msg.round
    if msg.meta or type(rnd) is not int or not 0 <= rnd <= MAX_ROUND:
        return None
    torch = sys.modules.get("torch")
    tensor = None if torch is None else torch.Tensor
    key: list[Any] = [msg.kind, msg.sender, msg.receiver]
    for name, a in msg.arrays.items():
        t = type(a)
        if t is tensor:
            key.append((name, t, a.dtype, a.shape, a.layout))
        elif t is np.ndarray:
            key.append((name, t, a.dtype, a.shape))
        else:
            return None
    return tuple(key)


def lane_of(
    msg: Message, party: Party | None, head: Header, wire_bytes: int, floats: Collection[str]
) -> Lane | None:
    """The lane of ``msg``, a message that passed every check in full (its ``head``, its
    encoding's length ``wire_bytes`` and the names of its floating-point tensors), or
    ``None`` if its messages cannot take one (a kind, party or array name not a plain
    ``str``)."""
    plain = (msg.kind, msg.sender, msg.receiver, *msg.arrays)
    if any(type(s) is not str for s in plain) or head.meta:
        return None
    arrays = tuple(
        (name, type(a) is not np.ndarray, _little(a.dtype) if type(a) is np.ndarray else None)
        for name, a in msg.arrays.items()
    )
    return Lane(
        party,
        head.kind,
        head.sender,
        head.receiver,
        arrays,
        frozenset(floats),
        head.names,
        head.shapes,
        wire_bytes - len(str(msg.round)),
    )


def take(lane: Lane, msg: Message) -> tuple[Message, dict[str, torch.Tensor]]:
    """``msg`` (of ``lane``'s signature) as its receiver gets it, and its floating-point
    tensors by name (the receiver's copies, for the deferred finiteness checks)."""
    contiguous = sys.modules["torch"].contiguous_format if "torch" in sys.modules else None
    arrays: dict[str, Any] = {}
    floats: dict[str, torch.Tensor] = {}
    finite = lane.finite
    for (name, tensor, dtype), a in zip(lane.arrays, msg.arrays.values(), strict=True):
        if tensor:
            if a.requires_grad:  # (one without a graph needs no detaching: one op less)
                a = a.detach()
            a = arrays[name] = a.clone(memory_format=contiguous)
            if name in finite:
                floats[name] = a
        else:
            arrays[name] = np.array(a, dtype=dtype, order="C")
    fields: dict[str, Any] = {
        "kind": lane.kind,
        "sender": lane.sender,
        "receiver": lane.receiver,
        "round": msg.round,
        "arrays": arrays,
        "meta": {},
    }
    if floats:  # (their finiteness is the transport's check: :meth:`Message.tensor` skips it)
        fields["_finite"] = finite
    got = object.__new__(Message)
    object.__setattr__(got, "__dict__", fields)
    return got, floats
