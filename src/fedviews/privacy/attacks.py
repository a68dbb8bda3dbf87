"""Leakage attacks that see only what their attacker received (plus declared aux knowledge).

The numerical attacks (:mod:`fedviews.privacy._attacks`) take arrays; the audit here
keeps the attacker side and the scoring side apart (see docs/privacy/leakage.md):

* an attack gets the :class:`~fedviews.federation.Observation` list that the
  algorithm reads out of the attacker's :class:`~fedviews.federation.Recording`
  (what it received, nothing else) plus :class:`AuxKnowledge` it declares
  (true labels of ``labelled`` rows, raw features of ``known_features`` rows);
* :class:`Truth` is the experimenter's: every party's aligned labels and features,
  used only to pick the auxiliary rows an attacker is granted and to score.
"""

from __future__ import annotations

import warnings
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fedviews.data import read_npz, save_npz
from fedviews.errors import ConfigError, DataError, DataWarning
from fedviews.federation import Algorithm, Observation, Recording, RunSpec
from fedviews.privacy._attacks import (
    auc,
    binary_scores,
    chance_level,
    label_recovery,
    labels_by_completion,
    labels_by_direction,
    labels_from_consensus,
    labels_from_softmax_gradient,
    reconstruct_features,
    reconstruction_quality,
)

__all__ = [
    "ATTACKS",
    "Attack",
    "AuxKnowledge",
    "LeakageRow",
    "Reconstruction",
    "Truth",
    "attack_observations",
    "audit",
    "check_attacks",
    "auc",
    "binary_scores",
    "chance_level",
    "label_recovery",
    "labels_by_completion",
    "labels_by_direction",
    "labels_from_consensus",
    "labels_from_softmax_gradient",
    "reconstruct_features",
    "reconstruction_quality",
]


@dataclass(frozen=True)
class AuxKnowledge:
    """What every attacker is granted besides its messages, declared and counted in the table.

    ``labelled``: rows (of an observation's alignment group) whose true label the
    attacker knows — e.g. its own customers whose outcome it learned elsewhere.
    ``known_features``: rows whose victim's raw features the attacker knows — e.g.
    public records of some of the shared samples. Rows are drawn at random (``seed``).
    """

    labelled: int = 40
    known_features: int = 500
    seed: int = 0

    def validate(self) -> None:
        if self.labelled < 0 or self.known_features < 0:
            raise ConfigError("auxiliary knowledge counts (labelled, known_features) must be >= 0")


@dataclass
class Truth:
    """The experimenter's answer key: ``labels[(party, group)]`` and ``features[(party, group)]``,
    the aligned rows of every party in every group it is in. Never given to an attacker."""

    labels: dict[tuple[str, str], np.ndarray] = field(default_factory=dict)
    features: dict[tuple[str, str], np.ndarray] = field(default_factory=dict)
    lengths: dict[tuple[str, str], np.ndarray] = field(default_factory=dict)  # of sequences

    @classmethod
    def of_run(cls, locals_: Mapping[str, Any]) -> Truth:
        """From an in-process run's ``locals`` (:class:`~fedviews.federation.Local` per member).
        Image features in ``uint8`` are scaled to ``[0, 1]``, as the networks see them."""
        truth = cls()
        for party, local in locals_.items():
            for group in local.rows:
                _, X, y = local.take(group)
                if y is not None:
                    truth.labels[(party, group)] = np.asarray(y)
                if X.size:
                    X = np.asarray(X)
                    truth.features[(party, group)] = X / 255.0 if X.dtype == np.uint8 else X
                split = local.groups[group].split
                lengths = local.data.lengths if split == "train" else local.data.lengths_test
                if lengths is not None:
                    truth.lengths[(party, group)] = lengths[local.rows[group]]
        return truth

    def save(self, path: Path) -> None:
        tables = {"labels": self.labels, "features": self.features, "lengths": self.lengths}
        arrays = {f"{what}/{p}/{g}": v for what, t in tables.items() for (p, g), v in t.items()}
        save_npz(Path(path), **arrays)

    @classmethod
    def load(cls, path: Path) -> Truth:
        truth = cls()
        for key, v in read_npz(Path(path)).items():
            what, party, group = key.split("/", 2)
            getattr(truth, what)[(party, group)] = v
        return truth

    def get(self, what: str, party: str, group: str) -> np.ndarray:
        table = self.labels if what == "labels" else self.features
        if (party, group) not in table:
            raise DataError(f"no true {what} of {party!r} in group {group!r} to score against")
        return table[(party, group)]


@dataclass(frozen=True)
class LeakageRow:
    """One line of the leakage table."""

    algorithm: str
    attacker: str
    role: str
    observation: str
    attack: str
    secret: str  # "labels of X" / "features of X"
    aux: str  # the declared auxiliary knowledge, in words
    metric: str
    value: float
    chance: float
    n_scored: int
    group: str = "train"  # the alignment group of the rows scored (e.g. "test")


