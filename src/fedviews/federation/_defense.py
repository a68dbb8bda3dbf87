"""Defenses: what a run does to reveal less than its algorithm's plain protocol.

A run's defense is one ``[defense]`` table (``kind`` plus that kind's settings),
the same in an estimator (``defense=``), an experiment config and a deployment
config. Each algorithm spec lists the kinds that apply to it
(:attr:`~fedviews.federation.Algorithm.defenses`); any other kind is a
:class:`~fedviews.errors.ConfigError` before anything runs.

Kinds:

* ``"none"`` (the default): the protocol of the paper.
* ``"secagg"``: secure aggregation (:mod:`fedviews.federation._secagg`) of what
  the coordinator only needs summed (MMVFL/V-FedMV: the ``zeta_k Z_k``; H-FedMV:
  ``N_l W^l_k`` and the pooled-scaling sums; S-FedMV: ``N_l``-weighted extractors,
  then as H-FedMV; Multi-VFL: the label owners' top-model updates). ``frac_bits``: the fixed-point resolution
  ``2^-frac_bits`` of the masked values (default 32).
* ``"label_rr"``: label differential privacy by randomized response (Warner 1965;
  Ghazi et al., NeurIPS 2021). Before anything is built, every member that holds
  training labels replaces each label, once, by itself with probability
  ``e^eps / (e^eps + C - 1)`` and otherwise by one of the other ``C - 1`` classes it
  holds, uniformly. Changing one sample's label to another of those classes changes
  the distribution of its randomized label by a factor of at most ``e^eps`` and leaves
  every other one unchanged; everything the run computes and sends afterwards is post-processing
  of the randomized labels, so **the whole run is eps-label-DP** for every label
  owner (``delta = 0``, whatever the number of rounds), against every other party
  and the coordinator. The class set each holder randomizes over is its own, so the
  guarantee covers label changes within it: *which* classes a holder has is not
  hidden, and a holder with a single class (nothing to randomize over) is refused. Test labels are not randomized (only a label owner scores
  with them). ``epsilon``: the budget. ``seed``: the randomness, for reproducible
  simulations only (a seed others know voids the guarantee); without it a
  deployed label owner draws from the operating system and keeps the draw in its
  own run folder, so a resumed run uses the same randomized labels (a second
  draw would spend the budget twice), and an in-process run derives it from the
  run's seed (a simulation).
* ``"grad_dp"``: differentially private gradients at the label owner (DP-SGD with
  per-sample clipping, Abadi et al. 2016), for split learning (Multi-VFL). For every
  sample ``i`` of a batch the label owner computes its own loss gradient with respect
  to the top model's parameters *and* to the activations it received for ``i``,
  clips that joint vector to L2 norm ``clip``, and adds Gaussian noise of standard
  deviation ``sigma = noise_multiplier * 2 * clip`` to every coordinate of what
  leaves the sum (the summed top-model gradient, which updates its model) and of
  every returned activation-gradient row. *Sensitivity:* a sample's label enters
  only its own clipped vector, so replacing one label moves the released vector by
  at most ``2 * clip`` in L2 (replace-one neighbours, as for ``label_rr``); the
  release is a Gaussian mechanism of multiplier ``noise_multiplier``. Everything
  else the label owner sends afterwards (its top-model update, later gradients) is
  post-processing of these releases, and each sample takes part in one release per
  local epoch, so the run composes ``rounds * local_epochs`` of them (no
  amplification by sampling is claimed: batches are a shuffle, not Poisson draws).
  ``clip``: ``C``. ``noise_multiplier``: ``z``; or give ``epsilon`` (and ``delta``)
  instead and ``z`` is calibrated for the run's number of releases with
  dp-accounting's analytic Gaussian (see :func:`gaussian_epsilon`). ``delta``: the ``delta`` of the ledger. The training loss a
  label owner reports is then left out (it is computed from the true labels). The
  run is ``(epsilon, delta)``-label-DP for every label owner, against the data
  owners and the coordinator. ``seed``: as for ``label_rr`` (the noise).
* ``"act_dp"``: differentially private activations at the data owners (feature DP,
  Multi-VFL). Every activation row a data owner sends for a training sample is
  clipped to L2 norm ``clip`` and noised with ``N(0, (noise_multiplier * 2 *
  clip)^2)`` per coordinate, and its bottom model learns by DP-SGD: the per-sample
  gradient of ``<clipped activation_i, received gradient_i>`` clipped to
  ``grad_clip``, summed, noised with ``N(0, (noise_multiplier * 2 * grad_clip)^2)``.
  *Sensitivity:* replacing one sample's features moves each of the two releases by
  at most twice its clip norm; the gradients it receives are functions of released
  rows and labels only (post-processing). A training sample thus enters ``2 *
  rounds * local_epochs`` Gaussian mechanisms of multiplier ``noise_multiplier``
  (the label owners' samples must be disjoint; a :class:`DataError` otherwise), and
  the run is ``(epsilon, delta)``-DP for each data owner's features (replace-one)
  against the label owners and the coordinator. Evaluation rows are clipped, not
  noised, and not covered. ``noise_multiplier`` or ``epsilon``, ``delta``, ``seed``:
  as for ``grad_dp``.
* ``"model_dp"``: client-level differential privacy of the shared models (DP-FedAvg,
  McMahan et al. 2018; H-FedMV). Every round each client clips its model update
  ``W^l - W`` (all views jointly, Frobenius norm) to ``clip`` and adds ``N(0, (
  noise_multiplier * 2 * clip)^2)`` per coordinate before it sends ``W^l``.
  *Sensitivity:* replacing a client's whole dataset (every sample's features and
  labels) moves its clipped update by at most ``2 * clip``; the global model, later
  rounds and the final predictions are post-processing, so a run composes
  ``n_rounds`` Gaussian mechanisms and is ``(epsilon, delta)``-DP for each client's
  whole dataset against the server and the other clients. The local objective is then
  not reported, and pooled scaling is refused (its moments are not noised).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from fedviews._tables import build_dataclass
from fedviews.errors import ConfigError, require

#: the defense kinds fedviews implements
DEFENSES = ("none", "secagg", "label_rr", "grad_dp", "act_dp", "model_dp")
#: the kinds that draw private randomness (a deployed party keeps its draw: see ``seed``)
RANDOMIZED = frozenset({"label_rr", "grad_dp", "act_dp", "model_dp"})
#: the Gaussian kinds (clip + noise, accounted with dp-accounting)
GAUSSIAN = frozenset({"grad_dp", "act_dp", "model_dp"})
_GAUSS = ("epsilon", "noise_multiplier", "clip", "delta", "seed")
#: the settings each kind reads
_READS: dict[str, tuple[str, ...]] = {
    "secagg": ("frac_bits",),
    "label_rr": ("epsilon", "seed"),
    "grad_dp": _GAUSS,
    "model_dp": _GAUSS,
    "act_dp": (*_GAUSS, "grad_clip"),
}


@dataclass(frozen=True)
class Defense:
    """A run's defense: ``kind`` (one of :data:`DEFENSES`) and its settings (each kind reads
    its own: ``frac_bits`` secagg; ``epsilon`` label_rr and the Gaussian kinds; ``clip``,
    ``noise_multiplier``, ``delta`` the Gaussian kinds; ``grad_clip`` act_dp; ``seed`` the
    randomized kinds)."""

    kind: str = "none"
    """The defense: ``none``, ``secagg``, ``label_rr``, ``grad_dp``, ``act_dp`` or ``model_dp``."""
    frac_bits: int = 32
    """``secagg``: fixed-point fraction bits of the masked sums (8..48)."""
    epsilon: float = 0.0
    """The privacy budget ε: ``label_rr``'s, or the target of a Gaussian kind (its noise is calibrated
    to it; give ``epsilon`` or ``noise_multiplier``).
    """
    seed: int | None = None
    """Fixes the defense's private randomness everywhere (reproducible tests; the party warns that this
    voids the guarantee).
    """
    clip: float = 1.0
    """The Gaussian kinds' L2 clip norm (``grad_dp``: per sample; ``act_dp``: per activation row;
    ``model_dp``: per client update).
    """
    noise_multiplier: float = 0.0
    """The Gaussian kinds' noise multiplier ``z`` (noise standard deviation: ``z`` times twice the
    clip norm), instead of ``epsilon``.
    """
    delta: float = 1e-5
    """The Gaussian kinds' δ."""
    grad_clip: float = 1.0
    """``act_dp``: the L2 clip norm of the bottom model's per-sample gradients."""

    def validate(self) -> None:
        if self.kind not in DEFENSES:
            raise ConfigError(f"unknown defense.kind {self.kind!r}; fedviews has {list(DEFENSES)}")
        if isinstance(self.frac_bits, bool) or not 8 <= int(self.frac_bits) <= 48:
            raise ConfigError(
                f"defense.frac_bits must be an integer in 8..48, got {self.frac_bits!r}"
            )
        eps = self.epsilon
        if self.kind == "label_rr" and (
            isinstance(eps, bool) or not isinstance(eps, (int, float)) or not 0 < eps < 50
        ):
            raise ConfigError(f"defense.epsilon of label_rr must be in (0, 50), got {eps!r}")
        if self.kind in GAUSSIAN:
            self._check_gaussian()
        if self.seed is not None and (
            isinstance(self.seed, bool)
            or not isinstance(self.seed, int)
            or not 0 <= self.seed < 2**31
        ):
            raise ConfigError(f"defense.seed must be an integer in [0, 2**31), got {self.seed!r}")
        self._check_applies()

    def _check_applies(self) -> None:
        """A setting that the kind does not read (``epsilon`` of ``secagg``: the user believes
        a privacy budget is spent, and none is) is a :class:`ConfigError`, not ignored."""
        reads = _READS.get(self.kind, ())
        default = Defense()
        ignored = [
            f.name
            for f in fields(self)
            if f.name not in (*reads, "kind") and getattr(self, f.name) != getattr(default, f.name)
        ]
        if ignored:
            takes = ", ".join(f"defense.{k}" for k in reads) or "no setting"
            raise ConfigError(
                f"defense.{ignored[0]} does not apply to defense.kind {self.kind!r} (it takes "
                f"{takes})"
            )

    def _check_gaussian(self) -> None:
        for key, lo, hi in (
            ("clip", 0.0, math.inf),
            ("grad_clip", 0.0, math.inf),
            ("noise_multiplier", 0.0, math.inf),
            ("epsilon", 0.0, math.inf),
            ("delta", 0.0, 1.0),
        ):
            v = getattr(self, key)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                raise ConfigError(f"defense.{key} must be a finite number, got {v!r}")
            if not lo <= v < hi or (key in ("clip", "grad_clip", "delta") and v == 0):
                raise ConfigError(
                    f"defense.{key} of {self.kind} must be in ({lo}, {hi}), got {v!r}"
                )
        if (self.noise_multiplier > 0) == (self.epsilon > 0):
            raise ConfigError(
                f"{self.kind} takes either defense.noise_multiplier (the noise) or defense.epsilon "
                f"(the budget, noise calibrated to it), not {'both' if self.epsilon else 'neither'}"
            )

    def draws(self, data: Any) -> bool:
        """Whether a member holding ``data`` (a :class:`~fedviews.data.PartyData`) draws
        private randomness under this defense: the label holders for ``label_rr``,
        ``grad_dp`` and ``model_dp`` (H-FedMV's clients), the feature holders for
        ``act_dp``."""
        if self.kind == "act_dp":
            return bool(data.features.size)
        return self.kind in RANDOMIZED and data.y is not None

    @property
    def secagg_bits(self) -> int | None:
        """The fixed-point bits of secure sums under ``secagg``; ``None`` otherwise."""
        return int(self.frac_bits) if self.kind == "secagg" else None

    @property
    def active(self) -> bool:
        return self.kind != "none"

    @classmethod
    def of(cls, value: Any, *, validate: bool = True) -> Defense:
        """A defense from ``None`` (none), a kind (``"secagg"``), a table or a :class:`Defense`;
        ``validate=False`` where the algorithm's ``check_defense`` follows (it says first
        whether the kind applies, then validates)."""
        if value is None:
            value = cls()
        elif isinstance(value, str):
            value = cls(kind=value)
        elif isinstance(value, Mapping):
            value = build_dataclass(cls, value, "defense")
        if not isinstance(value, cls):
            raise ConfigError(
                f"defense must be a kind (e.g. 'secagg'), a table or a Defense, got {value!r}"
            )
        if validate:
            value.validate()
        return value


