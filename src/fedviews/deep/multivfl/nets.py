"""Multi-VFL's networks: convolutional bottom and top models, seeded builders.

A *bottom* model runs at a data owner on its strip of the image; a *top*
model runs at a label owner on the combined cut-layer activations. Default
sizes are those of Multi-VFL (Mugunthan et al.): each bottom is one 3x3
convolution 1 → 32 channels, the top is one convolution and two linear layers.

:class:`SplitNet` is the same network in one process (all bottoms + the top),
used as the centralized reference in tests and benchmarks.
"""

from __future__ import annotations

from collections.abc import Sequence

from fedviews.deep._common import INITS, torch_seed
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
    """Stack the data owners' ``(n, C, h_d, w)`` activations along the height axis.

    Strip ``d`` covers image rows ``h_0 + ... + h_{d-1}`` onwards, so the result
    is the ``(n, C, sum h_d, w)`` feature map of the whole image.
    """
    return torch.cat(list(activations), dim=2)


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
