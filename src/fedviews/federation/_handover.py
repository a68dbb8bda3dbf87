"""A message handed over in one process (:func:`hand_over`): what decoding its encoding would
give, without the encoding; and the finiteness checks of its tensors, deferred
(:class:`FiniteChecks`)."""

from __future__ import annotations

import json
import math
import sys
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from fedviews.errors import ProtocolError
from fedviews.federation._lend import received
from fedviews.federation._message import (
    MAX_ROUND,
    Header,
    Message,
    _little,
    _spec,
    check_meta,
    prefix,
    read_header,
)
from fedviews.federation._meta import META_INTS
from fedviews.federation._tensors import (
    Array,
    Blame,
    checked_array,
    first_not_finite,
    not_finite,
    refuse_not_finite,
)

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class _Pending:
    """A floating-point tensor handed over, its finiteness not read yet: it is finite exactly
    when every one of its ``probes`` (on its device) is."""

    probes: tuple[torch.Tensor, ...]
    sender: str
    kind: str
    name: str
    blame: Blame | None = None  # the message's :meth:`~Message.sender_blame`


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
        self.add_many([(msg, tensors)])

    def add_many(self, handed: Sequence[tuple[Message, Mapping[str, torch.Tensor]]]) -> None:
        """Queue the floating-point tensors of several messages handed over together (each
        with its tensors by name), in their order: those of one scatter, in one call."""
        torch = sys.modules["torch"]
        queue = self._queue()
        pending, count = queue.pending, 0
        for msg, tensors in handed:
            count += len(tensors)
            for name, t in tensors.items():
                if not t.numel():  # (no values: none to check, and no minimum)
                    continue
                if not t.is_cpu:
                    wide = t.element_size() > 4
                    probes = tuple(torch.aminmax(t)) if wide else (t.sum(dtype=torch.float64),)
                elif first_not_finite({name: t}) is None:
                    continue
                else:
                    probes = (t.sum(),)  # NaN or infinite, as a sum of a NaN or an infinity is
                pending.append(_Pending(probes, msg.sender, msg.kind, name, msg.sender_blame()))
        queue.since += count
        if queue.since >= self.limit:
            self.settle()

    def settle(self, cause: BaseException | None = None, *, outermost: bool = False) -> None:
        """Check every tensor this thread queued (then forget them): the first one that is not
        finite is refused, naming its sender (from ``cause``, the failure that made its
        receiver stop where one did: the NaN's consequence, never blamed on its victim). A
        refusal made before in this thread is raised again, until ``outermost`` (the
        thread's outermost request ends) forgets it."""
        queue = self._queue()
        if not queue.pending and queue.refused is None:  # (most settles: nothing to read)
            queue.since = 0
            return
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
    blamed = None if first.blame is None else first.blame(first.name)
    refused = blamed or not_finite(first.sender, first.kind, first.name)
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

    A header of plain values (strings, an ``int`` round, meta of ``str``, ``int``,
    ``float``, ``bool`` or ``None`` values, of those very types, under string keys: what
    its JSON round trip gives back as it was) is checked as it is, its encoding's length counted from the lengths
    of its parts' JSON (what every message of its kind, parties and array specs has in
    common compiled once, :func:`_route`); any other goes through its JSON, as decoding
    reads it.
    """
    got, head, size, floats = handed_over(msg)
    if floats:
        checks.add(got, floats)
    return got, head, size


def handed_over(
    msg: Message, lent: list[tuple[str, torch.Tensor]] | None = None
) -> tuple[Message, Header, int, dict[str, torch.Tensor]]:
    """:func:`hand_over` of ``msg`` but its finiteness checks, which the caller queues
    (:meth:`FiniteChecks.add_many`: the in-process transport, once for the requests of a
    scatter): also its floating-point tensors by name (the receiver's copies). With
    ``lent``, a tensor its sender lent is handed over as an alias and appended there
    (``_lend``)."""
    # its numpy arrays (tensors: deferred), by its sender's blame as an encoding sender's
    refuse_not_finite(msg.sender, msg.kind, msg.arrays, msg.sender_blame())
    arrays: dict[str, Array] = {}
    floats: dict[str, torch.Tensor] = {}
    keys = []
    plain = True
    for name, a in msg.arrays.items():
        a, dtype, tensor = checked_array(name, a)  # as decoding the message checks its arrays
        if tensor:
            t = arrays[name] = received(cast("torch.Tensor", a), name, lent)
            if dtype.kind == "f":
                floats[name] = t
        else:
            dtype = _little(dtype)
            arrays[name] = np.array(a, dtype=dtype, order="C")
        plain = plain and type(name) is str
        keys.append((name, dtype.str, tuple(a.shape)))  # (a shape's lengths are ints)
    if (  # kind, parties and round of plain types (see hand_over)
        plain
        and type(msg.kind) is str
        and type(msg.sender) is str
        and type(msg.receiver) is str
        and type(msg.round) is int
    ):
        meta = _meta_length(msg.meta) if msg.meta else 2  # ({}: most messages of a batch)
    else:
        meta = None
    if meta is not None:
        got, head, size = _received(msg, arrays, tuple(keys), meta, floats)
    else:
        got, head, size = _decoded(msg, arrays, [_spec(n, np.dtype(d), s) for n, d, s in keys])
        if floats:
            object.__setattr__(got, "_finite", frozenset(floats))
    blame = msg.sender_blame()
    if blame is not None:  # (for the deferred check: see Message.sender_blame)
        object.__setattr__(got, "_blame", blame)
    return got, head, size, floats


def _meta_length(meta: Mapping[Any, Any]) -> int | None:
    """The length of the JSON of ``meta`` (``json.dumps`` with its default separators and
    ``allow_nan``; ASCII, a byte per character), or ``None`` unless it is plain (see
    :func:`hand_over`)."""
    if not meta:
        return 2  # {}
    n = 4 * len(meta)  # "{}", ": " in every item and ", " between them
    for k, v in meta.items():
        if type(k) is not str or (got := _value_length(v)) is None:
            return None
        n += _text_length(k) + got
    return n


def _value_length(v: object) -> int | None:
    """The length of the JSON of a plain meta value, or ``None`` for another."""
    t = type(v)
    if t is str:
        return _text_length(v)  # type: ignore[arg-type]
    if t is int:  # (beyond 64 bits: refused by the JSON path, as making the message is)
        return len(int.__repr__(v)) if v in META_INTS else None
    if t is float:
        x: float = v  # type: ignore[assignment]
        return len(float.__repr__(x)) if math.isfinite(x) else len(_NONFINITE[str(x)])
    if t is bool:
        return 4 if v else 5
    return 4 if v is None else None


#: the JSON of the floats that are not finite (``json.dumps`` with ``allow_nan``), by ``str``
_NONFINITE = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}


def _text_length(s: str) -> int:
    """The length of the JSON of the string ``s`` (``ensure_ascii``)."""
    if s.isascii() and s.isprintable() and '"' not in s and "\\" not in s:
        return len(s) + 2  # (printable ASCII but quote and backslash: not escaped)
    return len(json.dumps(s))


class _Route:
    """What every plain message of one kind, parties and array specs has in common: the
    bytes of its encoding but the round's digits and the meta table's JSON (``fixed``), its
    array names and shapes, and the header of the last round and meta keys met."""

    __slots__ = ("fixed", "last", "names", "shapes")

    def __init__(self, fixed: int, names: tuple[str, ...], shapes: tuple[tuple[int, ...], ...]):
        self.fixed, self.names, self.shapes = fixed, names, shapes
        self.last: Header | None = None

    def header(self, msg: Message) -> Header:
        """The header of ``msg`` (a message of this route)."""
        meta, last = tuple(msg.meta), self.last
        if last is None or last.round != msg.round or last.meta != meta:
            last = self.last = Header(
                msg.kind, msg.sender, msg.receiver, msg.round, self.names, self.shapes, meta
            )
        return last


def _received(
    msg: Message,
    arrays: dict[str, Array],
    keys: tuple[tuple[str, str, tuple[int, ...]], ...],
    meta: int,
    floats: Mapping[str, Any],
) -> tuple[Message, Header, int]:
    """The receiver's message of a plain header (checked as :func:`read_header` checks it),
    its header and its encoding's length (``meta``: its meta table's JSON's); built without
    :meth:`Message.__post_init__`, whose checks the arrays (copied by :func:`hand_over`,
    which checked their dtypes) and the meta (checked here) have passed."""
    if not 0 <= msg.round <= MAX_ROUND:
        raise ProtocolError(
            f"{msg.sender!r} sent a message of round {msg.round}; rounds run from 0 to {MAX_ROUND}"
        )
    if msg.meta:
        check_meta(msg.meta, msg.sender)
    fields: dict[str, Any] = {
        "kind": msg.kind,
        "sender": msg.sender,
        "receiver": msg.receiver,
        "round": msg.round,
        "arrays": arrays,
        "meta": dict(msg.meta),
    }
    if floats:  # (their finiteness is the transport's check: :meth:`Message.tensor` skips it)
        fields["_finite"] = frozenset(floats)
    got = object.__new__(Message)
    object.__setattr__(got, "__dict__", fields)
    route = _route(msg.kind, msg.sender, msg.receiver, keys)
    return got, route.header(msg), route.fixed + len(str(msg.round)) + meta


@lru_cache(maxsize=4096)
def _route(
    kind: str, sender: str, receiver: str, keys: tuple[tuple[str, str, tuple[int, ...]], ...]
) -> _Route:
    """The :class:`_Route` of the plain messages of this kind and parties and with these
    array specs (``keys``: name, dtype string, shape): the bytes of the encoding but the
    round's digits and the meta table's JSON are its arrays' bytes and its header's, whose
    JSON is ASCII (``ensure_ascii``), a byte per character."""
    specs = [_spec(n, np.dtype(d), s) for n, d, s in keys]
    head = {"kind": kind, "sender": sender, "receiver": receiver, "round": 0, "meta": {}}
    text = json.dumps({**head, "arrays": specs})
    fixed = len(prefix(b"")) + len(text) - len("0{}") + sum(s["size"] for s in specs)
    return _Route(fixed, tuple(n for n, _, _ in keys), tuple(s for _, _, s in keys))


def _decoded(
    msg: Message, arrays: dict[str, Array], specs: list[dict[str, Any]]
) -> tuple[Message, Header, int]:
    """The receiver's message of any header: read back from its JSON as decoding reads it,
    its header and its encoding's length."""
    start = prefix(msg.to_json(msg._head(specs)).encode("utf-8"))
    got = Message._of(read_header(memoryview(start)), arrays)
    return got, got.header(), len(start) + sum(int(s["size"]) for s in specs)