def randomized_response(y: np.ndarray, epsilon: float, rng: np.random.Generator) -> np.ndarray:
    """``y`` with every label kept with probability ``e^eps / (e^eps + C - 1)`` and otherwise
    replaced by one of the other ``C - 1`` classes of ``y``, uniformly (eps-label-DP)."""
    classes, idx = np.unique(y, return_inverse=True)
    C = len(classes)
    if C < 2:
        return np.array(y, copy=True)
    keep = rng.random(len(idx)) < math.exp(epsilon) / (math.exp(epsilon) + C - 1)
    other = (idx + rng.integers(1, C, size=len(idx))) % C  # uniform over the other classes
    return classes[np.where(keep, idx, other)]


def gaussian_epsilon(noise_multiplier: float, releases: int, delta: float) -> float:
    """The ``epsilon`` at ``delta`` of ``releases`` Gaussian mechanisms of multiplier
    ``noise_multiplier`` (noise std / L2 sensitivity).

    ``T`` adaptively composed Gaussian mechanisms of multiplier ``z`` are exactly one
    Gaussian mechanism of multiplier ``z / sqrt(T)`` (their privacy-loss distributions
    compose to a Gaussian one), whose tight ``(epsilon, delta)`` curve is dp-accounting's
    analytic ``get_epsilon_gaussian`` (Balle & Wang 2018). A test checks it against the
    PLD accountant's composition and the closed form."""
    dpa: Any = require("dp_accounting", "privacy")
    return float(dpa.get_epsilon_gaussian(noise_multiplier / math.sqrt(releases), delta))


def noise_multiplier(defense: Defense, releases: int) -> float:
    """The Gaussian multiplier of a ``grad_dp`` defense over ``releases`` releases: the
    configured one, or the smallest that keeps the run within ``(epsilon, delta)``
    (dp-accounting's analytic ``get_sigma_gaussian``, times ``sqrt(releases)``: see
    :func:`gaussian_epsilon`)."""
    if defense.noise_multiplier > 0:
        return float(defense.noise_multiplier)
    dpa: Any = require("dp_accounting", "privacy")
    sigma = float(dpa.get_sigma_gaussian(float(defense.epsilon), float(defense.delta)))
    return sigma * math.sqrt(int(releases))
