"""Multi-VFL, defined once: hyper-parameters, roles, alignment, privacy policy, demo data.

:class:`MultiVFLAlgorithm` is the one definition that the estimator
(:class:`fedviews.deep.multivfl.MultiVFL`, in one process) and a deployment (one
process per party) both run. This module needs no torch to import (the registry
loads it to read configs); the parties (:mod:`fedviews.deep.multivfl.parties`) and
models (:mod:`fedviews.deep.multivfl.nets`) are imported when a party is built.

Parties: ``federation.label_owners`` lists the K label owners (the first one also
holds the labels of the test set); every other party is a data owner, and the
order of the data owners in ``federation.parties`` is the order of their strips
(top to bottom). The coordinator is the aggregation server.

Alignment: one group per label owner (all data owners + that label owner, on the
training IDs), and one on the test IDs (all data owners + the first label owner)
when ``params.evaluate`` is on. Deployed, per-batch messages between label owners
and data owners are relayed by the coordinator's hub (the parties only dial out).

Data (a :class:`~fedviews.data.PartyData` per party; ``fedviews launch`` writes
them from ``[data]``): a data owner holds ``ids``, ``X`` (its strip of every image
``(n, rows, width)``, uint8 pixels scaled to ``[0, 1]``; or its columns of a table
``(n, k)``; or any ``(n, ...)`` features its bottom model takes) and ``ids_test``,
``X_test``; a label owner holds ``ids`` and ``y`` (class indices ``0..C-1``), the
first one also ``ids_test`` and ``y_test``.

Networks: ``params.bottom`` and ``params.top`` name the factories of the bottom and top
models (:mod:`fedviews.deep.multivfl.nets`; ``""``: the default networks). Each data owner
builds its bottom at setup and reports its input and output shapes; the setup holds them
(``input/<owner>``, ``output/<owner>``), and the top model, hence the policy's layer names,
follows from them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from fedviews._params import COUNT, DEVICE, FACTORY, FLAG, POSITIVE, Checked, spec
from fedviews.data import PartyData
from fedviews.deep._common import INITS, TOPK_RATIO, WIRE
from fedviews.deep._factory import (
    output_shape,
    parse_shape,
    reported_shape,
    resolve_factory,
    shape_info,
    shape_text,
)
from fedviews.deep._serveropt import ServerOptimizer, make_server_optimizer
from fedviews.deep.multivfl.protocol import (
    combined_shape,
    epoch_order,
    input_shape,
    warn_shared_samples,
)
from fedviews.errors import ConfigError, DataError
from fedviews.federation import (
    Algorithm,
    AlignGroup,
    Codec,
    Coordinator,
    Local,
    Observation,
    Party,
    Prediction,
    PrivacyPolicy,
    Recording,
    Roster,
    RunSpec,
    member_entropy,
    noise_multiplier,
    register_algorithm_spec,
    secured_policy,
    wire_codecs,
)

LOCAL_OPTIMIZERS = ("sgd", "adam")


#: one batch a party saw: ``(seed, round, epoch, batch, values)``
_Batch = tuple[int, int, int, int, np.ndarray]


def _gradients_seen(
    recording: Recording, owner: str, codec: Codec, shape: tuple[int, ...]
) -> list[_Batch]:
    """The ``activation_grad`` batches a data owner received from label owner ``owner``
    (``shape``: one sample's activation)."""
    got: list[_Batch] = []
    seed = rnd = epoch = batch = 0
    for m in recording:
        if m.sender != owner:
            continue
        if m.kind == "begin_epoch":
            seed, rnd, epoch = int(m.number("seed")), m.round, int(m.number("epoch"))
        elif m.kind in ("forward", "backward"):
            if codec.names("activation_grad")[-1] in m.arrays:  # the previous batch's
                rows = len(m.arrays[codec.names("activation_grad")[-1]])
                grad = codec.unpack(m.message(), "activation_grad", (rows, *shape))
                got.append((seed, rnd, epoch, batch, grad))
            if m.kind == "forward":
                batch = int(m.number("batch"))
    return got


def _activations_seen(
    recording: Recording, codec: Codec, shapes: Mapping[str, tuple[int, ...]]
) -> dict[str, list[_Batch]]:
    """The activation batches a label owner received, per data owner (``shapes``: one
    sample's activation of each): the replies to its ``forward`` requests, numbered in order
    within each epoch (its own loop)."""
    got: dict[str, list[_Batch]] = {}
    count: dict[str, int] = {}
    seed, epoch = 0, -1
    for m in recording:
        if m.kind == "train_round":
            seed, epoch = int(m.number("seed")), -1
        elif m.kind == "begin_epoch:reply" and (count or epoch < 0):
            epoch, count = epoch + 1, {}  # the first reply of the next epoch's broadcast
        elif m.kind == "forward:reply" and "activations" in m.arrays:
            b = count[m.sender] = count.get(m.sender, -1) + 1
            acts = codec.unpack(m.message(), "activations", (None, *shapes[m.sender]))
            got.setdefault(m.sender, []).append((seed, m.round, epoch, b, acts))
    return got


def _last_epoch(got: list[_Batch], batch_size: int) -> tuple[np.ndarray, np.ndarray]:
    """``(rows, values)`` of the last epoch in ``got``: its order comes from its seed, as
    both sides derive it (:func:`epoch_order`)."""
    seed, rnd, epoch = got[-1][:3]
    mine = [(b, v) for s, r, e, b, v in got if (s, r, e) == (seed, rnd, epoch)]
    order = epoch_order(seed, rnd, epoch, sum(len(v) for _, v in mine))
    rows = np.concatenate([order[b * batch_size : b * batch_size + len(v)] for b, v in mine])
    return rows, np.concatenate([v for _, v in mine])


# --------------------------------------------------------------------------- params


@dataclass(frozen=True)
class MultiVFLParams(Checked):
    """Hyper-parameters of Multi-VFL: the one declaration used by
    :class:`~fedviews.deep.multivfl.MultiVFL` and by deployments (the ``[params]`` table).

    ``local_optimizer``: the label owners' and data owners' local step.
    ``"sgd"`` (default) is Algorithm 1 line 7, ``W ← W − η_k ∇ℓ`` per batch, with
    ``lr`` = ``η_k``: 0.1 by default, which learns in a few rounds; the paper's 1e-3
    (set by the ``configs/multivfl_*.toml``) stays near chance for tens of rounds;
    ``"adam"`` is an explicit option (not in the paper): a fresh
    ``torch.optim.Adam`` every round, starting from the global model, so its
    moments never outlive a round.

    ``evaluate``: the first label owner evaluates the global model on the test
    split after every round (only the accuracy reaches the coordinator).

    ``init``: the initial weights of the bottom and top models, ``"xavier"`` (Algorithm 1's
    "Gaussian/Xavier initializer": Glorot-normal weights, zero biases) or ``"torch"``
    (PyTorch's default layers, or what a user factory draws;
    :func:`~fedviews.deep.multivfl.nets.init_weights`).

    ``bottom``, ``top``: the factories of the networks (``""``: the default ones, sized by
    ``channels``, ``top_channels`` and ``hidden``): ``bottom(input_shape, index)`` returns
    data owner ``index``'s ``torch.nn.Module`` for per-sample inputs of ``input_shape``
    (image strips: ``(1, rows, width)``; table columns: ``(k,)``); ``top(input_shape,
    n_classes)`` the top model on the joined activations, which returns ``n_classes``
    logits. A config names them by import path (``"mypkg.models:bottom"``; every process
    of a deployment imports it).
    """

    optimizer: str = "fedavg"
    rounds: int = field(default=10, metadata=COUNT)
    local_epochs: int = field(default=1, metadata=COUNT)
    batch_size: int = field(default=64, metadata=COUNT)
    lr: float = field(default=0.1, metadata=POSITIVE)
    local_optimizer: str = field(default="sgd", metadata=spec(str, choices=LOCAL_OPTIMIZERS))
    server_lr: float = 1e-3
    beta1: float = 0.9
    beta2: float = 0.99
    tau: float = 1e-3
    channels: int = field(default=32, metadata=COUNT)
    top_channels: int = field(default=64, metadata=COUNT)
    hidden: int = field(default=128, metadata=COUNT)
    init: str = field(default="xavier", metadata=spec(str, choices=INITS))
    device: str = field(default="auto", metadata=DEVICE)
    evaluate: bool = field(default=True, metadata=FLAG)
    wire_activations: str = field(default="none", metadata=WIRE)
    wire_gradients: str = field(default="none", metadata=WIRE)
    topk_ratio: float = field(default=0.1, metadata=TOPK_RATIO)
    bottom: str | Callable[..., Any] = field(default="", metadata=FACTORY)
    top: str | Callable[..., Any] = field(default="", metadata=FACTORY)

    def codecs(self) -> tuple[Codec, Codec]:
        """How activations and their gradients travel (:class:`~fedviews.federation.Codec`)."""
        return wire_codecs(self.wire_activations, self.wire_gradients, self.topk_ratio)

    def cross_check(self, n_parties: int | None) -> None:
        """The codecs together (top-k only for gradients), the server optimizer's settings
        (``optimizer``, ``server_lr``, ``beta1``, ``beta2``, ``tau``: checked by
        :func:`~fedviews.deep._serveropt.make_server_optimizer`) and the factories: an
        import path must import a callable (what it builds is checked where the shapes
        are known, at setup)."""
        self.codecs()
        self.server_optimizer()
        resolve_factory(self.bottom, "bottom")
        resolve_factory(self.top, "top")

    def server_optimizer(self) -> ServerOptimizer:
        """A fresh server optimizer of these settings (a :class:`ConfigError` if invalid)."""
        return make_server_optimizer(
            self.optimizer,
            lr=self.server_lr,
            beta1=self.beta1,
            beta2=self.beta2,
            tau=self.tau,
            total_rounds=self.rounds,
        )


def scaled_strip(strip: np.ndarray, name: str = "X") -> np.ndarray:
    """A data owner's strips as the models see them: float32, uint8 pixels scaled to [0, 1]."""
    if strip.dtype == np.uint8:
        return strip.astype(np.float32) / 255.0
    out = strip.astype(np.float32)
    if not np.isfinite(out).all():
        raise DataError(f"{name} contains NaN or infinite values")
    return out


# --------------------------------------------------------------------------- policy


def multivfl_policy(
    top_param_names: Sequence[str],
    *,
    evaluate: bool = True,
    codecs: tuple[Codec, Codec] = (Codec(), Codec()),
) -> PrivacyPolicy:
    """The Multi-VFL privacy barrier for a top model with these parameter names.

    Arrays: data owner → label owner only ``activations`` (replies to ``forward``
    and ``infer``); label owner → data owner only ``activation_grad``; label owner
    → coordinator only the top-model update; coordinator → label owner only the
    global top model. Kinds: the coordinator drives the rounds (``train_round``,
    ``set_top``, ``average_bottoms``, and ``evaluate`` when the run evaluates); a
    label owner drives its batches and the inference of the global model
    (``begin_epoch``, ``forward``, ``backward``, ``infer``). A data owner sends
    nothing but replies. With lossy ``codecs`` (activations, gradients) their extra
    arrays (``activations.scale``, ``activation_grad.idx``, ...) go the same way.
    """
    coord_to_lo = ["train_round", "set_top", *(["evaluate"] if evaluate else [])]
    return PrivacyPolicy.of(
        "multivfl",
        {
            ("data_owner", "label_owner"): codecs[0].names("activations"),
            ("label_owner", "data_owner"): codecs[1].names("activation_grad"),
            ("label_owner", "coordinator"): [f"update/{n}" for n in top_param_names],
            ("coordinator", "label_owner"): [f"top/{n}" for n in top_param_names],
        },
        kinds={
            ("coordinator", "label_owner"): coord_to_lo,
            ("coordinator", "data_owner"): ["average_bottoms"],
            ("label_owner", "data_owner"): ["begin_epoch", "forward", "backward", "infer"],
        },
    )


# --------------------------------------------------------------------------- the spec


def data_owners(run: RunSpec) -> list[str]:
    """The data owners of a run, in strip order (top to bottom)."""
    owners = set(run.federation.owners())
    return [p for p in run.federation.parties if p not in owners]


class MultiVFLAlgorithm(Algorithm):
    """Multi-VFL as a federated algorithm: D data owners, K label owners, the server."""

    name = "multivfl"
    Params = MultiVFLParams
    peer_to_peer = True
    defenses = frozenset({"none", "secagg", "label_rr", "grad_dp", "act_dp"})

    def dp_releases(self, run: RunSpec) -> int:
        """Per local epoch, a sample's label enters one release under ``grad_dp``; its
        features two under ``act_dp`` (the activation row and the bottom's update)."""
        p: MultiVFLParams = run.params
        per_epoch = 2 if run.defense.kind == "act_dp" else 1
        return per_epoch * int(p.rounds) * int(p.local_epochs)

    def planned_rounds(self, run: RunSpec, setup: Mapping[str, Any]) -> int:
        return int(run.params.rounds)

    # -- who is who ------------------------------------------------------------
    def role(self, run: RunSpec, party: str) -> str:
        return "label_owner" if party in run.federation.owners() else "data_owner"

    secure_sum_of = "label owners"

    def secure_sum_members(self, fed: Roster) -> tuple[str, ...]:
        return tuple(fed.owners())  # the label owners' top-model updates

    def check_federation(self, fed: Roster) -> None:
        if not fed.label_owners:
            raise ConfigError("multivfl: list the label owners in federation.label_owners")
        if len(fed.parties) - len(fed.label_owners) < 1:
            raise ConfigError("multivfl needs at least one data owner (a party not a label owner)")

    def groups(self, run: RunSpec) -> list[AlignGroup]:
        dos, los = tuple(data_owners(run)), run.federation.owners()
        out = [AlignGroup(lo, (*dos, lo)) for lo in los]
        if run.params.evaluate:
            out.append(AlignGroup("test", (*dos, los[0]), "test"))
        return out

    def check_data(self, run: RunSpec, party: str, data: PartyData) -> None:
        super().check_data(run, party, data)
        evaluate = run.params.evaluate
        if party in run.federation.owners():
            if data.features.size:
                raise DataError(f"label owner {party!r} must hold no features (X) in Multi-VFL")
            y = np.asarray(data.y)
            if not np.issubdtype(y.dtype, np.integer) or (y < 0).any():
                raise DataError(f"{party!r}: labels must be class indices 0..C-1 (integers)")
            if evaluate and party == run.federation.owners()[0] and data.y_test is None:
                raise DataError(
                    f"{party!r} is the first label owner: its file needs ids_test and y_test "
                    "(or set params.evaluate = false)"
                )
        else:
            if data.features.ndim < 2 or 0 in data.features.shape:
                raise DataError(
                    f"data owner {party!r} must hold features (n, ...): image strips (n, rows, "
                    f"width) or table columns (n, k), got X of shape {data.features.shape}"
                )
            if evaluate and data.X_test is None:
                raise DataError(
                    f"data owner {party!r}: its file needs ids_test and X_test (test strips) "
                    "(or set params.evaluate = false)"
                )

    # -- setup -----------------------------------------------------------------
    def party_info(self, run: RunSpec, party: str, local: Local) -> dict[str, Any]:
        if party in run.federation.owners():
            y = np.asarray(local.data.y)
            return {"n_classes": int(np.max(y)) + 1 if y.size else 0}
        shape = input_shape(local.data.features.shape)
        bottom = self._bottom(run, party, shape)
        out = output_shape(bottom, shape, f"the bottom model of {party!r}")
        return {**shape_info("input", shape), **shape_info("output", out)}

    def make_setup(self, run: RunSpec, infos: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
        dos = data_owners(run)
        shapes = [reported_shape(infos[d], "output", d) for d in dos]
        return {
            "n_classes": max(int(infos[lo]["n_classes"]) for lo in run.federation.owners()),
            "top_input": shape_text(combined_shape(shapes, dos)),
            **{f"input/{d}": shape_text(reported_shape(infos[d], "input", d)) for d in dos},
            **{f"output/{d}": shape_text(s) for d, s in zip(dos, shapes, strict=True)},
        }

    def top_names(self, run: RunSpec, setup: Mapping[str, Any]) -> list[str]:
        """The parameter names of this run's top model (built from the setup's sizes)."""
        return list(self._top(run, setup).state_dict())

    def policy(self, run: RunSpec, setup: Mapping[str, Any]) -> PrivacyPolicy:
        p: MultiVFLParams = run.params
        names = self.top_names(run, setup)
        policy = multivfl_policy(names, evaluate=bool(p.evaluate), codecs=p.codecs())
        if run.defense.secagg_bits is None:
            return policy
        return secured_policy(policy, {f"update/{n}": [f"masked_update/{n}"] for n in names})

    # -- leakage ---------------------------------------------------------------
    def audit_rounds(self, run: RunSpec) -> set[int]:
        return {int(run.params.rounds)}  # the last local epochs are read

    def observations(
        self, run: RunSpec, setup: Mapping[str, Any], recording: Recording
    ) -> list[Observation]:
        """Per sample, from the last local epoch the recording holds (batch orders are
        derived from the seeds received, as the parties derive them):

        * a data owner: the gradient of every label owner's loss w.r.t. its activations
          (``activation_grad``), which depends on that label owner's labels;
        * a label owner: every data owner's activations, a function of its private strip.
        """
        p: MultiVFLParams = run.params
        bs, (acts, grads) = int(p.batch_size), p.codecs()
        party = recording.party
        if party in data_owners(run):
            shape = parse_shape(setup[f"output/{party}"], f"output/{party}")
            return [
                Observation(f"activation_grad from {k}", "gradient", k, *_last_epoch(got, bs), k)
                for k in run.federation.owners()
                if (got := _gradients_seen(recording, k, grads, shape))
            ]
        if recording.party in run.federation.owners():
            return [
                Observation(
                    f"activations of {d}",
                    "representation",
                    recording.party,
                    *_last_epoch(got, bs),
                    features_of=d,
                )
                for d, got in _activations_seen(recording, acts, _outputs(run, setup)).items()
            ]
        return []

    # -- building --------------------------------------------------------------
    def _top(self, run: RunSpec, setup: Mapping[str, Any]) -> Any:
        from fedviews.deep.multivfl.nets import make_top

        p: MultiVFLParams = run.params
        return make_top(
            p.top,
            parse_shape(setup["top_input"], "top_input"),
            int(setup["n_classes"]),
            top_channels=p.top_channels,
            hidden=p.hidden,
            random_state=int(run.seed or 0),
            init=p.init,
        )

    def _bottom(self, run: RunSpec, party: str, shape: tuple[int, ...]) -> Any:
        """``party``'s initial bottom model for per-sample inputs of ``shape``."""
        from fedviews.deep.multivfl.nets import make_bottom

        p: MultiVFLParams = run.params
        return make_bottom(
            p.bottom,
            shape,
            data_owners(run).index(party),
            channels=p.channels,
            random_state=int(run.seed or 0),
            init=p.init,
        )

    def build_party(
        self, run: RunSpec, party: str, local: Local, setup: Mapping[str, Any]
    ) -> Party:
        from fedviews.deep._common import resolve_device
        from fedviews.deep.multivfl.parties import DataOwner, GradDP, LabelOwner

        p: MultiVFLParams = run.params
        dev = resolve_device(p.device)
        los = run.federation.owners()
        d = run.defense
        dp = None
        if d.kind == ("grad_dp" if party in los else "act_dp"):
            z = noise_multiplier(d, self.dp_releases(run))
            dp = GradDP(
                float(d.clip),
                2.0 * z * float(d.clip),
                member_entropy(run, party),
                float(d.grad_clip),
                2.0 * z * float(d.grad_clip),
            )
        if party in los:
            lo = LabelOwner(
                party,
                np.asarray(local.take(party)[2]),
                self._top(run, setup),
                _outputs(run, setup),
                batch_size=p.batch_size,
                local_epochs=p.local_epochs,
                local_optimizer=p.local_optimizer,
                lr=p.lr,
                device=dev,
                codecs=p.codecs(),
                dp=dp,
                secure=run.defense.secagg_bits is not None,
            )
            if "test" in local.rows:
                lo.split_y["test"] = np.asarray(local.take("test")[2])
            return lo
        do = DataOwner(
            party,
            scaled_strip(local.data.features),
            {lo: local.rows[lo] for lo in los},
            self._bottom(run, party, parse_shape(setup[f"input/{party}"], f"input/{party}")),
            local_optimizer=p.local_optimizer,
            lr=p.lr,
            device=dev,
            codecs=p.codecs(),
            dp=dp,
        )
        if "test" in local.rows:
            do.set_split("test", scaled_strip(local.take("test")[1], "X_test"))
        if party == data_owners(run)[0]:
            warn_shared_samples({lo: local.rows[lo] for lo in los})
        return do

    def build_coordinator(
        self, run: RunSpec, setup: Mapping[str, Any], local: Local | None = None
    ) -> Coordinator:
        from fedviews.deep.multivfl.server import Server

        p: MultiVFLParams = run.params
        return Server(
            self._top(run, setup),
            p.server_optimizer(),
            run.federation.owners(),
            data_owners(run),
            rounds=p.rounds,
            random_state=int(run.seed or 0),
            evaluate=p.evaluate,
            name=run.federation.coordinator,
            frac_bits=run.defense.secagg_bits,
        )

    # -- running ---------------------------------------------------------------
    def round_message(self, role: str) -> str:
        return "average_bottoms" if role == "data_owner" else "set_top"

    # -- results ---------------------------------------------------------------
    def party_results(self, party: Party) -> dict[str, np.ndarray]:
        from fedviews.deep.multivfl.parties import LabelOwner

        if isinstance(party, LabelOwner):
            return party.top_state()
        return party.state_dict()

    # -- prediction ------------------------------------------------------------
    def predict_groups(self, run: RunSpec) -> list[AlignGroup]:
        """One group per label owner, with every data owner: the label owner's new IDs."""
        dos = tuple(data_owners(run))
        return [AlignGroup(lo, (*dos, lo)) for lo in run.federation.owners()]

    def predict_policy(self, run: RunSpec, setup: Mapping[str, Any]) -> PrivacyPolicy:
        """Inference of the global model: a label owner asks the data owners for their bottoms'
        ``activations`` of its rows (``infer``), the coordinator asks it to ``predict``."""
        return PrivacyPolicy.of(
            "multivfl-predict",
            {("data_owner", "label_owner"): run.params.codecs()[0].names("activations")},
            kinds={
                ("coordinator", "label_owner"): ["predict"],
                ("label_owner", "data_owner"): ["infer"],
            },
        )

    def build_predictor(
        self, run: RunSpec, party: str, model: Mapping[str, np.ndarray], local: Local,
        setup: Mapping[str, Any],
    ) -> Party:  # fmt: skip
        """A data owner with its fitted bottom and its new strips aligned with every label
        owner (a split per label owner), or a label owner with the global top model."""
        from fedviews.deep._common import load_module
        from fedviews.deep.multivfl.parties import DataOwner, LabelOwner

        los, none = run.federation.owners(), np.zeros(0, np.int64)
        run = replace(run, params=replace(run.params, evaluate=False))
        if party in los:
            empty = Local(PartyData(none, None, none), {party: none}, local.groups)
            owner = self.build_party(run, party, empty, setup)
            assert isinstance(owner, LabelOwner)
            load_module("top", owner.top, model, party)
            owner.n_predict = len(local.rows[party])
            return owner
        shape = parse_shape(setup[f"input/{party}"], f"input/{party}")
        if input_shape(local.data.features.shape) != shape:
            raise DataError(
                f"{party!r}: its new rows have per-sample shape "
                f"{input_shape(local.data.features.shape)}, the model was trained on {shape}"
            )
        strips = scaled_strip(local.data.features)
        empty = Local(PartyData(none, strips[:0]), {lo: none for lo in los}, local.groups)
        do = self.build_party(run, party, empty, setup)
        assert isinstance(do, DataOwner)
        do.load_state(model)
        for lo in los:
            do.set_split(lo, strips[local.rows[lo]])
        return do

    def run_prediction(self, run: RunSpec, coord: Coordinator) -> None:
        coord.broadcast(list(run.federation.owners()), "predict")

    def predictions(self, party: Party) -> Prediction | None:
        predicted = getattr(party, "predicted", None)
        return None if predicted is None else Prediction(party.name, predicted)

    # -- demo data -------------------------------------------------------------
    def demo_data(self, cfg: Any) -> dict[str, PartyData]:
        """Each party's data from ``[data]`` (see :func:`~fedviews.deep.multivfl.demo.multivfl_demo_data`)."""
        from fedviews.deep.multivfl.demo import multivfl_demo_data

        return multivfl_demo_data(cfg)


def _outputs(run: RunSpec, setup: Mapping[str, Any]) -> dict[str, tuple[int, ...]]:
    """One sample's activation of every data owner, in strip order (from the setup)."""
    return {d: parse_shape(setup[f"output/{d}"], f"output/{d}") for d in data_owners(run)}


MULTIVFL_SPEC = register_algorithm_spec(MultiVFLAlgorithm())
