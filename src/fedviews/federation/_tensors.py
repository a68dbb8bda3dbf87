"""Torch tensors as message arrays, seen from a module that never imports torch: if nothing
in this process imported it, no array is a tensor."""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias, TypeGuard, Union

import numpy as np

from fedviews.errors import FedViewsError, ProtocolError, RemoteError, described

if TYPE_CHECKING:
    import torch

#: what a message carries under a name: a numpy array or a torch tensor
Array: TypeAlias = Union[np.ndarray, "torch.Tensor"]
ALLOWED_KINDS = set("biuf")  # bool, signed, unsigned, float


def allowed_dtype(dtype: np.dtype[Any]) -> bool:
    """Whether a message may carry values of ``dtype``: bool, integers and floats of at most
    64 bits (a ``longdouble``'s bytes mean different things on different machines, and one
    let a party turn every model it entered into float128)."""
    return dtype.kind in ALLOWED_KINDS and dtype.itemsize <= 8


def is_tensor(a: object) -> TypeGuard[torch.Tensor]:
    """Whether ``a`` is a torch tensor (never, when nothing in this process imported torch)."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(a, torch.Tensor)


#: numpy's dtype of each torch dtype met so far
_NUMPY_DTYPES: dict[Any, np.dtype[Any]] = {}


def numpy_dtype(t: torch.Tensor) -> np.dtype[Any]:
    """The numpy dtype ``t``'s values travel as; a :class:`ProtocolError` for a dtype that
    numpy lacks (e.g. ``bfloat16``: send its bits as ``uint16``, as the ``bf16`` codec does)."""
    dt = _NUMPY_DTYPES.get(t.dtype)
    if dt is None:
        try:
            dt = sys.modules["torch"].empty(0, dtype=t.dtype).numpy().dtype
        except (TypeError, RuntimeError):
            raise ProtocolError(
                f"a tensor of dtype {t.dtype} cannot be sent; numpy has no such dtype"
            ) from None
        _NUMPY_DTYPES[t.dtype] = dt
    return dt


#: the torch dtype of each numpy float type asked for so far (:meth:`Message.tensor`)
_TORCH_DTYPES: dict[Any, torch.dtype] = {}


def torch_dtype(dtype: type[np.floating]) -> torch.dtype:
    """The torch dtype of numpy's ``dtype`` (a float type)."""
    got = _TORCH_DTYPES.get(dtype)
    if got is None:
        got = _TORCH_DTYPES[dtype] = sys.modules["torch"].from_numpy(np.empty(0, dtype)).dtype
    return got


def to_host(a: Array) -> np.ndarray:
    """``a`` as a numpy array: a tensor detached and copied to host memory (a CPU tensor's
    array shares its memory; a CUDA tensor is copied into page-locked (pinned) memory, which
    the GPU writes by DMA: on an H200 a 1.6 MB activation batch took 52 us against 175 us
    into pageable memory; torch caches those blocks, so a training loop reuses them)."""
    if not is_tensor(a):
        return np.asarray(a)
    t = a.detach()
    if t.is_cuda:
        out = sys.modules["torch"].empty(t.shape, dtype=t.dtype, pin_memory=True)
        return np.asarray(out.copy_(t).numpy())
    return np.asarray(t.cpu().numpy())


def check_array(name: str, arr: Any) -> Array:
    """``arr`` as a message carries it (a tensor as it is, anything else as a numpy array),
    refused unless dense and of a numeric or bool dtype."""
    return checked_array(name, arr)[0]


def checked_array(name: str, arr: Any) -> tuple[Array, np.dtype[Any], bool]:
    """:func:`check_array` of ``arr``, the numpy dtype its values travel as and whether it
    is a tensor."""
    torch = sys.modules.get("torch")  # (is_tensor, inline: once per array of a message)
    tensor = False
    if torch is not None and isinstance(arr, torch.Tensor):
        tensor = True
        if arr.layout is not torch.strided:
            raise ProtocolError(
                f"array {name!r} is a {arr.layout} tensor; only dense ones are sent"
            )
        dtype = numpy_dtype(arr)
    else:
        arr = np.asarray(arr)
        dtype = arr.dtype
    if not allowed_dtype(dtype):
        raise ProtocolError(
            f"array {name!r} has dtype {dtype}; only bool, integer and float arrays of at most "
            "64 bits may be sent"
        )
    return arr, dtype, tensor


def nbytes(a: Array) -> int:
    """The bytes of ``a``'s values."""
    return int(a.numel() * a.element_size()) if is_tensor(a) else int(a.nbytes)


