"""Tensors lent in one process: handed over without a copy, read-only, and checked so.

The in-process transport gives a receiver a detached copy of every tensor (``receiver_copy``):
it shares neither memory nor an autograd graph with the sender and may write into what it
got. Those copies were most of what an in-process Multi-VFL batch cost on a CPU beyond the
plain loop (``benchmarks/bench_multivfl.py``'s records, before and after lending). A sender
that never writes a tensor again (its activations, kept only for their autograd graph; the
gradients it computed for a receiver) may :func:`lend` it instead: the receiver then gets an
alias of it, the same memory (and layout: a view of a larger tensor stays one) under a tensor
of its own, without the graph and with a version counter of its own.

A lent tensor is read-only for its receiver. Torch has no read-only tensors, but any write in
place moves the version counter of the tensor written and of its views. :class:`Lends`
remembers each alias and its version, and checks that no alias was written before the
transport hands its lender the next message (so before the lender runs again, e.g. its
backward pass through the activations it lent) and when the outermost request ends (so before
its result reaches the code that made it). A write is refused by a :class:`ProtocolError`
naming the receiver that made it, never its lender: each alias has its own counter, also
where several receivers got views of one tensor (e.g. the parts of one gradient).

A lent tensor smaller than :data:`LEND_MIN_BYTES` is copied all the same: copying it is
cheaper than keeping track of an alias (``python benchmarks/bench_handover.py`` times both per
message: on a CPU a 64 KiB tensor costs a little more lent than copied, a Multi-VFL activation
batch of 1.6 MB several times more copied).

Over gRPC and Flower every array is encoded, lent or not (a receiver gets a contiguous array
there, and in one process a contiguous copy of what is not lent). What a receiver keeps only
through a view of a lent tensor, after dropping the tensor itself, is not checked.
"""

from __future__ import annotations

import sys
import threading
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from fedviews.errors import ProtocolError
from fedviews.federation._tensors import is_tensor

if TYPE_CHECKING:
    import torch

    from fedviews.federation._message import Message

T = TypeVar("T")

#: the attribute that marks a tensor lent (see :func:`lend`)
_LENT = "_fedviews_lent"
#: the bytes from which a lent tensor is handed over as an alias (a smaller one is copied)
LEND_MIN_BYTES = 1 << 17


def lend(t: T) -> T:
    """Mark ``t`` (a torch tensor; anything else is returned as it is) as lent to whoever it
    is sent to in one process: handed over without a copy (see the module). Lend only a
    tensor that its sender never writes again, through it or through any tensor that shares
    its memory (a write of the sender's own is not checked: its receivers would read it); its
    receivers may only read it."""
    if is_tensor(t):
        setattr(t, _LENT, True)
    return t


def receiver_copy(t: torch.Tensor) -> torch.Tensor:
    """What the receiver of tensor ``t`` in the same process gets: a detached, contiguous copy
    on its device (it shares neither memory nor an autograd graph with the sender's)."""
    if t.requires_grad:  # (one without a graph needs no detaching: one op less)
        t = t.detach()
    return t.clone(memory_format=sys.modules["torch"].contiguous_format)


def received(t: torch.Tensor, name: str, lent: list[tuple[str, torch.Tensor]] | None) -> Any:
    """What the receiver of tensor ``t`` (array ``name``) gets: an alias of a lent one of at
    least :data:`LEND_MIN_BYTES` (appended to ``lent`` for :meth:`Lends.add`), else
    :func:`receiver_copy` (always, where ``lent`` is ``None``)."""
    if (
        lent is not None
        and getattr(t, _LENT, False)
        and t.numel() * t.element_size() >= LEND_MIN_BYTES
    ):
        # its memory under a new tensor: no graph, a version counter of its own, not lent
        # (what its receiver passes on is copied)
        alias = t.new_empty(0).set_(t.untyped_storage(), t.storage_offset(), t.size(), t.stride())
        lent.append((name, alias))
        return alias
    return receiver_copy(t)


@dataclass(frozen=True)
class _Lent:
    """A tensor lent: its receiver's alias (weakly), the version it had, and what it was."""

    alias: weakref.ref[Any]
    version: int
    receiver: str
    kind: str
    name: str


class Lends:
    """What each party lent in one process and is still read by its receivers (see the
    module), per thread (as the finiteness checks: a handler runs in the thread of the
    request it answers)."""

    def __init__(self) -> None:
        self._threads = threading.local()  # each thread's records by lender (.by_lender)

    def _records(self) -> dict[str, list[_Lent]]:
        by_lender: dict[str, list[_Lent]] | None = getattr(self._threads, "by_lender", None)
        if by_lender is None:
            by_lender = self._threads.by_lender = {}
        return by_lender

    def add(self, msg: Message, lent: Sequence[tuple[str, torch.Tensor]]) -> None:
        """Remember the tensors of ``msg`` handed over as aliases (``lent``, by name)."""
        records = self._records().setdefault(msg.sender, [])
        for name, alias in lent:
            records.append(_Lent(weakref.ref(alias), alias._version, msg.receiver, msg.kind, name))

    def verify(self, lender: str) -> None:
        """Before ``lender`` runs again: refuse a write into what it lent, naming the receiver
        that wrote; forget what no receiver holds any more."""
        by_lender = self._records()
        records = by_lender.get(lender)
        if records:
            by_lender[lender] = _unwritten(lender, records)

    def settle(self, *, failed: bool = False) -> None:
        """The outermost request ended: check everything lent and still held (its lender may
        be sent more later), or, if it ``failed``, forget everything lent."""
        by_lender = self._records()
        if failed:
            by_lender.clear()
            return
        try:
            for lender, records in list(by_lender.items()):
                by_lender[lender] = _unwritten(lender, records)
        except ProtocolError:  # (the run fails on it: nothing of it is checked again)
            by_lender.clear()
            raise


def _unwritten(lender: str, records: list[_Lent]) -> list[_Lent]:
    """``records`` (of ``lender``) whose alias is still held; a :class:`ProtocolError` names
    the receiver of one written in place."""
    kept = []
    for r in records:
        alias = r.alias()
        if alias is None:
            continue
        if alias._version != r.version:
            raise ProtocolError(
                f"{r.receiver!r} wrote into {r.name!r} of a {r.kind!r} message, which "
                f"{lender!r} lent it in one process: a lent tensor is read-only (copy it to "
                "write into it)",
                party=r.receiver,
            )
        kept.append(r)
    return kept