@dataclass
class Reconstruction:
    """Example reconstructions of one feature-reconstruction attack, for the figure."""

    title: str
    true: np.ndarray
    guess: np.ndarray


#: one scored result: ``(metric, value, chance, rows scored)``
_Score = tuple[str, float, float, int]


@dataclass(frozen=True)
class _Context:
    truth: Truth
    aux: AuxKnowledge
    examples: list[Reconstruction] | None
    attacker: str


def _aux_rows(
    n: int, k: int, obs: Observation, ctx: _Context, *, spare: int = 1, what: str = "labelled"
) -> np.ndarray:
    """``k`` of the ``n`` rows (leaving at least ``spare`` to score), drawn from a stream of
    their own for this attacker, observation and kind of aux, so the draw does not depend
    on what ran before; a :class:`DataWarning` where ``k`` (``params.<what>``) asks for more
    than that (the rows it uses are in the table, the score is on what is left)."""
    key = f"{ctx.attacker}/{obs.name}/{obs.group}/{k}".encode()
    rng = np.random.default_rng([ctx.aux.seed, zlib.crc32(key)])
    size = min(k, max(n - spare, 0))
    if size < k:
        warnings.warn(
            f"params.{what} = {k} is more than {ctx.attacker!r} can know of {obs.name!r} "
            f"({n} rows{f', {spare} left to score' if spare else ''}): {size} used",
            DataWarning,
            stacklevel=3,
        )
    return np.sort(rng.choice(n, size=size, replace=False))


def _labels(obs: Observation, ctx: _Context) -> np.ndarray:
    assert obs.labels_of is not None
    return ctx.truth.get("labels", obs.labels_of, obs.group)[obs.rows]


def _no_aux_labels(fn: Any) -> Any:
    def attack(obs: Observation, ctx: _Context) -> tuple[str, list[_Score]]:
        y = _labels(obs, ctx)
        pred = fn(obs.values.reshape(len(obs.rows), -1))
        return "none", [("label recovery %", label_recovery(pred, y), chance_level(y), len(y))]

    return attack


def _with_aux_labels(fn: Any) -> Any:
    def attack(obs: Observation, ctx: _Context) -> tuple[str, list[_Score]]:
        y, n = _labels(obs, ctx), len(obs.rows)
        idx = _aux_rows(n, ctx.aux.labelled, obs, ctx)
        pred = fn(obs.values.reshape(n, -1), aux_rows=idx, aux_y=y[idx])
        rec = label_recovery(pred, y, exclude_rows=idx)
        score = ("label recovery %", rec, chance_level(y, exclude_rows=idx), n - len(idx))
        return f"{len(idx)} labelled rows", [score]

    return attack


def _reconstruction(obs: Observation, ctx: _Context) -> tuple[str, list[_Score]]:
    assert obs.features_of is not None
    n = len(obs.rows)
    X = ctx.truth.get("features", obs.features_of, obs.group)[obs.rows]
    idx = _aux_rows(n, ctx.aux.known_features, obs, ctx, what="known_features")
    X_hat = reconstruct_features(obs.values.reshape(n, -1), aux_rows=idx, X_aux=X[idx])
    rest = np.setdiff1d(np.arange(n), idx)
    got = reconstruction_quality(X_hat[rest], X[rest])
    base = reconstruction_quality(np.broadcast_to(X[idx].mean(0), X[rest].shape), X[rest])
    if ctx.examples is not None:
        pick = rest[:6]
        ctx.examples.append(Reconstruction(f"{ctx.attacker} ← {obs.name}", X[pick], X_hat[pick]))
    # SSIM only where it is defined (images); a NaN row would say nothing and compare unequal
    scores = [(m, got[m], base[m], len(rest)) for m in ("ssim", "mse") if np.isfinite(got[m])]
    return f"{len(idx)} rows' raw features", scores


def _model_on_known_features(obs: Observation, ctx: _Context) -> tuple[str, list[_Score]]:
    """The received model applied to victim rows whose features the attacker knows (aux)."""
    assert obs.predict is not None and obs.labels_of is not None
    y = ctx.truth.get("labels", obs.labels_of, obs.group)
    X = ctx.truth.get("features", obs.labels_of, obs.group)
    idx = _aux_rows(
        len(y), ctx.aux.known_features, obs, ctx, spare=0, what="known_features"
    )  # scored on these
    lengths = ctx.truth.lengths.get((obs.labels_of, obs.group))
    pred = obs.predict(X[idx], None if lengths is None else lengths[idx])
    score = ("label recovery %", label_recovery(pred, y[idx]), chance_level(y[idx]), len(idx))
    return f"{len(idx)} rows' raw features", [score]


