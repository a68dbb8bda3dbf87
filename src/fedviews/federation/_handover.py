"""A message handed over in one process (:func:`hand_over`): what decoding its encoding would
give, without the encoding; and the finiteness checks of its tensors, deferred
(:class:`FiniteChecks`)."""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import numpy as np

from fedviews.errors import ProtocolError
from fedviews.federation._message import (
    MAX_ROUND,
    Header,
    Message,
    _little,
    _spec,
    check_meta,
    not_finite,
    prefix,
    read_header,
)
from fedviews.federation._tensors import (
    Array,
    check_array,
    first_not_finite,
    is_tensor,
    numpy_dtype,
)

if TYPE_CHECKING:
    import torch

#: the types of a plain header value: what its JSON round trip gives back as it was
_PLAIN = (str, int, float, bool, type(None))
_PLAIN_TYPES, _STR = frozenset(_PLAIN), frozenset([str])


@dataclass(frozen=True)
class _Pending:
    """A floating-point tensor handed over, its finiteness not read yet: it is finite exactly
    when every one of its ``probes`` (on its device) is."""

    probes: tuple[torch.Tensor, ...]
    sender: str
    kind: str
    name: str


class FiniteChecks:
    """The finiteness checks of the floating-point tensors handed over in one process,
    deferred: a tensor on an accelerator gets one reduction on its device when it is handed
    over (no host synchronisation), and :meth:`settle` reads them all at once (one
    synchronisation per device), refusing the first tensor that holds NaN or infinities as
    its sender's (a :class:`ProtocolError` names the sender and the array). After ``limit``
    tensors the checks settle themselves.

    On an accelerator the reduction is a sum in float64 (float64 tensors: ``torch.aminmax``),
    finite exactly when every value is: no sum of float32 (or narrower) values overflows
    float64, and a NaN or an infinity makes a sum, a minimum or a maximum one too. A CPU
    tensor is read at once, where reading it synchronises nothing (by the sum trick of
    :func:`first_not_finite`, cheaper there than a minimum and a maximum), and one that is
    not finite is refused at the same points as the others, in the order they came.

    The checks are per thread: a thread settles the tensors handed over by its own requests
    (in one process a handler runs in the thread of the request it answers), so threads
    that share a transport neither settle nor are refused for each other's tensors. A
    refusal is kept until the thread's outermost request ends (:meth:`settle` with
    ``outermost``): every settle until then raises it again, so a handler that swallows it
    does not make the NaN be forgotten.
    """

    def __init__(self, limit: int = 256) -> None:
        self.limit = limit
        self._threads = threading.local()  # each thread's _Queue (.queue)

    def _queue(self) -> _Queue:
        """This thread's queue."""
        queue: _Queue | None = getattr(self._threads, "queue", None)
        if queue is None:
            queue = self._threads.queue = _Queue()
        return queue

    def add(self, msg: Message, tensors: Mapping[str, torch.Tensor]) -> None:
        """Queue the floating-point ``tensors`` of ``msg`` (handed over, by name)."""
        torch = sys.modules["torch"]
        queue = self._queue()
        for name, t in tensors.items():
            if not t.numel():  # (no values: none to check, and no minimum)
                continue
            if t.device.type != "cpu":
                wide = t.element_size() > 4
                probes = tuple(torch.aminmax(t)) if wide else (t.sum(dtype=torch.float64),)
            elif first_not_finite({name: t}) is None:
                continue
            else:
                probes = (t.sum(),)  # NaN or infinite, as a sum of a NaN or an infinity is
            queue.pending.append(_Pending(probes, msg.sender, msg.kind, name))
        queue.since += len(tensors)
        if queue.since >= self.limit:
            self.settle()

    def settle(self, cause: BaseException | None = None, *, outermost: bool = False) -> None:
        """Check every tensor this thread queued (then forget them): the first one that is not
        finite is refused, naming its sender (from ``cause``, the failure that made its
        receiver stop where one did: the NaN's consequence, never blamed on its victim). A
        refusal made before in this thread is raised again, until ``outermost`` (the
        thread's outermost request ends) forgets it."""
        queue = self._queue()
        pending, queue.pending, queue.since = queue.pending, [], 0
        refused = queue.refused
        if refused is None and (refused := _refusal(pending)) is not None:
            refused.__cause__ = cause  # (as ``raise refused from cause``, kept when raised again)
        queue.refused = None if outermost else refused
        if refused is not None:
            raise refused


@dataclass
class _Queue:
    """One thread's deferred checks: the tensors queued, how many were handed over since the
    checks last settled, and the refusal that its outermost request has not raised yet."""

    pending: list[_Pending] = field(default_factory=list)
    since: int = 0
    refused: ProtocolError | None = None


def _refusal(pending: list[_Pending]) -> ProtocolError | None:
    """The refusal of the first of ``pending`` that is not finite (one host synchronisation
    per device), or ``None``."""
    by_device: dict[Any, list[int]] = {}
    for i, p in enumerate(pending):
        by_device.setdefault(p.probes[0].device, []).append(i)
    bad = []
    for idx in by_device.values():  # (of several dtypes: stacked as the widest)
        owners = [i for i in idx for _ in pending[i].probes]
        probes = [x for i in idx for x in pending[i].probes]
        finite = sys.modules["torch"].stack(probes).isfinite()
        if not bool(finite.all()):  # the one host synchronisation (per device)
            bad += [i for i, ok in zip(owners, finite.tolist(), strict=True) if not ok]
    if not bad:
        return None
    first = pending[min(bad)]
    refused = not_finite(first.sender, first.kind, first.name)
    refused.__suppress_context__ = True
    return refused


