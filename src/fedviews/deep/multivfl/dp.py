"""Multi-VFL's Gaussian defenses inside a party's step: DP-SGD at the label owner
(``grad_dp``) and at a data owner (``act_dp``), per-sample clipping with ``torch.func``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from fedviews.deep.multivfl.nets import combine_activations
from fedviews.errors import MissingDependency

try:
    import torch
    from torch import nn
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise MissingDependency("torch", "torch") from exc


@dataclass(frozen=True)
class GradDP:
    """A party's Gaussian defense (``grad_dp`` at a label owner, ``act_dp`` at a data owner;
    :mod:`fedviews.federation._defense`): per-sample clip norm ``clip``, noise std ``sigma``
    (``noise_multiplier * 2 * clip``), and the private random stream its noise is drawn
    from: one generator per ``key`` (round, batch, ...), so a round replayed after a resume
    releases the same values rather than fresh ones, and concurrent requests draw the
    same noise in any order. ``grad_clip``, ``grad_sigma``: the same for the per-sample
    gradients of a data owner's bottom model (``act_dp``)."""

    clip: float
    sigma: float
    stream: np.random.SeedSequence
    grad_clip: float = 1.0
    grad_sigma: float = 0.0

    def generator(self, key: Sequence[int], device: torch.device) -> torch.Generator:
        seq = np.random.SeedSequence([*self.stream.generate_state(4), *map(int, key)])
        gen = torch.Generator(device=device)
        gen.manual_seed(int(seq.generate_state(1, np.uint64)[0] >> np.uint64(1)))
        return gen


def _clip_scale(per_sample: Sequence[torch.Tensor], clip: float) -> torch.Tensor:
    """``min(1, clip / ||v_i||)`` for every sample ``i`` of the joint vectors ``v_i`` whose
    parts are ``per_sample`` (each ``(B, ...)``)."""
    sq = sum(g.flatten(1).pow(2).sum(1) for g in per_sample)
    assert isinstance(sq, torch.Tensor)
    return (clip / (torch.sqrt(sq) + 1e-12)).clamp(max=1.0)


def _scaled(g: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    return g * scale.view(-1, *([1] * (g.dim() - 1)))


def gaussian_noise(
    sigma: float, shape: Sequence[int], like: torch.Tensor, gen: torch.Generator
) -> torch.Tensor:
    if sigma == 0:
        return torch.zeros(tuple(shape), dtype=like.dtype, device=like.device)
    return sigma * torch.randn(tuple(shape), generator=gen, dtype=like.dtype, device=like.device)


def private_gradients(
    top: nn.Module,
    acts: Sequence[torch.Tensor],
    y: torch.Tensor,
    dp: GradDP,
    gen: torch.Generator,
) -> tuple[dict[str, torch.Tensor], list[torch.Tensor]]:
    """DP-SGD's step at the label owner for one batch of ``B`` rows (``grad_dp``).

    Per sample ``i``: the gradient of its own cross-entropy with respect to the top
    model's parameters and to its activation rows (``torch.func``: ``vmap`` of ``grad``),
    the joint vector clipped to L2 norm ``dp.clip``. Returns the top-model gradient
    ``(sum_i clipped_i + N(0, sigma^2 I)) / B`` and each data owner's activation gradient,
    row ``i`` = ``(clipped_i + N(0, sigma^2 I)) / B``: with no clipping and no noise,
    exactly the gradients of the batch's mean loss (what the plain protocol sends).
    Noise is drawn from ``gen`` in a fixed order (parameters, then owners).
    """
    from torch.func import functional_call, grad, vmap

    params = {k: v.detach() for k, v in top.named_parameters()}

    def loss_one(
        p: dict[str, torch.Tensor], parts: tuple[torch.Tensor, ...], target: torch.Tensor
    ) -> torch.Tensor:
        x = combine_activations([a.unsqueeze(0) for a in parts])
        return nn.functional.cross_entropy(functional_call(top, p, (x,)), target.unsqueeze(0))

    parts = tuple(a.detach() for a in acts)
    g_par, g_act = vmap(grad(loss_one, argnums=(0, 1)), in_dims=(None, 0, 0))(params, parts, y)
    scale = _clip_scale([*g_par.values(), *g_act], dp.clip)
    B = len(y)
    par = {
        k: (_scaled(g, scale).sum(0) + gaussian_noise(dp.sigma, g.shape[1:], g, gen)) / B
        for k, g in g_par.items()
    }
    act = [(_scaled(g, scale) + gaussian_noise(dp.sigma, g.shape, g, gen)) / B for g in g_act]
    return par, act


def clip_rows(a: torch.Tensor, clip: float) -> torch.Tensor:
    """Every row (sample) of ``a`` scaled down to L2 norm at most ``clip``."""
    return _scaled(a, _clip_scale([a], clip))


def private_bottom_gradients(
    bottom: nn.Module,
    x: torch.Tensor,
    grad_out: torch.Tensor,
    dp: GradDP,
    gen: torch.Generator,
) -> dict[str, torch.Tensor]:
    """DP-SGD's step at a data owner for one batch of ``B`` rows (``act_dp``).

    ``grad_out``: the gradient received for the (clipped, noised) activations it sent,
    i.e. ``(1/B) d loss_i / d a_i`` per row. Per sample ``i``: the gradient of
    ``<clip_rows(bottom(x_i)), B * grad_out_i>`` with respect to the bottom's
    parameters, clipped to ``dp.grad_clip``; returns ``(sum_i clipped_i + N(0,
    grad_sigma^2 I)) / B``. With no clipping and no noise: exactly what
    ``out.backward(grad_out)`` accumulates (the plain protocol).
    """
    from torch.func import functional_call, grad, vmap

    params = {k: v.detach() for k, v in bottom.named_parameters()}
    B = len(x)

    def surrogate(p: dict[str, torch.Tensor], xi: torch.Tensor, gi: torch.Tensor) -> torch.Tensor:
        a = functional_call(bottom, p, (xi.unsqueeze(0),))
        return (clip_rows(a, dp.clip) * gi.unsqueeze(0)).sum()

    h = vmap(grad(surrogate), in_dims=(None, 0, 0))(params, x, grad_out * B)
    scale = _clip_scale(list(h.values()), dp.grad_clip)
    return {
        k: (_scaled(g, scale).sum(0) + gaussian_noise(dp.grad_sigma, g.shape[1:], g, gen)) / B
        for k, g in h.items()
    }
