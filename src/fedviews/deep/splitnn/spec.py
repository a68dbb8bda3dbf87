"""A plain split neural network, defined once: the baseline the leakage audit compares with.

The setting VFLAIR and most label-inference papers use: every party holds a strip
of every image and a bottom MLP that maps it to ``C`` logits; the label owner
(role ``active``, ``federation.label_owner``) holds the labels, sums its own
logits and the passive parties' (the top model is the sum, nothing trainable),
takes the softmax cross-entropy and sends each passive party the gradient of
the loss w.r.t. *its* logits. That gradient is ``(softmax(z) - onehot(y)) / B``
per row: its only negative entry is the label (batch label inference). No
published system of fedviews works like this; it is here so that the audit has
the peers' reference point (:mod:`fedviews.privacy.attacks`).

Only ``logits`` (passive → active) and ``grad_logits`` (active → passive) cross;
the coordinator only starts the epochs. One round trip per batch: the label owner's
``splitnn.forward`` request for batch ``b + 1`` carries the gradient of batch ``b``, which
the passive party applies (one SGD step) before its forward pass; the epoch's last gradient
goes alone (``splitnn.backward``). The parties live in
:mod:`fedviews.deep.splitnn.parties` (torch), imported when one is built.

Networks: ``params.bottom`` and ``params.top`` name user factories
(:mod:`fedviews.deep.splitnn.parties`); with a top model, the label owner feeds it the
parties' bottom outputs joined (its own first) instead of summing them. Every party may
hold table columns ``(n, k)`` instead of image strips. The setup holds every party's
per-sample input shape (``input/<party>``), from which the label owner derives the
shapes its peers send.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np

from fedviews._params import COUNT, DEVICE, FACTORY, FLAG, POSITIVE, Checked
from fedviews.data import PartyData, demo_image_split
from fedviews.deep._common import last_epoch_seen
from fedviews.deep._factory import (
    parse_shape,
    reported_shape,
    resolve_factory,
    shape_info,
    shape_text,
)
from fedviews.deep._strips import (
    EPOCHS,
    MOMENTUM,
    WEIGHT_DECAY,
    ActivePassive,
    EpochDriver,
    active_of,
    cut_images,
    party_seeds,
    passives_of,
    sgd_settings,
)
from fedviews.errors import ConfigError, DataError
from fedviews.federation import (
    AlignGroup,
    Coordinator,
    Local,
    Observation,
    Party,
    Prediction,
    PrivacyPolicy,
    Recording,
    Roster,
    RunSpec,
    register_algorithm_spec,
)

if TYPE_CHECKING:
    from fedviews.deep.splitnn.parties import SplitNNActive, SplitNNPassive


@dataclass(frozen=True)
class SplitNNParams(Checked):
    """Hyper-parameters of the split NN baseline (VFLAIR's setting): one declaration for the
    in-process audits and deployments (``[params]``)."""

    epochs: int = field(default=5, metadata=EPOCHS)
    """Training epochs."""
    batch_size: int = field(default=64, metadata=COUNT)
    """Mini-batch size."""
    lr: float = field(default=0.01, metadata=POSITIVE)
    """SGD learning rate of every party."""
    momentum: float = field(default=0.9, metadata=MOMENTUM)
    """SGD momentum of every party."""
    weight_decay: float = field(default=0.0, metadata=WEIGHT_DECAY)
    """SGD weight decay of every party."""
    hidden: int = field(default=128, metadata=COUNT)
    """Hidden width of the bottom MLPs."""
    evaluate: bool = field(default=True, metadata=FLAG)
    """The label owner reports test accuracy after every epoch (every party then needs test strips).
    """
    pad: bool = field(default=False, metadata=FLAG)
    """Demo data: zero rows so that the image height divides into equal strips."""
    device: str = field(default="auto", metadata=DEVICE)
    """Torch device: ``"auto"``, ``"cpu"``, ``"cuda"`` or ``"mps"``."""
    bottom: str | Callable[..., Any] = field(default="", metadata=FACTORY)
    """Factory of every party's bottom model, ``bottom(input_shape, n_classes)``: a module on
    per-sample inputs of ``input_shape`` (a strip's ``(1, h, W)``, table columns' ``(k,)``)
    returning ``n_classes`` logits (with a ``top``: any vector). ``""``: the MLP of ``hidden``
    units."""
    top: str | Callable[..., Any] = field(default="", metadata=FACTORY)
    """Factory of the label owner's top model, ``top(input_shape, n_classes)``: a module on the
    parties' bottom outputs joined (per-sample ``(sum e_p,)``, the label owner's first)
    returning ``n_classes`` logits. ``""``: the sum of the parties' logits (nothing trained)."""

    def cross_check(self, n_parties: int | None) -> None:
        """An import path of ``bottom`` or ``top`` must import a callable (what it builds is
        checked where the shapes are known, when the parties are built)."""
        resolve_factory(self.bottom, "bottom")
        resolve_factory(self.top, "top")