def hand_over(msg: Message, checks: FiniteChecks) -> tuple[Message, Header, int]:
    """``msg`` as its receiver in the same process gets it, its header and the bytes its
    encoding takes (``len(msg.encode())``, without encoding its arrays).

    What the receiver gets is what :meth:`Message.decode` of the encoding would give,
    without the host round trip: the header checked as decoding checks it, numpy arrays
    copied, and tensors as detached copies on their device (contiguous), so the receiver
    shares neither memory nor an autograd graph with the sender and may write into what it
    got. The floating-point tensors are checked finite by ``checks`` (deferred to its
    :meth:`FiniteChecks.settle`, where a :class:`ProtocolError` names the sender of a NaN
    or an infinity).

    A header of plain values (strings, an ``int`` round, meta of :data:`_PLAIN` values
    under string keys) is checked as it is, its encoding's length counted from the JSON of
    its parts (cached per kind, parties and array specs); any other goes through its JSON,
    as decoding reads it.
    """
    arrays: dict[str, Array] = {}
    floats: dict[str, torch.Tensor] = {}
    keys = []
    for name, a in msg.arrays.items():
        a = check_array(name, a)  # as decoding the message checks its arrays
        if is_tensor(a):
            dtype = numpy_dtype(a)
            t = a.detach().clone(memory_format=sys.modules["torch"].contiguous_format)
            arrays[name] = t
            if dtype.kind == "f":
                floats[name] = t
        else:
            dtype = _little(np.asarray(a).dtype)
            arrays[name] = np.array(a, dtype=dtype, order="C")
        keys.append((name, dtype.str, tuple(a.shape)))  # (a shape's lengths are ints)
    if _plain(msg):
        got, size = _received(msg, arrays, tuple(keys))
    else:
        got, size = _decoded(msg, arrays, [_spec(n, np.dtype(d), s) for n, d, s in keys])
    if floats:
        checks.add(got, floats)
    object.__setattr__(got, "_finite", frozenset(floats))
    shapes = tuple(s for _, _, s in keys)
    head = Header(
        got.kind, got.sender, got.receiver, got.round, tuple(arrays), shapes, tuple(got.meta)
    )
    return got, head, size


def _plain(msg: Message) -> bool:
    """Whether ``msg``'s header is of plain values only (see :func:`hand_over`)."""
    return (
        type(msg.kind) is str
        and type(msg.sender) is str
        and type(msg.receiver) is str
        and type(msg.round) is int
        and set(map(type, msg.arrays)) <= _STR
        and set(map(type, msg.meta)) <= _STR
        and set(map(type, msg.meta.values())) <= _PLAIN_TYPES
    )


def _received(
    msg: Message, arrays: dict[str, Array], keys: tuple[tuple[str, str, tuple[int, ...]], ...]
) -> tuple[Message, int]:
    """The receiver's message of a plain header (checked as :func:`read_header` checks it)
    and its encoding's length; built without :meth:`Message.__post_init__`, whose checks
    the arrays (copied by :func:`hand_over`, which checked their dtypes) and the meta
    (checked here) have passed."""
    if not 0 <= msg.round <= MAX_ROUND:
        raise ProtocolError(
            f"{msg.sender!r} sent a message of round {msg.round}; rounds run from 0 to {MAX_ROUND}"
        )
    check_meta(msg.meta, msg.sender)
    got = object.__new__(Message)
    vars(got).update(
        kind=msg.kind,
        sender=msg.sender,
        receiver=msg.receiver,
        round=msg.round,
        arrays=arrays,
        meta=dict(msg.meta),
    )
    meta = len(msg.to_json(got.meta)) if got.meta else 2
    return got, _fixed_length(msg.kind, msg.sender, msg.receiver, keys) + len(str(msg.round)) + meta


@lru_cache(maxsize=4096)
def _fixed_length(
    kind: str, sender: str, receiver: str, keys: tuple[tuple[str, str, tuple[int, ...]], ...]
) -> int:
    """The bytes of an encoding with these parties, kind and array specs (``keys``: name,
    dtype string, shape) but for the round's digits and the meta table's JSON: its arrays'
    bytes and its header's, whose JSON is ASCII (``ensure_ascii``), a byte per character."""
    specs = [_spec(n, np.dtype(d), s) for n, d, s in keys]
    head = {"kind": kind, "sender": sender, "receiver": receiver, "round": 0, "meta": {}}
    text = json.dumps({**head, "arrays": specs})
    return len(prefix(b"")) + len(text) - len("0{}") + sum(s["size"] for s in specs)


def _decoded(
    msg: Message, arrays: dict[str, Array], specs: list[dict[str, Any]]
) -> tuple[Message, int]:
    """The receiver's message of any header: read back from its JSON as decoding reads it,
    and its encoding's length."""
    start = prefix(msg.to_json(msg._head(specs)).encode("utf-8"))
    got = Message._of(read_header(memoryview(start)), arrays)
    return got, len(start) + sum(int(s["size"]) for s in specs)