@dataclass(frozen=True)
class Attack:
    """An attack of the audit: which observations it applies to and what aux it needs."""

    title: str
    kinds: tuple[str, ...]  # the observation kinds it reads
    secret: str  # "labels" or "features"
    needs: str | None  # the AuxKnowledge field it needs (> 0), if any
    run: Any

    def victim(self, obs: Observation) -> str | None:
        """Whose secret ``obs`` reveals to this attack (``None``: it does not apply)."""
        whose = obs.labels_of if self.secret == "labels" else obs.features_of
        return whose if obs.kind in self.kinds else None


#: the attacks by the name a config uses (``params.attacks``)
ATTACKS: dict[str, Attack] = {
    "consensus": Attack(
        "argmax of the consensus", ("consensus",), "labels", None,
        _no_aux_labels(labels_from_consensus),
    ),
    "batch_label": Attack(
        "batch label inference", ("softmax_gradient",), "labels", None,
        _no_aux_labels(labels_from_softmax_gradient),
    ),
    "direction": Attack(
        "gradient direction", ("gradient", "softmax_gradient"), "labels", "labelled",
        _with_aux_labels(labels_by_direction),
    ),
    "completion": Attack(
        "model completion", ("representation",), "labels", "labelled",
        _with_aux_labels(labels_by_completion),
    ),
    "model": Attack(
        "received model on known features", ("model",), "labels", "known_features",
        _model_on_known_features,
    ),
    "reconstruction": Attack(
        "inverse model (ridge)", ("representation",), "features", "known_features",
        _reconstruction,
    ),
}  # fmt: skip


def check_attacks(names: Sequence[str], aux: AuxKnowledge) -> list[str]:
    """The attacks to run (all when ``names`` is empty), each known and with the aux it needs."""
    aux.validate()
    for name in names:
        if name not in ATTACKS:
            raise ConfigError(f"unknown attack {name!r}; the attacks are {sorted(ATTACKS)}")
        need = ATTACKS[name].needs
        if need is not None and not getattr(aux, need):
            raise ConfigError(f"the attack {name!r} needs auxiliary knowledge: set {need} > 0")
    if names:
        return list(names)
    return [n for n, a in ATTACKS.items() if a.needs is None or getattr(aux, a.needs)]


def attack_observations(
    observations: Sequence[Observation],
    truth: Truth,
    aux: AuxKnowledge,
    *,
    algorithm: str,
    attacker: str,
    role: str,
    attacks: Sequence[str] = (),
    examples: list[Reconstruction] | None = None,
) -> list[LeakageRow]:
    """Every chosen attack (default: all that aux allows) on every observation it applies to,
    scored on the rows not granted as aux."""
    ctx = _Context(truth, aux, examples, attacker)
    names = check_attacks(attacks, aux)
    out: list[LeakageRow] = []
    for obs in observations:
        for name in names:
            attack = ATTACKS[name]
            whose = attack.victim(obs)
            if whose is None:
                continue
            try:
                note, scores = attack.run(obs, ctx)
            except ConfigError as exc:  # e.g. one class among the drawn aux rows
                raise ConfigError(f"{attacker}: {name} on {obs.name}: {exc}") from exc
            out += [
                LeakageRow(
                    algorithm, attacker, role, obs.name, attack.title,
                    f"{attack.secret} of {whose}", note, metric, value, chance, n, obs.group,
                )
                for metric, value, chance, n in scores
            ]  # fmt: skip
    return out


def audit(
    algo: Algorithm,
    run: RunSpec,
    setup: Mapping[str, Any],
    recordings: Mapping[str, Recording],
    truth: Truth,
    aux: AuxKnowledge,
    *,
    attacks: Sequence[str] = (),
    examples: list[Reconstruction] | None = None,
) -> list[LeakageRow]:
    """Attack every recording (one per attacker) with what its observations allow.

    ``attacks`` names the attacks to run (default: all that ``aux`` allows); one that
    applies to nothing any attacker observed is a :class:`ConfigError` (it does not
    apply to this algorithm or these attackers).
    """
    check_attacks(attacks, aux)
    rows: list[LeakageRow] = []
    for name, rec in recordings.items():
        obs = algo.observations(run, setup, rec)
        rows += attack_observations(
            obs, truth, aux, algorithm=run.algorithm, attacker=name, role=rec.role,
            attacks=attacks, examples=examples,
        )  # fmt: skip
    titles = {r.attack for r in rows}
    for name in attacks:
        if ATTACKS[name].title not in titles:
            raise ConfigError(
                f"the attack {name!r} does not apply to {run.algorithm} with the attackers "
                f"{sorted(recordings)}: none of them observes {'/'.join(ATTACKS[name].kinds)} values "
                f"that depend on another party's {ATTACKS[name].secret}"
            )
    return rows
