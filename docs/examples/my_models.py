"""Your own networks (docs/your-own-model.md): the factories a config names.

Multi-VFL: ``params.bottom = "my_models:table_bottom"`` and ``params.top =
"my_models:table_top"`` (with this folder on PYTHONPATH) or ``MultiVFL(bottom=table_bottom,
top=table_top)``. A bottom factory gets the per-sample shape of a data owner's features and
its index; a top factory the per-sample shape of the joined activations and the number of
classes. APFed: ``encoder``, ``head`` and ``decoder`` (``strip_*`` on image strips;
``table_encoder``, ``table_top`` and ``table_decoder`` on table columns); S-FedMV: ``extractor``
(``sequence_extractor``).
"""

import math

import torch
from torch import nn


def table_bottom(input_shape: tuple[int, ...], index: int) -> nn.Module:
    """A data owner's table columns ``(k,)`` -> 16 features."""
    (k,) = input_shape
    return nn.Sequential(nn.LayerNorm(k), nn.Linear(k, 32), nn.ReLU(), nn.Linear(32, 16))


def table_top(input_shape: tuple[int, ...], n_classes: int) -> nn.Module:
    """Every data owner's 16 features, side by side -> the class logits."""
    return nn.Sequential(nn.ReLU(), nn.Linear(input_shape[0], n_classes))


def image_bottom(input_shape: tuple[int, ...], index: int) -> nn.Module:
    """A strip of grey images ``(1, rows, width)`` -> 8 feature maps of its size."""
    conv = nn.Conv2d(input_shape[0], 8, kernel_size=5, padding=2)
    return nn.Sequential(conv, nn.ReLU(), nn.Conv2d(8, 8, kernel_size=3, padding=1), nn.ReLU())


def strip_encoder(input_shape: tuple[int, ...]) -> nn.Module:
    """APFed's ``f_A``: a strip of images ``(C, h, W)`` -> ``h_A``, 16 maps of half its size."""
    conv = nn.Conv2d(input_shape[0], 16, kernel_size=3, padding=1)
    return nn.Sequential(conv, nn.ReLU(), nn.MaxPool2d(2))


def strip_head(input_shape: tuple[int, ...], n_classes: int) -> nn.Module:
    """APFed's ``g_T``: ``h_A`` -> the class logits."""
    return nn.Sequential(nn.Flatten(), nn.Linear(math.prod(input_shape), n_classes))


def strip_decoder(input_shape: tuple[int, ...], output_shape: tuple[int, ...]) -> nn.Module:
    """APFed-R's ``DEC_p``: ``h_A`` ``(16, h/2, W/2)`` -> a passive strip ``(C, h, W)``."""
    return nn.ConvTranspose2d(input_shape[0], output_shape[0], kernel_size=2, stride=2)


class MeanConv(nn.Module):
    """A 1-D convolution over time, averaged over each sequence's own steps."""

    def __init__(self, n_channels: int, width: int = 16) -> None:
        super().__init__()
        self.conv = nn.Conv1d(n_channels, width, kernel_size=5, padding=2)

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.conv(x.transpose(1, 2)))  # (B, width, T)
        steps = lengths.to(x.device)[:, None]
        mask = torch.arange(x.shape[1], device=x.device)[None, :] < steps
        return (h * mask[:, None]).sum(2) / steps


def sequence_extractor(n_channels: int, view: int) -> nn.Module:
    """S-FedMV's extractor of one view: ``(x (B, T, c), lengths (B,))`` -> ``(B, 16)``."""
    return MeanConv(n_channels)


def table_encoder(input_shape: tuple[int, ...]) -> nn.Module:
    """APFed's ``f_A`` on a party's table columns ``(k,)`` -> ``h_A``, 16 features."""
    (k,) = input_shape
    return nn.Sequential(nn.LayerNorm(k), nn.Linear(k, 32), nn.ReLU(), nn.Linear(32, 16))


def table_decoder(input_shape: tuple[int, ...], output_shape: tuple[int, ...]) -> nn.Module:
    """APFed-R's ``DEC_p``: ``h_A`` ``(16,)`` -> exactly a passive party's columns ``(k_p,)``."""
    (k,) = output_shape
    return nn.Sequential(nn.Linear(input_shape[0], 32), nn.ReLU(), nn.Linear(32, k))