def splitnn_policy(evaluate: bool) -> PrivacyPolicy:
    """The barrier: logits up (replies to ``splitnn.forward`` and ``splitnn.infer``), their
    gradients down (with the request of the next ``splitnn.forward``, or in the epoch's last
    ``splitnn.backward``); the coordinator only starts epochs."""
    kinds = ["splitnn.epoch", "splitnn.forward", "splitnn.backward"]
    return PrivacyPolicy.of(
        "splitnn",
        {("passive", "active"): ["logits"], ("active", "passive"): ["grad_logits"]},
        kinds={
            ("active", "passive"): kinds + (["splitnn.infer"] if evaluate else []),
            ("coordinator", "active"): ["splitnn.train"],
        },
    )


def _input_shape(features_shape: tuple[int, ...]) -> tuple[int, ...]:
    """A party's per-sample input shape as the setup reports it (an image strip ``(h, W)`` as
    one channel ``(1, h, W)``)."""
    shape = tuple(features_shape[1:])
    return (1, *shape) if len(shape) == 2 else shape


def epoch_seed(seed: int | None, epoch: int) -> int:
    """The shuffling seed of ``epoch`` that the coordinator hands to the label owner."""
    return int(np.random.default_rng([int(seed or 0), epoch]).integers(2**31))


