"""The in-process transport's lean hand-over: a message's checks done once per signature.

A run sends the same few messages over and over (a split NN batch: the same kinds, parties,
array names, dtypes and shapes, only the round and the values change). The first message of
a *signature* (its kind, sender, receiver, meta keys, and every array's name, type, dtype,
shape and layout) goes through every check of the hand-over (``_transport``,
``_handover``: the receiver, the policy at the sender and the receiver, the header as
decoding checks it, the arrays' dtypes, the bytes its encoding takes); a later one of the
same signature passes every one of them by construction, so it is handed over with one dict
lookup: copied (detached, contiguous), its floating-point tensors queued for the deferred
finiteness checks, its meta values checked plain (their JSON's length counted), its log entry
the one of its signature, round and size. A message of another signature (a different
shape, dtype, name, sender, meta key, a type other than a plain ``str`` kind, names and
meta keys, ``int`` round, ``torch.Tensor`` or ``np.ndarray`` array) misses and is checked
in full; so is one whose meta values are not plain.
"""

from __future__ import annotations

import sys
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from fedviews.federation._handover import _meta_length
from fedviews.federation._lend import received
from fedviews.federation._log import LogEntry
from fedviews.federation._message import MAX_ROUND, Header, Message, _little
from fedviews.federation._tensors import refuse_not_finite

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
    its meta keys, the bytes of its encoding but the round's digits and the meta table's JSON,
    and the log entry of the last message."""

    party: Party | None
    kind: str
    sender: str
    receiver: str
    arrays: tuple[tuple[str, bool, Any], ...]
    finite: frozenset[str]
    names: tuple[str, ...]
    shapes: tuple[tuple[int, ...], ...]
    meta: tuple[str, ...]
    fixed: int
    entry: LogEntry | None = None

    def log_entry(self, rnd: int, nbytes: int) -> LogEntry:
        """The log entry of this signature's message of round ``rnd`` and ``nbytes`` bytes."""
        entry = LogEntry(
            self.sender, self.receiver, rnd, self.kind, self.names, self.shapes, nbytes, self.meta
        )
        self.entry = entry
        return entry


def signature(msg: Message) -> tuple[Any, ...] | None:
    """The signature of ``msg`` (see the module), or ``None`` for a message that has none
    (a round out of range or not an ``int``, an array neither a tensor nor a numpy array):
    those are always checked in full."""
    rnd = msg.round
    if type(rnd) is not int or not 0 <= rnd <= MAX_ROUND:
        return None
    torch = sys.modules.get("torch")
    tensor = None if torch is None else torch.Tensor
    key: list[Any] = [msg.kind, msg.sender, msg.receiver, tuple(msg.meta) if msg.meta else ()]
    carried: Mapping[str, Any] = msg.arrays  # (tensors or numpy arrays, told apart by type)
    for name, a in carried.items():
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
    meta = _meta_length(msg.meta)
    if any(type(s) is not str for s in plain) or meta is None:
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
        head.meta,
        wire_bytes - len(str(msg.round)) - meta,
    )


def take(
    lane: Lane, msg: Message, lent: list[tuple[str, torch.Tensor]]
) -> tuple[Message, dict[str, torch.Tensor], LogEntry] | None:
    """``msg`` (of ``lane``'s signature) as its receiver gets it, its floating-point tensors
    by name (the receiver's copies, for the deferred finiteness checks) and its log entry;
    ``None`` for a meta value not plain (see :func:`hand_over`): checked in full. A tensor
    its sender lent is handed over as an alias and appended to ``lent`` (``_lend``)."""
    meta = msg.meta
    length = _meta_length(meta) if meta else 2
    if length is None:
        return None
    arrays: dict[str, Any] = {}
    floats: dict[str, torch.Tensor] = {}
    finite = lane.finite
    carried: Mapping[str, Any] = msg.arrays
    numpy = False
    for (name, tensor, dtype), a in zip(lane.arrays, carried.values(), strict=True):
        if tensor:
            a = arrays[name] = received(a, name, lent)
            if name in finite:
                floats[name] = a
        else:
            arrays[name] = np.array(a, dtype=dtype, order="C")
            numpy = True
    if numpy:  # (refused at once; its tensors' finiteness is deferred)
        refuse_not_finite(lane.sender, lane.kind, arrays, msg.sender_blame())
    rnd = msg.round
    fields: dict[str, Any] = {
        "kind": lane.kind,
        "sender": lane.sender,
        "receiver": lane.receiver,
        "round": rnd,
        "arrays": arrays,
        "meta": dict(meta) if meta else {},
    }
    if floats:  # (their finiteness is the transport's check: :meth:`Message.tensor` skips it)
        fields["_finite"] = finite
    blame = msg.sender_blame()
    if blame is not None:  # (for the deferred check: see Message.sender_blame)
        fields["_blame"] = blame
    got = object.__new__(Message)
    object.__setattr__(got, "__dict__", fields)
    nbytes = lane.fixed + len(str(rnd)) + length
    entry = lane.entry
    if entry is None or entry.round != rnd or entry.nbytes != nbytes:
        entry = lane.log_entry(rnd, nbytes)
    return got, floats, entry