def refuse_not_finite(
    sender: str, kind: str, arrays: Mapping[str, Array], blame: Blame | None = None
) -> None:
    """Refuse ``sender``'s message of ``kind`` if one of its floating-point numpy ``arrays``
    holds NaN or infinities (by its sender's ``blame``'s refusal where it names another
    party, as :func:`refuse_outgoing`; else :func:`not_finite`; tensors are left to
    :func:`first_not_finite`, on their device). Every transport refuses such an array on
    arrival, as its receiver's handler may read ``msg.arrays`` as they came. By the sum
    trick of :func:`first_not_finite`: a float64 sum is finite only if every term is, and
    only an array whose sum is not is tested elementwise."""
    for name, a in arrays.items():
        if type(a) is np.ndarray and not finite_array(a):
            raise (blame(name) if blame is not None else None) or not_finite(sender, kind, name)


def finite_array(a: np.ndarray) -> bool:
    """Whether the numpy array ``a`` holds no NaN or infinity (true of any array not of
    floats): a float64 sum first, each element only where the sum is not finite."""
    if a.dtype.kind != "f" or not a.size:
        return True
    with np.errstate(all="ignore"):
        return math.isfinite(float(a.sum(dtype=np.float64))) or bool(np.isfinite(a).all())


def not_finite(sender: str, kind: str, name: str, dtype: object | None = None) -> ProtocolError:
    """The refusal of the array ``name`` of ``sender``'s message of ``kind`` (as ``dtype``,
    where its receiver cast it) for its NaN or infinities: a :class:`ProtocolError` naming
    ``sender``."""
    return ProtocolError(
        f"{sender!r} sent {name!r} with NaN or infinite values in {kind!r}"
        + (f" (as {dtype})" if dtype is not None else "")
        + ": refused (its model diverged, e.g. a learning rate too high, or it is poisoned)",
        party=sender,
        array=name,
    )


def first_not_finite(tensors: Mapping[str, torch.Tensor]) -> str | None:
    """The name of the first of the floating-point ``tensors`` that holds NaN or infinities,
    or ``None``: checked on their device with one host synchronisation for them all.

    A sum is finite only if every term is (a NaN or an infinity makes it NaN or infinite,
    whatever the order), and a sum is much cheaper than an element-wise test (on a CPU,
    ``isfinite().all()`` of a 1.6 MB activation batch took 40 times as long). Only when a
    sum is not finite, which finite terms can also give by overflowing, are the elements
    tested one by one.
    """
    if not tensors:
        return None
    torch = sys.modules["torch"]
    if len(tensors) == 1:  # the common case (an activation, a gradient): two operations
        if math.isfinite(float(next(iter(tensors.values())).sum())):
            return None
    else:
        where = next(iter(tensors.values())).device
        sums = [t.sum().to(device=where, dtype=torch.float64) for t in tensors.values()]
        if bool(torch.isfinite(torch.stack(sums)).all()):
            return None
    return next((n for n, t in tensors.items() if not bool(torch.isfinite(t).all())), None)


@dataclass(frozen=True)
class Backward:
    """A backward pass that a party staged for a message it received (:meth:`Party.stage`):
    back-propagate ``grads`` through ``outputs`` (its own graph, shared with no other party),
    then ``then()`` (its optimiser step).

    ``together``, if given, runs the ``then`` of several staged passes as one call: the
    transport calls ``together([s.then for s in same])`` for the passes of one delivery
    that carry the same ``together`` (each ``then`` one that it accepts, e.g. one
    multi-tensor optimiser step over all their parameters) instead of each ``then`` alone,
    and it must leave every party exactly as its own ``then`` would.
    """

    outputs: Sequence[torch.Tensor]
    grads: Sequence[torch.Tensor]
    then: Callable[[], None]
    together: Callable[[Sequence[Callable[[], None]]], None] | None = None


def backward(staged: Sequence[Backward]) -> None:
    """Run the backward passes of ``staged`` as one ``torch.autograd.backward`` (one call of
    the autograd engine for them all; their ``then`` is left to the caller).

    When the graphs are disjoint (each party's own, as :class:`Backward` requires), every
    leaf gets exactly the gradient that its own pass would give: the engine runs each
    node's backward function on the same inputs, whatever the order of the graphs.
    """
    if staged:
        sys.modules["torch"].autograd.backward(
            [o for s in staged for o in s.outputs], [g for s in staged for g in s.grads]
        )


#: what a sender attaches to a message it computed from what others sent
#: (:func:`largest_input`): given the name of one of its arrays that is not finite, the
#: refusal that names the party whose values made it overflow, or ``None`` (its own)
Blame: TypeAlias = Callable[[str], "ProtocolError | None"]


#: the values that :func:`largest_input` takes to explain an overflow: those whose square
#: overflows float32 (``sqrt(3.4e38)``); an honest model's activations, gradients and
#: weights are many orders of magnitude below
HUGE = float(np.sqrt(np.finfo(np.float32).max))