class SplitNNAlgorithm(ActivePassive):
    """A split NN: bottom MLPs at every party, the label owner sums their logits."""

    name = "splitnn"
    Params = SplitNNParams
    tables = True

    def check_federation(self, fed: Roster) -> None:
        if fed.label_owners or fed.label_owner not in fed.parties or len(fed.parties) < 2:
            raise ConfigError(
                "splitnn needs at least two parties, one of them federation.label_owner"
            )

    def groups(self, run: RunSpec) -> list[AlignGroup]:
        parties = tuple(run.federation.parties)
        out = [AlignGroup("train", parties)]
        return out + [AlignGroup("test", parties, "test")] if run.params.evaluate else out

    def check_data(self, run: RunSpec, party: str, data: PartyData) -> None:
        super().check_data(run, party, data)
        if run.params.evaluate and data.X_test is None:
            raise DataError(f"{party!r}: evaluate needs its test strips (ids_test, X_test)")
        if run.params.evaluate and party == active_of(run) and data.y_test is None:
            raise DataError(f"{party!r}: evaluate needs the test labels (y_test)")

    def party_info(self, run: RunSpec, party: str, local: Local) -> dict[str, Any]:
        info: dict[str, Any] = shape_info("input", _input_shape(local.data.features.shape))
        if party != active_of(run):
            return info
        y = np.asarray(local.take("train")[2])
        if not np.issubdtype(y.dtype, np.integer) or (y < 0).any():
            raise DataError(f"{party!r}: labels must be class indices 0..C-1 (integers)")
        # (no aligned row: the setup refuses the run, naming the group that shares no ID)
        return {**info, "n_classes": int(y.max()) + 1 if y.size else 0}

    def make_setup(self, run: RunSpec, infos: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
        parties = run.federation.parties
        return {
            "n_classes": int(infos[active_of(run)]["n_classes"]),
            **{f"input/{p}": shape_text(reported_shape(infos[p], "input", p)) for p in parties},
        }

    def policy(self, run: RunSpec, setup: Mapping[str, Any]) -> PrivacyPolicy:
        return splitnn_policy(bool(run.params.evaluate))

    def build_party(
        self, run: RunSpec, party: str, local: Local, setup: Mapping[str, Any]
    ) -> SplitNNActive | SplitNNPassive:
        from fedviews.deep._common import resolve_device
        from fedviews.deep.splitnn.parties import SplitNets, SplitNNActive, SplitNNPassive

        p: SplitNNParams = run.params
        parties = run.federation.parties
        seeds = party_seeds(run.seed, len(parties) + 1)  # the last: the top model's
        nets = SplitNets(p.bottom, p.top, int(setup["n_classes"]), p.hidden)
        _, X, y = local.take("train")
        X_test = local.take("test")[1] if p.evaluate else None
        kw: dict[str, Any] = {"nets": nets, "seed": seeds[parties.index(party)]}
        kw |= sgd_settings(p, resolve_device(p.device))
        if party != active_of(run):
            return SplitNNPassive(party, X, X_test, **kw)
        y_test = local.take("test")[2] if p.evaluate else None
        assert y is not None  # check_data: the label owner holds labels
        inputs = {q: parse_shape(setup[f"input/{q}"], f"input/{q}") for q in passives_of(run)}
        return SplitNNActive(
            party, X, y, X_test, y_test, inputs, p.batch_size, top_seed=seeds[-1], **kw
        )

    def build_coordinator(
        self, run: RunSpec, setup: Mapping[str, Any], local: Local | None = None
    ) -> EpochDriver:
        return EpochDriver(
            run.federation.coordinator,
            active_of(run),
            run.params.epochs,
            train="splitnn.train",
            shuffle=partial(epoch_seed, run.seed),  # a partial pickles (a fitted SplitNN)
        )

    def coordinator_results(
        self, coord: Coordinator
    ) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """The per-epoch records by column (their ``seconds`` as ``epoch_seconds``: a
        deployment's ``results.json`` gives the run's total ``seconds``), and the final test
        accuracy."""
        metrics, _ = coord.summary()
        history = metrics.pop("history")
        if "seconds" in history:
            history["epoch_seconds"] = history.pop("seconds")
        return {**history, **metrics}, {}

    def round_message(self, role: str) -> str:
        return "splitnn.train" if role == "active" else "splitnn.epoch"

    def audit_rounds(self, run: RunSpec) -> set[int]:
        return {int(run.params.epochs)}  # the last epoch is read

    def observations(
        self, run: RunSpec, setup: Mapping[str, Any], recording: Recording
    ) -> list[Observation]:
        """A passive party's view: the gradient of the loss w.r.t. its logits, per sample of
        the last epoch it saw (rows from the epoch's shuffle seed, as it derives them)."""
        active = active_of(run)
        if recording.party == active:
            return []
        kinds = ("splitnn.forward", "splitnn.backward")  # batch b's with batch b + 1's request
        seen = last_epoch_seen(recording, kinds, "grad_logits", previous=True)
        if seen is None:
            return []
        return [Observation("grad_logits", "softmax_gradient", "train", *seen, active)]

    # -- prediction ------------------------------------------------------------
    def predict_groups(self, run: RunSpec) -> list[AlignGroup]:
        """Every party's new rows (each holds its features of them)."""
        return [AlignGroup("predict", tuple(run.federation.parties))]

    def predict_policy(self, run: RunSpec, setup: Mapping[str, Any]) -> PrivacyPolicy:
        """Inference: the passive parties' bottom ``logits`` of the new rows to the label owner
        (``splitnn.infer``); the coordinator asks it to ``predict``."""
        return PrivacyPolicy.of(
            "splitnn-predict",
            {("passive", "active"): ["logits"]},
            kinds={
                ("active", "passive"): ["splitnn.infer"],
                ("coordinator", "active"): ["predict"],
            },
        )

    def build_predictor(
        self, run: RunSpec, party: str, model: Mapping[str, np.ndarray], local: Local,
        setup: Mapping[str, Any],
    ) -> Party:  # fmt: skip
        """``party`` with its fitted networks, its aligned new rows as its test rows."""
        shape = parse_shape(setup[f"input/{party}"], f"input/{party}")
        _, X, _ = local.take("predict")
        if _input_shape(X.shape) != shape:
            raise DataError(
                f"{party!r}: its new rows have per-sample shape {X.shape[1:]}, the model was "
                f"trained on {shape}"
            )
        none, rows = np.zeros(0, np.int64), np.arange(len(X))
        y = none if party == active_of(run) else None
        data = PartyData(none, X[:0], y, ids_test=rows, X_test=X)
        run = replace(run, params=replace(run.params, evaluate=True))  # the new rows as test rows
        groups = {g.name: g for g in self.groups(run)}
        built = self.build_party(
            run, party, Local(data, {"train": none, "test": rows}, groups), setup
        )
        built.load_state(model)
        return built

    def run_prediction(self, run: RunSpec, coord: Coordinator) -> None:
        coord.send(active_of(run), "predict")

    def predictions(self, party: Party) -> Prediction | None:
        predicted = getattr(party, "predicted", None)
        return None if predicted is None else Prediction("predict", predicted)

    def demo_data(self, cfg: Any) -> dict[str, PartyData]:
        """``[data]`` images (``dataset``, ``n_per_class``, ``n_test``) cut into one strip per
        party, top to bottom in the order of ``federation.parties``; or, with ``views`` (one
        per party, in that order), the columns of one view of a multi-view table each (e.g.
        ``handwritten``; ``n_test``: a stratified held-out split). The label owner also
        holds the labels. Every party keeps all training and test rows."""
        spec, parties, pad = cfg.data, list(cfg.federation.parties), cfg.params.pad
        if spec.views:  # a multi-view table: one view's columns per party
            from fedviews.deep.multivfl.demo import table_split

            strips, ytr, ids, tests, yte, ids_te, _ = table_split(
                cfg, len(parties), "split NN parties"
            )
        else:
            (Xtr, ytr, ids, Xte, yte, ids_te), _ = demo_image_split(
                spec.dataset, spec.n_per_class, spec.n_test, cfg.seed
            )
            strips = cut_images(Xtr, len(parties), pad)
            tests = cut_images(Xte, len(parties), pad)
        out = {}
        for k, name in enumerate(parties):
            labels = {"y": ytr, "y_test": yte} if name == active_of(cfg) else {}
            out[name] = PartyData(ids, strips[k], ids_test=ids_te, X_test=tests[k], **labels)
        return out


SPLITNN_SPEC = register_algorithm_spec(SplitNNAlgorithm())
