"""Multi-VFL's networks: the default bottom and top models, user factories, seeded builders.

A *bottom* model runs at a data owner on its features (its strip of the image, or its
columns of a table); a *top* model runs at a label owner on the combined cut-layer
activations. Default sizes are those of Multi-VFL (Mugunthan et al.): on image strips
each bottom is one 3x3 convolution 1 → 32 channels, the top is one convolution and two
linear layers; on table columns each bottom is one linear layer + ReLU to ``channels``
units and the top two linear layers (:func:`default_bottom`, :func:`default_top`).

User networks replace them through factories (``MultiVFLParams.bottom`` and ``top``):
``bottom(input_shape, index)`` builds data owner ``index``'s bottom for per-sample inputs
of ``input_shape`` (:func:`~fedviews.deep.multivfl.protocol.input_shape`);
``top(input_shape, n_classes)`` the top for the joined activations of per-sample shape
``input_shape`` (:func:`~fedviews.deep.multivfl.protocol.combined_shape`), with
``n_classes`` logits. :func:`make_bottom` and :func:`make_top` build either, seeded.

:class:`SplitNet` is the same network in one process (all bottoms + the top),
used as the centralized reference in tests and benchmarks.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from fedviews.deep._common import INITS, torch_seed
from fedviews.deep._factory import build_network, logits, resolve_factory
from fedviews.deep.multivfl.protocol import cut_axis
from fedviews.errors import ConfigError, MissingDependency

try:
    import torch
    from torch import nn
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise MissingDependency("torch", "torch") from exc


def conv_bottom(in_channels: int = 1, channels: int = 32, kernel_size: int = 3) -> nn.Sequential:
    """Bottom model: one ``kernel_size`` convolution (same padding) + ReLU.

    Maps ``(n, in_channels, h, w)`` to ``(n, channels, h, w)``, so strips of any
    height keep their height and can be stacked back into a full map.
    """
    if kernel_size % 2 == 0:
        raise ConfigError(f"kernel_size must be odd (same padding), got {kernel_size}")
    return nn.Sequential(
        nn.Conv2d(in_channels, channels, kernel_size, padding=kernel_size // 2), nn.ReLU()
    )


def conv_top(
    in_channels: int,
    height: int,
    width: int,
    n_classes: int,
    *,
    channels: int = 64,
    hidden: int = 128,
) -> nn.Sequential:
    """Top model: one convolution and two linear layers.

    ``Conv2d(in_channels, channels, 3, stride=2, padding=1)`` → ReLU →
    ``MaxPool2d(2, ceil_mode=True)`` → flatten → ``Linear(·, hidden)`` → ReLU →
    ``Linear(hidden, n_classes)``. On a 32x28x28 map the convolution gives
    64x14x14 and the pooling 64x7x7.
    """
    if min(in_channels, height, width, n_classes, channels, hidden) < 1:
        raise ConfigError(
            f"conv_top needs positive sizes, got in_channels={in_channels}, height={height}, "
            f"width={width}, n_classes={n_classes}, channels={channels}, hidden={hidden}"
        )
    features = nn.Sequential(
        nn.Conv2d(in_channels, channels, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2, ceil_mode=True),
        nn.Flatten(),
    )
    with torch.no_grad():
        n_flat = int(features(torch.zeros(1, in_channels, height, width)).shape[1])
    return nn.Sequential(
        *features,
        nn.Linear(n_flat, hidden),
        nn.ReLU(),
        nn.Linear(hidden, n_classes),
    )


def init_weights(module: nn.Module, init: str) -> nn.Module:
    """Re-draw the weights of every convolution and linear layer of ``module`` in place.

    ``"xavier"``: weights from ``N(0, 2 / (fan_in + fan_out))`` (``nn.init.xavier_normal_``),
    biases 0; ``"torch"``: leave PyTorch's default initialisation. Draws from the global
    torch RNG (call it under :func:`~fedviews.deep._common.torch_seed`).
    """
    if init not in INITS:
        raise ConfigError(f"init must be one of {list(INITS)}, got {init!r}")
    if init == "xavier":
        for layer in module.modules():
            if isinstance(layer, nn.Conv2d | nn.Linear):
                nn.init.xavier_normal_(layer.weight)
                if layer.bias is not None:
                    nn.init.zeros_(layer.bias)
    return module


def combine_activations(activations: Sequence[torch.Tensor]) -> torch.Tensor:
    """Join the data owners' activations along :func:`~fedviews.deep.multivfl.protocol.cut_axis`.

    ``(n, C, h_d, w)`` maps are stacked along the height axis: strip ``d`` covers image
    rows ``h_0 + ... + h_{d-1}`` onwards, so the result is the ``(n, C, sum h_d, w)``
    feature map of the whole image. Vectors ``(n, e_d)`` are concatenated to
    ``(n, sum e_d)``.
    """
    return torch.cat(list(activations), dim=1 + cut_axis(activations[0].dim() - 1))


def split_activations(joined: torch.Tensor, like: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """The parts of ``joined`` (e.g. the gradient of :func:`combine_activations` of ``like``)
    that belong to each of ``like``: views of it, in order (no copy)."""
    dim = 1 + cut_axis(like[0].dim() - 1)
    return list(torch.split(joined, [a.shape[dim] for a in like], dim=dim))


class SplitNet(nn.Module):
    """All bottoms and the top in one module (the centralized reference).

    Parameters
    ----------
    bottoms : sequence of nn.Module
        One per strip; ``bottoms[d]`` maps strip ``d`` ``(n, 1, h_d, w)`` to ``(n, C, h_d, w)``.
    top : nn.Module
        Consumes the combined ``(n, C, H, w)`` map.
    """

    def __init__(self, bottoms: Sequence[nn.Module], top: nn.Module) -> None:
        super().__init__()
        self.bottoms = nn.ModuleList(bottoms)
        self.top = top

    def forward(self, strips: Sequence[torch.Tensor]) -> torch.Tensor:
        if len(strips) != len(self.bottoms):
            raise ConfigError(
                f"SplitNet has {len(self.bottoms)} bottoms but got {len(strips)} strips"
            )
        return self.top(
            combine_activations([b(x) for b, x in zip(self.bottoms, strips, strict=True)])
        )


def mlp_bottom(in_features: int, width: int) -> nn.Sequential:
    """Bottom model on table columns: flatten, ``Linear(in_features, width)``, ReLU."""
    return nn.Sequential(nn.Flatten(), nn.Linear(in_features, width), nn.ReLU())


def mlp_top(in_features: int, n_classes: int, hidden: int = 128) -> nn.Sequential:
    """Top model on joined vectors: ``Linear(in_features, hidden)``, ReLU,
    ``Linear(hidden, n_classes)``."""
    return nn.Sequential(
        nn.Flatten(), nn.Linear(in_features, hidden), nn.ReLU(), nn.Linear(hidden, n_classes)
    )


def default_bottom(channels: int) -> Callable[[tuple[int, ...], int], nn.Module]:
    """The bottom factory used when none is given: :func:`conv_bottom` on image strips
    (per-sample ``(C, h, w)``), :func:`mlp_bottom` to ``channels`` units otherwise."""

    def bottom(input_shape: tuple[int, ...], index: int) -> nn.Module:
        if len(input_shape) == 3:
            return conv_bottom(input_shape[0], channels)
        return mlp_bottom(math.prod(input_shape), channels)

    return bottom


def default_top(top_channels: int, hidden: int) -> Callable[[tuple[int, ...], int], nn.Module]:
    """The top factory used when none is given: :func:`conv_top` on feature maps
    (per-sample ``(C, H, W)``), :func:`mlp_top` otherwise."""

    def top(input_shape: tuple[int, ...], n_classes: int) -> nn.Module:
        if len(input_shape) == 3:
            return conv_top(*input_shape, n_classes, channels=top_channels, hidden=hidden)
        return mlp_top(math.prod(input_shape), n_classes, hidden)

    return top


def make_bottom(
    factory: Any,
    input_shape: Sequence[int],
    index: int,
    *,
    channels: int = 32,
    random_state: int = 0,
    init: str = "xavier",
) -> nn.Module:
    """Data owner ``index``'s initial bottom model: ``factory(input_shape, index)`` (a callable
    or import path; ``""``: :func:`default_bottom`), drawn with seed
    ``1000 * random_state + index + 1`` and initialised by ``init`` (:func:`init_weights`).
    A :class:`ConfigError` if the factory does not import or build a module that takes
    ``input_shape``."""
    made = resolve_factory(factory, "bottom") or default_bottom(channels)
    shape = tuple(int(s) for s in input_shape)
    return build_network(
        made,
        (shape, index),
        field="bottom",
        seed=random_state * 1000 + index + 1,
        input_shape=shape,
        init=lambda m: init_weights(m, init),
        trained_alone=True,
    )


def make_top(
    factory: Any,
    input_shape: Sequence[int],
    n_classes: int,
    *,
    top_channels: int = 64,
    hidden: int = 128,
    random_state: int = 0,
    init: str = "xavier",
) -> nn.Module:
    """The initial top model: ``factory(input_shape, n_classes)`` (a callable or import path;
    ``""``: :func:`default_top`), drawn with seed ``1000 * random_state`` and initialised by
    ``init``. A :class:`ConfigError` unless it maps ``input_shape`` to ``n_classes`` logits."""
    made = resolve_factory(factory, "top") or default_top(top_channels, hidden)
    shape = tuple(int(s) for s in input_shape)
    return build_network(
        made,
        (shape, n_classes),
        field="top",
        seed=random_state * 1000,
        input_shape=shape,
        init=lambda m: init_weights(m, init),
        output=logits(n_classes),
        trained_alone=True,
    )


def build_bottom(
    d: int, channels: int = 32, random_state: int = 0, init: str = "xavier"
) -> nn.Module:
    """The initial bottom model of data owner ``d`` (seed ``1000 * random_state + d + 1``;
    ``init``: :func:`init_weights`)."""
    with torch_seed(random_state * 1000 + d + 1):
        return init_weights(conv_bottom(1, channels), init)


def build_top(
    strip_heights: Sequence[int],
    width: int,
    n_classes: int,
    *,
    channels: int = 32,
    top_channels: int = 64,
    hidden: int = 128,
    random_state: int = 0,
    init: str = "xavier",
) -> nn.Module:
    """The initial top model (seed ``1000 * random_state``) on the stacked ``channels`` maps
    (``init``: :func:`init_weights`)."""
    with torch_seed(random_state * 1000):
        top = conv_top(
            channels,
            int(sum(strip_heights)),
            width,
            n_classes,
            channels=top_channels,
            hidden=hidden,
        )
        return init_weights(top, init)


def build_models(
    strip_heights: Sequence[int],
    width: int,
    n_classes: int,
    *,
    channels: int = 32,
    random_state: int = 0,
    init: str = "xavier",
    **top: int,
) -> tuple[list[nn.Module], nn.Module]:
    """Initial bottom models (one per data owner) and top model, seeded reproducibly.

    Bottom ``d`` is drawn with seed ``1000 * random_state + d + 1``, the top with
    ``1000 * random_state``; the global torch RNG is left as it was. ``init``: how
    (:func:`init_weights`); ``top``: the top model's ``top_channels``
    and ``hidden`` (:func:`build_top`).
    """
    bottoms = [build_bottom(d, channels, random_state, init) for d in range(len(strip_heights))]
    return bottoms, build_top(
        strip_heights, width, n_classes, channels=channels, random_state=random_state, init=init,
        **top,
    )  # fmt: skip