def largest_input(party: str, inputs: Mapping[str, Mapping[str, Array]]) -> Blame:
    """The :data:`Blame` of a message that ``party`` computed from ``inputs`` (by the party
    they come from, each its arrays by name; ``party``'s own, e.g. its features or its own
    output, under its own name).

    What arrives is refused when it is not finite, so an array that ``party`` computed from
    finite inputs and that is not finite overflowed: finite but huge values (a data owner's
    activations of 3e38 make the label owner's gradients infinite). Its refusal names the
    party whose input is the largest in magnitude, as MMVFL's server names the largest
    ``zeta_k * max |Z_k|`` — not ``party``, their victim, which its receivers would name —
    provided that input is :data:`HUGE`: modest inputs explain no overflow, and the refusal
    names ``party`` (whose own computation, or its lie, made the values). So does an input of
    ``party``'s own that is the largest (or not finite: its own model diverged). Read only
    when an array is refused: the maxima cost a host synchronisation, which an honest run
    never pays.

    In a deployment this is the honest sender's own check as it encodes the message (the
    run stops there, with its report naming the culprit); its receivers still check what
    arrives and name its sender, whatever the sender says. In one process, where the
    hand-over's check is both, it names the culprit.
    """

    def blame(name: str) -> ProtocolError | None:
        found = _huge_input(party, inputs)
        if found is None:
            return None
        who, what, size = found
        return ProtocolError(
            f"{who!r} sent {what!r} with values so large (max |x| = {size:.3g}) "
            f"that what {party!r} computed from them ({name!r}) is not finite: refused (its "
            "model diverged, e.g. a learning rate too high, or it is poisoned)",
            party=who,
        )

    return blame


def _huge_input(
    party: str, inputs: Mapping[str, Mapping[str, Array]]
) -> tuple[str, str, float] | None:
    """The largest of ``inputs`` in magnitude (its party, name and ``max |x|``) where it is
    another party's than ``party`` and :data:`HUGE`; else None."""
    sizes: dict[tuple[str, str], float] = {}
    for who, arrays in inputs.items():
        for what, a in arrays.items():
            top = _abs_max(a)
            sizes[who, what] = top if math.isfinite(top) else math.inf
    if not sizes:
        return None
    who, what = max(sizes, key=lambda k: sizes[k])
    if who == party or sizes[who, what] < HUGE:
        return None
    return who, what, sizes[who, what]


def failed_on_huge_input(
    exc: FedViewsError, inputs: Mapping[str, Mapping[str, Array]]
) -> ProtocolError | None:
    """The refusal that names the party whose huge input (:data:`HUGE`, the largest of
    ``inputs``, by party and name, of another party than the one that failed) made ``exc``
    happen, where ``exc`` is the failure of a party (its :attr:`~FedViewsError.at`: in one
    process its own error, deployed its report) on what a coordinator computed from
    ``inputs``: a finite but huge ``Z_k`` averaged into the consensus makes another party's
    solver fail ("numerically singular") though nothing overflowed. None where no such
    input explains it (the failure is the failing party's own)."""
    if exc.at is None:
        return None
    found = _huge_input(exc.at, inputs)
    if found is None:
        return None
    who, what, size = found
    why = f"{exc.kind}: {exc.text}" if isinstance(exc, RemoteError) else described(exc)
    return ProtocolError(
        f"{who!r} sent {what!r} with values so large (max |x| = {size:.3g}) that {exc.at!r} "
        f"failed on what was computed from them ({why}): refused (its model diverged, or "
        "it is poisoned)",
        party=who,
    )


class LargestSent:
    """Each party's largest ``max |x|`` of the arrays ``name`` it sent so far (what a
    coordinator averaged: a party fails on a poisoned average rounds later, when every
    party's values have grown towards it), and the refusal of a party's failure that a
    huge one of them explains (:func:`failed_on_huge_input`)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.top: dict[str, float] = {}

    def add(self, party: str, *arrays: Array) -> None:
        """Count what ``party`` sent (arrays checked finite on arrival)."""
        self.top[party] = max(self.top.get(party, 0.0), *(_abs_max(a) for a in arrays))

    def failure(self, exc: FedViewsError) -> ProtocolError | None:
        """:func:`failed_on_huge_input` of ``exc`` on what was sent so far."""
        sent = {p: {self.name: np.array(m)} for p, m in self.top.items()}
        return failed_on_huge_input(exc, sent)


def _abs_max(a: Array) -> float:
    """``max |a|`` as a Python float (0 for an empty array, NaN where ``a`` holds NaN)."""
    if is_tensor(a):
        return float(a.detach().abs().max()) if a.numel() else 0.0
    arr = np.asarray(a)
    with np.errstate(all="ignore"):
        return float(np.abs(arr).max(initial=0.0)) if arr.size else 0.0


def refuse_outgoing(
    sender: str, kind: str, names: Sequence[str], arrays: Sequence[np.ndarray], blame: Blame
) -> None:
    """The honest sender's check of the (host) ``arrays`` (by ``names``) of a message it
    attached ``blame`` to, as it encodes it: one that is not finite is refused there (by
    ``blame``'s refusal, or naming the sender), never sent for its receivers to name it."""
    for name, a in zip(names, arrays, strict=True):
        if not finite_array(a):
            raise blame(name) or not_finite(sender, kind, name)
