"""Opt-in lossy encodings of the per-sample arrays of split learning (activations, gradients).

A :class:`Codec` turns one named float array into the arrays that go on the wire and
back. Every encoding but ``"none"`` changes the math (the receiver computes with an
approximation of what the sender computed), so they are off by default and a
federated run with one no longer equals its centralized computation:

``"fp16"``
    IEEE half precision (10-bit mantissa; values beyond ±65504 are refused rather than
    sent as infinities).
``"bf16"``
    bfloat16: the upper 16 bits of the float32, rounded to nearest even (8-bit
    mantissa, float32's range), sent as ``uint16``.
``"int8"``
    Symmetric 8-bit quantization per sample (row): ``q = round(x / s)``, ``s = max|x| / 127``;
    the per-row scales go as ``<name>.scale`` (float32).
``"topk"``
    Per sample, the ``ceil(ratio * d)`` entries of largest magnitude (the others are
    zero at the receiver): values as ``<name>`` and their flat positions as
    ``<name>.idx`` (int32). Meant for returned gradients.

The receiver checks everything it decodes (dtypes, shapes, index range, finite values) and names the
sender of anything malformed (:class:`~fedviews.errors.ProtocolError`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from fedviews.errors import ConfigError, ProtocolError
from fedviews.federation._lend import lend
from fedviews.federation._message import Message
from fedviews.federation._tensors import Array, is_tensor, to_host

if TYPE_CHECKING:
    import torch

CODECS = ("none", "fp16", "bf16", "int8", "topk")
_FP16_MAX = float(np.finfo(np.float16).max)


@dataclass(frozen=True)
class Codec:
    """How one array travels: ``kind`` (one of :data:`CODECS`); ``ratio`` for ``"topk"``."""

    kind: str = "none"
    ratio: float = 0.1

    def validate(self, what: str = "codec") -> None:
        if self.kind not in CODECS:
            raise ConfigError(f"{what} must be one of {list(CODECS)}, got {self.kind!r}")
        if self.kind == "topk" and not 0 < self.ratio <= 1:
            raise ConfigError(f"{what}: topk keeps a fraction 0 < ratio <= 1, got {self.ratio}")

    def names(self, name: str) -> list[str]:
        """The array names that carry ``name`` on the wire (for the privacy policy)."""
        extra = {"int8": [f"{name}.scale"], "topk": [f"{name}.idx"]}.get(self.kind, [])
        return [name, *extra]

    def pack(self, name: str, x: Array, *, lent: bool = False) -> dict[str, Array]:
        """``x`` (float, first axis = samples) as the arrays to send: with ``"none"`` a
        tensor stays a (float32) tensor on its device, the encodings compute on the host.
        ``lent``: a tensor sent as it is is lent (:func:`~fedviews.federation.lend`: its
        sender never writes it again)."""
        if self.kind == "none" and is_tensor(x):
            return {name: lend(x.float()) if lent else x.float()}
        x = np.asarray(to_host(x), dtype=np.float32)
        if self.kind == "none":
            return {name: x}
        if self.kind == "fp16":
            if np.abs(x).max(initial=0.0) > _FP16_MAX:
                raise ProtocolError(f"{name} exceeds the float16 range (±{_FP16_MAX:g})")
            return {name: x.astype(np.float16)}
        if self.kind == "bf16":
            bits = x.view(np.uint32)
            rounded = bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))
            return {name: (rounded >> np.uint32(16)).astype(np.uint16)}
        flat = x.reshape(len(x), -1)
        if self.kind == "int8":
            scale = np.abs(flat).max(axis=1) / 127.0
            safe = np.where(scale > 0, scale, 1.0)
            q = np.clip(np.rint(flat / safe[:, None]), -127, 127).astype(np.int8)
            return {name: q.reshape(x.shape), f"{name}.scale": scale.astype(np.float32)}
        k = self.kept(flat.shape[1])
        idx = np.argpartition(-np.abs(flat), k - 1, axis=1)[:, :k].astype(np.int32)
        return {name: np.take_along_axis(flat, idx, axis=1), f"{name}.idx": idx}

    def tensor(
        self, msg: Message, name: str, shape: tuple[int | None, ...], device: torch.device
    ) -> torch.Tensor:
        """:meth:`unpack` as a float32 tensor on ``device``; with ``"none"`` without a host
        round trip when ``msg`` carries a tensor (:meth:`Message.tensor`)."""
        if self.kind == "none":
            return msg.tensor(name, shape, np.float32, device)
        import torch

        return torch.as_tensor(self.unpack(msg, name, shape), device=device)

    def kept(self, d: int) -> int:
        """Entries per sample that ``"topk"`` keeps out of ``d``."""
        return max(1, min(d, math.ceil(self.ratio * d)))

    def unpack(self, msg: Message, name: str, shape: tuple[int | None, ...]) -> np.ndarray:
        """The float32 array ``name`` of ``shape`` that ``msg`` carries, checked by its receiver
        (``None``: any length on that axis, except for ``"topk"``, which needs the shape)."""
        if self.kind == "none":
            return msg.array(name, shape, np.float32)
        if self.kind in ("fp16", "bf16"):
            a = msg.array(name, shape)
            want = np.float16 if self.kind == "fp16" else np.uint16
            if a.dtype != want:
                raise ProtocolError(
                    f"{msg.sender!r} sent {name} as {a.dtype}, expected {want}", party=msg.sender
                )
            if self.kind == "fp16":
                return a.astype(np.float32)
            return _finite(msg, name, (a.astype(np.uint32) << np.uint32(16)).view(np.float32))
        if self.kind == "int8":
            q = msg.array(name, shape)
            scale = msg.array(f"{name}.scale", (len(q),))
            if q.dtype != np.int8 or not np.isfinite(scale).all() or (scale < 0).any():
                raise ProtocolError(
                    f"{msg.sender!r} sent a malformed int8 {name}", party=msg.sender
                )
            with np.errstate(over="ignore"):
                flat = q.reshape(len(q), -1).astype(np.float32) * scale[:, None].astype(np.float32)
            return _finite(msg, name, flat.reshape(q.shape))
        if any(s is None for s in shape):
            raise ConfigError(f"top-k {name}: the receiver must know its whole shape")
        full = tuple(int(s or 0) for s in shape)
        n, d = full[0], int(np.prod(full[1:], dtype=np.int64))
        k = self.kept(d)
        vals, idx = msg.array(name, (n, k), np.float32), msg.array(f"{name}.idx", (n, k))
        if not np.issubdtype(idx.dtype, np.integer) or ((idx < 0) | (idx >= d)).any():
            raise ProtocolError(
                f"{msg.sender!r} sent top-k positions of {name} out of range", party=msg.sender
            )
        out = np.zeros((n, d), dtype=np.float32)
        np.put_along_axis(out, idx.astype(np.int64), vals, axis=1)
        return out.reshape(full)


def _finite(msg: Message, name: str, x: np.ndarray) -> np.ndarray:
    """``x`` as decoded from ``msg``, refused if it holds NaN or infinities (a bf16 or int8
    encoding can carry them: exponent bits all set, a scale beyond float32's range)."""
    if not np.isfinite(x).all():
        raise ProtocolError(
            f"{msg.sender!r} sent {name} that decodes to NaN or infinite values", party=msg.sender
        )
    return x


def wire_codecs(activations: str, gradients: str, ratio: float) -> tuple[Codec, Codec]:
    """The checked codecs of split learning's two directions (an algorithm's params
    ``wire_activations``, ``wire_gradients``, ``topk_ratio``): top-k only for gradients."""
    acts, grads = Codec(activations), Codec(gradients, ratio)
    acts.validate("wire_activations")
    grads.validate("wire_gradients")
    if acts.kind == "topk":
        raise ConfigError("wire_activations: top-k is for the returned gradients only")
    return acts, grads
