"""APFed networks (the paper's Table 3 and Table 4) and the m-i image strips.

Every network works on one horizontal image strip ``(n, C, h, W)``.

* ``Encoder`` — ``f_A`` of the active client, ``ENC_p`` of an APFed-C passive
  client and the per-client encoder of TVFL: unpadded convolutions, each
  followed by ReLU, no pooling. Table 3 prints ``conv1 (1, 31, 5)`` followed by
  ``conv2 (32, 64, 5)``, which cannot be chained; we use 32 output channels for
  ``conv1``.
* ``Head`` — ``g_T``: flatten, ``fc1 (d, hidden)``, ReLU, ``fc2 (hidden, classes)``
  (``d`` = flattened encoder output, as in the tables).
* ``Decoder`` — ``DEC_p`` of an APFed-R passive client: the transposed
  convolutions of the tables in reverse order (ReLU between them, a linear last
  layer), which exactly invert the encoder's spatial shape.

A strip shorter (or narrower) than the encoder's receptive field (e.g. CIFAR
3-x strips of 11 rows through Table 4's 5-4-5 kernels) is zero-padded at the
bottom (right) to the smallest size that leaves a 1-pixel output; the decoder
crops its output back to the strip size. Without this the CIFAR 3-x settings
could not run at all.

The papers define only these image CNNs. On table columns (per-sample ``(k,)``) the
defaults are small MLPs of the same build (:func:`vector_encoder`, :func:`vector_head`,
:func:`vector_decoder`): fedviews' own, not the paper's.

:class:`APFedNets` builds a run's networks: these, or a user's factories in their place.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np

from fedviews._estimator import is_int
from fedviews.data import check_numeric
from fedviews.deep._common import as_strips, torch_seed, warn_raw_pixels
from fedviews.deep._factory import build_network, logits, output_shape, resolve_factory
from fedviews.errors import ConfigError, DataError, MissingDependency

try:
    from torch import nn
    from torch.nn import functional as F
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise MissingDependency("torch", "torch") from exc


# -- m-i settings and strips -------------------------------------------------
def check_setting(m: int, i: int) -> None:
    """Validate an ``m-i`` setting: ``m >= 2`` strips, active strip ``1 <= i <= m``."""
    if not is_int(m, 2):
        raise ConfigError(f"m (number of strips) must be an integer >= 2, got {m!r}")
    if not is_int(i, 1) or i > m:
        raise ConfigError(
            f"setting {m}-{i}: the active strip i must satisfy 1 <= i <= m={m}, got i={i}"
        )


def parse_setting(setting: str) -> tuple[int, int]:
    """``"3-2"`` → ``(3, 2)`` (validated)."""
    try:
        m_s, i_s = str(setting).split("-")
        m, i = int(m_s), int(i_s)
    except ValueError:
        raise ConfigError(
            f"setting {setting!r} must look like 'm-i', e.g. '2-1' or '3-2'"
        ) from None
    check_setting(m, i)
    return m, i


def as_images(images: Any, name: str = "images") -> np.ndarray:
    """Validate images as a float32 ``(n, C, H, W)`` array (``(n, H, W)`` gets ``C = 1``).

    ``uint8`` pixels are scaled to ``[0, 1]`` (``/ 255``), as a deployed party's strips are
    (:func:`fedviews.deep._common.as_strips`); other values are used as given. Sparse,
    complex or non-numeric images are a :class:`DataError` (:func:`fedviews.data.check_numeric`).
    """
    given = check_numeric(images, name)
    warn_raw_pixels(given, name)
    arr = as_strips(given)
    if arr.ndim != 4 or min(arr.shape) == 0:
        raise DataError(
            f"{name} must have shape (n, H, W) or (n, C, H, W) (channels first), got {arr.shape}"
        )
    if not np.isfinite(arr).all():
        raise DataError(f"{name} contains NaN or infinite pixels")
    return arr


def cut_strips(images: np.ndarray, m: int, *, pad: bool = False) -> list[np.ndarray]:
    """Cut ``(n, C, H, W)`` images horizontally into ``m`` equal strips (top to bottom).

    The m-i protocol needs equal strips (an APFed-R decoder maps the active
    representation onto a passive strip of the same size), so ``H`` must be a
    multiple of ``m``. With ``pad=True`` the images are first zero-padded at the
    bottom to the next multiple (28-row MNIST with ``m=3`` → 30 rows, strips of 10).

    Raises
    ------
    DataError
        If ``H % m != 0`` and ``pad`` is False.
    """
    H = images.shape[2]
    rem = H % m
    if rem:
        if not pad:
            raise DataError(
                f"images of height {H} cannot be cut into {m} equal strips; "
                f"pass pad=True to zero-pad them to {H + m - rem} rows, or crop them"
            )
        images = np.pad(images, ((0, 0), (0, 0), (0, m - rem), (0, 0)))
    h = images.shape[2] // m
    return [np.ascontiguousarray(images[:, :, k * h : (k + 1) * h]) for k in range(m)]


@dataclass(frozen=True)
class NetSpec:
    """One column of the paper's Table 3/4.

    Attributes
    ----------
    name : str
    in_channels : int
        Image channels (1 for MNIST/FMNIST, 3 for CIFAR).
    convs : tuple of (in, out, kernel)
        Encoder layers ``conv1, conv2, ...``; the decoder mirrors them.
    hidden : int
        Width of ``fc1`` in ``g_T``.
    """

    name: str
    in_channels: int
    convs: tuple[tuple[int, int, int], ...]
    hidden: int

    @property
    def shrink(self) -> int:
        """Rows (and columns) lost through the unpadded encoder."""
        return sum(k - 1 for _, _, k in self.convs)

    @property
    def out_channels(self) -> int:
        return self.convs[-1][1]

    def padded(self, h: int, w: int) -> tuple[int, int]:
        """Input size after padding a ``(h, w)`` strip up to the receptive field."""
        return max(h, self.shrink + 1), max(w, self.shrink + 1)

    def out_shape(self, h: int, w: int) -> tuple[int, int, int]:
        """Encoder output ``(channels, rows, cols)`` for a ``(h, w)`` strip."""
        ph, pw = self.padded(h, w)
        return self.out_channels, ph - self.shrink, pw - self.shrink

    def feature_dim(self, h: int, w: int) -> int:
        """``d`` of the tables: the flattened encoder output size."""
        c, oh, ow = self.out_shape(h, w)
        return c * oh * ow


ARCHS: dict[str, NetSpec] = {
    "table3": NetSpec("table3", 1, ((1, 32, 5), (32, 64, 5)), 256),
    "table4": NetSpec("table4", 3, ((3, 16, 5), (16, 32, 4), (32, 64, 5)), 50),
}


def get_arch(arch: str, in_channels: int) -> NetSpec:
    """Resolve ``"auto"`` (1 channel → Table 3, 3 channels → Table 4) or a name."""
    if arch == "auto":
        for spec in ARCHS.values():
            if spec.in_channels == in_channels:
                return spec
        raise ConfigError(
            f"no APFed network for {in_channels}-channel images; pass 1- or 3-channel images, "
            "or give your own networks (encoder, head, and APFed-R's decoder)"
        )
    if arch not in ARCHS:
        raise ConfigError(
            f"unknown APFed network {arch!r}; choose 'auto' or one of {sorted(ARCHS)}"
        )
    spec = ARCHS[arch]
    if spec.in_channels != in_channels:
        raise ConfigError(
            f"network {arch!r} expects {spec.in_channels}-channel images, got {in_channels}"
        )
    return spec


class Encoder(nn.Module):
    """Unpadded conv stack with ReLU: ``(n, C, h, W) → (n, 64, h', W')``."""

    def __init__(self, spec: NetSpec, strip_hw: tuple[int, int]) -> None:
        super().__init__()
        ph, pw = spec.padded(*strip_hw)
        self.padding = (0, pw - strip_hw[1], 0, ph - strip_hw[0])  # (left, right, top, bottom)
        self.convs = nn.ModuleList(nn.Conv2d(i, o, k) for i, o, k in spec.convs)

    def forward(self, x: Any) -> Any:
        if any(self.padding):
            x = F.pad(x, self.padding)
        for conv in self.convs:
            x = F.relu(conv(x))
        return x


class Head(nn.Module):
    """``g_T``: flatten → fc1 → ReLU → fc2 (logits)."""

    def __init__(self, in_dim: int, hidden: int, n_classes: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(in_dim, hidden)
        self.fc2 = nn.Linear(hidden, n_classes)

    def forward(self, h: Any) -> Any:
        return self.fc2(F.relu(self.fc1(h.flatten(1))))


class Decoder(nn.Module):
    """``DEC_p``: mirrored transposed convolutions, cropped to the strip size."""

    def __init__(self, spec: NetSpec, strip_hw: tuple[int, int]) -> None:
        super().__init__()
        self.strip_hw = tuple(strip_hw)
        self.deconvs = nn.ModuleList(
            nn.ConvTranspose2d(o, i, k) for i, o, k in reversed(spec.convs)
        )

    def forward(self, h: Any) -> Any:
        x = h
        for k, deconv in enumerate(self.deconvs):
            x = deconv(x)
            if k < len(self.deconvs) - 1:
                x = F.relu(x)
        return x[..., : self.strip_hw[0], : self.strip_hw[1]]


class ActiveNet(nn.Module):
    """The active client's complete model ``g_T(f_A(x))`` (what is exported).

    Parameters
    ----------
    encoder : torch.nn.Module
        ``f_A`` on the active strip.
    head : torch.nn.Module
        ``g_T`` on ``h_A = f_A(x)``, returning the class logits.
    """

    def __init__(self, encoder: nn.Module, head: nn.Module) -> None:
        super().__init__()
        self.encoder = encoder
        self.head = head

    @classmethod
    def paper(cls, spec: NetSpec, strip_hw: tuple[int, int], n_classes: int) -> ActiveNet:
        """The paper's ``g_T ∘ f_A`` of ``spec`` for strips ``strip_hw`` (drawn from the
        current torch stream, the encoder first)."""
        encoder = Encoder(spec, strip_hw)
        return cls(encoder, Head(spec.feature_dim(*strip_hw), spec.hidden, n_classes))

    def forward(self, x: Any) -> Any:
        return self.head(self.encoder(x))


#: hidden units of the default MLPs on table columns
VECTOR_HIDDEN = 64
#: features of ``h_A`` of the default encoder on table columns
VECTOR_REP = 32


def vector_encoder(input_shape: tuple[int, ...]) -> nn.Module:
    """The default ``f_A`` (and APFed-C's ``ENC_p``) on table columns ``(k,)``, fedviews' own
    (the papers define only image CNNs): ``LayerNorm(k)`` (table columns come at any scale),
    ``Linear(k, 64)``, ReLU, ``Linear(64, 32)``, ReLU, so ``h_A`` is 32 non-negative features,
    as the paper's encoder ends in a ReLU."""
    (k,) = input_shape
    return nn.Sequential(
        nn.LayerNorm(k),
        nn.Linear(k, VECTOR_HIDDEN),
        nn.ReLU(),
        nn.Linear(VECTOR_HIDDEN, VECTOR_REP),
        nn.ReLU(),
    )


def vector_head(input_shape: tuple[int, ...], n_classes: int) -> nn.Module:
    """The default ``g_T`` on the ``h_A`` of table columns: the paper's :class:`Head` (flatten,
    ``fc1``, ReLU, ``fc2``) with 64 hidden units."""
    return Head(math.prod(input_shape), VECTOR_HIDDEN, n_classes)


def vector_decoder(input_shape: tuple[int, ...], output_shape: tuple[int, ...]) -> nn.Module:
    """The default APFed-R ``DEC_p`` onto table columns ``output_shape`` ``(k_p,)``: flatten,
    ``Linear(d, 64)``, ReLU, ``Linear(64, k_p)`` (a linear last layer, as the paper's
    decoder)."""
    (k,) = output_shape
    return nn.Sequential(
        nn.Flatten(),
        nn.Linear(math.prod(input_shape), VECTOR_HIDDEN),
        nn.ReLU(),
        nn.Linear(VECTOR_HIDDEN, k),
    )


def paper_encoder(spec: NetSpec, input_shape: tuple[int, ...]) -> nn.Module:
    """The paper's encoder of ``spec`` for strips of per-sample shape ``(C, h, W)``."""
    return Encoder(spec, (input_shape[1], input_shape[2]))


def paper_head(spec: NetSpec, input_shape: tuple[int, ...], n_classes: int) -> nn.Module:
    """The paper's head of ``spec`` on representations of per-sample ``input_shape``."""
    return Head(math.prod(input_shape), spec.hidden, n_classes)


def paper_decoder(
    spec: NetSpec, input_shape: tuple[int, ...], output_shape: tuple[int, ...]
) -> nn.Module:
    """The paper's decoder of ``spec`` onto strips of per-sample ``output_shape``: it inverts
    the paper's encoder (a user's ``f_A`` needs a user's decoder)."""
    return Decoder(spec, (output_shape[1], output_shape[2]))


@dataclass(frozen=True)
class APFedNets:
    """The networks of an APFed run: user factories (callables or import paths,
    :mod:`fedviews.deep._factory`), ``""`` for the default network.

    * ``encoder(input_shape)``: ``f_A`` on the active party's features (per-sample
      ``(C, h, W)`` of a strip, ``(k,)`` of table columns);
    * ``head(input_shape, n_classes)``: ``g_T`` on ``h_A`` (per-sample shape of ``f_A``'s
      output), returning ``n_classes`` logits;
    * ``decoder(input_shape, output_shape)``: APFed-R's ``DEC_p`` from ``h_A``
      (``input_shape``) to exactly the passive party's features ``output_shape``, which
      Eq. 12 compares it with;
    * ``passive_encoder(input_shape)``: APFed-C's ``ENC_p`` on a passive party's features,
      with as many output features as ``h_A`` (Eq. 15 takes their cosine); ``""``:
      ``encoder``'s factory.

    The default of a network on (or onto) image strips is the paper's of ``arch`` and
    ``channels`` (:func:`get_arch`), on table columns fedviews' MLP (:func:`vector_encoder`,
    :func:`vector_head`, :func:`vector_decoder`). ``table``: the active party holds table
    columns (its model uses no network of the paper).
    """

    arch: str = "auto"
    channels: int = 1
    encoder: Any = ""
    head: Any = ""
    passive_encoder: Any = ""
    decoder: Any = ""
    table: bool = False

    @property
    def spec(self) -> NetSpec:
        """The paper's networks for ``channels`` (a :class:`ConfigError` if there are none)."""
        return get_arch(self.arch, self.channels)

    def paper_arch(self) -> NetSpec | None:
        """:attr:`spec` where the active model uses a network of the paper, else None."""
        return None if self.table or (self.encoder and self.head) else self.spec

    def arch_needed(self, variant: str | None) -> NetSpec | None:
        """:attr:`spec` where a run on image strips uses a network of the paper: ``f_A``,
        ``g_T`` and the passive parties' network of ``variant`` (``"R"``: the decoder, ``"C"``:
        the passive encoder, ``encoder``'s factory by default; ``None``: no passive party).
        ``None`` where every one is the user's, whatever the images' channels, or on table
        columns."""
        passive = {"R": self.decoder, "C": self.passive_encoder or self.encoder, None: True}
        if self.table or (self.encoder and self.head and passive.get(variant)):
            return None
        return self.spec

    def _encoder(self, factory: Any, field: str, shape: tuple[int, ...]) -> Any:
        if made := resolve_factory(factory, field):
            return made
        return vector_encoder if len(shape) == 1 else partial(paper_encoder, self.spec)

    def rep_shape(self, strip: tuple[int, ...]) -> tuple[int, ...]:
        """The per-sample shape of ``h_A`` that ``f_A`` gives on active features of per-sample
        shape ``strip``."""
        made = self._encoder(self.encoder, "encoder", strip)
        enc = build_network(made, (strip,), field="encoder", seed=0, input_shape=strip)
        return output_shape(enc, strip, "encoder")

    def active(self, strip: tuple[int, ...], n_classes: int, seed: int) -> ActiveNet:
        """``g_T ∘ f_A`` for active features of per-sample shape ``strip``: ``f_A``, then
        ``g_T``, drawn from one stream seeded ``seed``."""
        made = resolve_factory(self.head, "head") or (
            vector_head if len(strip) == 1 else partial(paper_head, self.spec)
        )
        with torch_seed(seed):
            enc = build_network(
                self._encoder(self.encoder, "encoder", strip),
                (strip,),
                field="encoder",
                seed=None,
                input_shape=strip,
            )
            rep = output_shape(enc, strip, "encoder")
            head = build_network(
                made,
                (rep, n_classes),
                field="head",
                seed=None,
                input_shape=rep,
                output=logits(n_classes),
            )
        return ActiveNet(enc, head)

    def passive(self, variant: str, strip: tuple[int, ...], rep: tuple[int, ...]) -> nn.Module:
        """A passive party's network for its features of per-sample shape ``strip``, drawn from
        the caller's stream: APFed-R's decoder from ``h_A`` (per-sample ``rep``) to the
        features, APFed-C's encoder of the features to as many features as ``h_A``."""
        if variant == "R":
            return build_network(
                resolve_factory(self.decoder, "decoder")
                or (vector_decoder if len(strip) == 1 else partial(paper_decoder, self.spec)),
                (rep, strip),
                field="decoder",
                seed=None,
                input_shape=rep,
                output=lambda out: (
                    None
                    if out == strip
                    else f"is {out}, not the passive party's features {strip} (Eq. 12 "
                    "compares them)"
                ),
            )
        field = "passive_encoder" if self.passive_encoder else "encoder"
        need = math.prod(rep)
        return build_network(
            self._encoder(self.passive_encoder or self.encoder, field, strip),
            (strip,),
            field=field,
            seed=None,
            input_shape=strip,
            output=lambda out: (
                None
                if math.prod(out) == need
                else f"has {math.prod(out)} features, not the {need} of h_A {rep} (Eq. 15 compares them)"
            ),
        )
