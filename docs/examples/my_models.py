"""Your own networks in Multi-VFL (docs/your-own-model.md): the factories a config names.

``params.bottom = "my_models:table_bottom"`` and ``params.top = "my_models:table_top"`` (with
this folder on PYTHONPATH) or ``MultiVFL(bottom=table_bottom, top=table_top)``. A bottom
factory gets the per-sample shape of a data owner's features and its index; a top factory
the per-sample shape of the joined activations and the number of classes.
"""

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
