r"""H-FedMV (Che et al., Algorithm 3), defined once; and the Single View FL baseline.

Client ``l`` holds all views ``X^l_k`` and labels ``Y^l`` of its own samples. Each
round the server sends the global ``W_k``; every client runs ``local_iter`` passes
of local multi-view learning in the order of Algorithm 3 (Z_k step (16), Z step
(17), W step (14-15)), starting from the global ``W_k`` and keeping its ``Z^l``
between rounds; it returns ``W^l_k`` and its sample count ``N_l`` (metadata); the
server sets ``W_k = sum_l (N_l / N) W^l_k``. Only the ``W`` matrices cross; views,
labels and ``Z`` stay local. After the last round the server sends the final
``W_k`` to every client (``final``), which predicts its own test samples locally
(Eqs. 18-19) when it holds some.

Feature scaling (``standardize``): ``"none"`` (the paper), ``"local"`` (every
client its own training statistics) or ``"pooled"``: the clients report their
per-feature sums (``moments``: ``x_sum``, ``x_m2``, ``N_l``), the server pools them
and sends back the mean and scale (``scale``) before round 1.

Initialisation: the server draws a random ``W_k`` (``N(0, 1/d_k)`` entries) as in
Algorithm 3 (stream 0); client ``l`` draws its ``Z^l`` from stream ``1 + l``; the
clients' random ``Z^l_k`` of line 2 are overwritten by Eq. (16) before they are read.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, ClassVar

import numpy as np
from sklearn.base import BaseEstimator

from fedviews._estimator import store_params
from fedviews._registry import register_estimator
from fedviews.data import PartyData, check_Xs, check_y, held_out_split, one_hot, standardized_with
from fedviews.errors import ConfigError, DataError, ProtocolError, check_fitted
from fedviews.federation import (
    Algorithm,
    AlignGroup,
    Coordinator,
    Defense,
    Local,
    Message,
    MetaValue,
    Observation,
    Party,
    PrivacyPolicy,
    Recording,
    Roster,
    RunSpec,
    SecureSumParty,
    Transport,
    build_in_process,
    estimator_params,
    federate,
    handles,
    member_entropy,
    noise_multiplier,
    register_algorithm_spec,
    secure_sum_setup,
    secured_policy,
    spawn_streams,
    unmask_sum,
)
from fedviews.linear._common import (
    LinearAlgorithm,
    Scaler,
    check_count,
    check_iter,
    check_positive,
    check_weights,
    party_index,
    per_party,
    restore,
    scaled_views,
    small_blas,
)
from fedviews.linear._consensus import IRLSOptions
from fedviews.linear._fedmv import (
    _ConsensusPredictor,
    _init_W,
    _labels_present,
    _LocalMVL,
    fedmv_consensus,
)
from fedviews.linear._l21 import L21Problem, row_norms

#: feature scaling of the clients' training samples
STANDARDIZE = ("none", "local", "pooled")

Learner = Any  # _LocalMVL or _SingleViewLearner: ``problems``, ``objective``, ``passes``


def hfedmv_policy(n_views: int, *, pooled: bool = False) -> PrivacyPolicy:
    """The H-FedMV barrier for ``n_views`` views: only local and global ``W_k`` cross
    (and, with pooled scaling, the clients' per-feature sums and the pooled mean/scale)."""
    up = [f"W_local_{k}" for k in range(n_views)]
    down = [f"W_{k}" for k in range(n_views)]
    kinds = ["local_train", "final"]
    if pooled:
        up, down, kinds = (
            [*up, "x_sum", "x_m2"],
            [*down, "x_mean", "x_scale"],
            [*kinds, "moments", "scale"],
        )
    return PrivacyPolicy.of(
        "h-fedmv",
        {("client", "coordinator"): up, ("coordinator", "client"): down},
        kinds={("coordinator", "client"): kinds},
    )


class _SingleViewLearner:
    """Eq. (20) on one client's single view, warm-started from the global ``W`` (Single View FL)."""

    def __init__(
        self, Xs: list[np.ndarray], *, Y: np.ndarray, beta: float, solver: IRLSOptions
    ) -> None:
        self.problems = [L21Problem(Xs[0], eps=solver.eps)]
        self.Y, self.beta, self.solver = Y, beta, solver
        self.objective: list[float] = []

    def passes(self, Ws: Sequence[np.ndarray], n_pass: int) -> list[np.ndarray]:
        """``n_pass`` IRLS iterations of Eq. (20) from ``Ws[0]``."""
        res = self.problems[0].solve(
            self.Y, self.beta, W0=Ws[0], max_iter=n_pass, tol=self.solver.tol
        )
        self.objective.append(res.objective[-1])
        return [res.W]


class HFedMVClient(SecureSumParty):
    """Client ``L_l`` of Algorithm 3: all views and labels of its own samples stay here.

    Its learner is built by ``make(views)`` from its (scaled) views: at once, or —
    with pooled scaling — when the pooled statistics arrive (``scale``).

    Parameters
    ----------
    views, Y
        This client's training views (raw) and one-hot labels.
    make
        ``make(views) -> learner``: local multi-view learning (Algorithm 3) or Single
        View FL's learner.
    standardize
        ``"none"``, ``"local"`` or ``"pooled"`` (see the module docstring).
    test
        ``(test_views, y_test)``: this client's own test samples, predicted with the
        final global ``W_k`` (``final``) by the consensus of Eqs. (18)-(19) with ``zetas``.
    secure
        Secure aggregation (``defense.kind = "secagg"``): ``N_l W^l_k``, the local
        objective and the pooled-statistics sums leave only masked for the server's
        secure sums (``masked_*``); ``N_l`` stays public.
    dp
        ``(clip, sigma, stream)`` of ``defense.kind = "model_dp"``: the update
        ``W^l - W`` (all views) is clipped to ``clip`` and noised with ``N(0, sigma^2)``
        per coordinate before ``W^l`` leaves (:func:`private_update`); the local objective
        is not reported.
    """

    def __init__(
        self,
        name: str,
        views: list[np.ndarray],
        Y: np.ndarray,
        make: Callable[[list[np.ndarray]], Learner],
        *,
        local_iter: int,
        standardize: str = "none",
        test: tuple[list[np.ndarray], np.ndarray] | None = None,
        zetas: Sequence[float] = (),
        test_opts: tuple[int, float] = (1000, 1e-8),
        secure: bool = False,
        dp: tuple[float, float, np.random.SeedSequence] | None = None,
    ) -> None:
        super().__init__(name, role="client")
        self.secure, self.dp = secure, dp
        self.views, self.Y, self.make = views, Y, make
        self.n_samples = len(Y)
        self.local_iter = local_iter
        self.test, self.zetas, self.test_opts = test, list(zetas), test_opts
        self.scaler: Scaler | None = None
        self.learner: Learner = None
        self._pending: Mapping[str, np.ndarray] | None = None
        self.W_local: list[np.ndarray] = []
        self.W: list[np.ndarray] = []
        self.y_test_pred: np.ndarray | None = None
        if standardize == "local":
            self._build(standardized_with(np.hstack(views))[1])
        elif standardize == "none":
            self._build(None)

    def _build(self, scaler: Scaler | None) -> None:
        self.scaler = scaler
        self.learner = self.make(scaled_views(self.views, self.scaler))
        if self._pending is not None:
            self.load_state(self._pending)
            self._pending = None

    def _learner(self) -> Learner:
        if self.learner is None:
            raise ProtocolError(f"{self.name!r} got a training round before the pooled statistics")
        return self.learner

    def _masked(self, arrays: dict[str, np.ndarray], round_: int) -> dict[str, np.ndarray]:
        """``arrays`` masked as ``masked_<name>`` for the server's secure sum."""
        keys = self.keyed_sum(str(sorted(arrays)))
        return keys.mask({f"masked_{k}": v for k, v in arrays.items()}, round_)

    @handles("moments")
    def on_moments(self, msg: Message) -> Message:
        X = np.hstack(self.views)
        meta: dict[str, MetaValue] = {"n_samples": len(X)}
        if self.secure:  # sums the server may add up: no client's own mean or spread
            sums = {"x_sum": X.sum(axis=0), "x_sq": (X**2).sum(axis=0)}
            return self.reply(msg, arrays=self._masked(sums, msg.round), meta=meta)
        mean = X.mean(axis=0)
        return self.reply(
            msg, arrays={"x_sum": X.sum(axis=0), "x_m2": ((X - mean) ** 2).sum(axis=0)}, meta=meta
        )

    @handles("scale")
    def on_scale(self, msg: Message) -> Message:
        width = sum(v.shape[1] for v in self.views)
        mean, scale = msg.array("x_mean", (width,)), msg.array("x_scale", (width,))
        if not (scale > 0).all():
            raise ProtocolError(f"{msg.sender!r} sent a pooled scale that is not positive")
        self._build((mean, scale))
        return self.reply(msg)

    @handles("local_train")
    def on_local_train(self, msg: Message) -> Message:
        learner, c = self._learner(), self.Y.shape[1]
        W_global = [
            msg.array(f"W_{k}", (pr.X.shape[1], c)) for k, pr in enumerate(learner.problems)
        ]
        self.W_local = sent = learner.passes(W_global, self.local_iter)
        meta: dict[str, MetaValue] = {"n_samples": self.n_samples}
        if self.dp is not None:
            clip, sigma, stream = self.dp
            rng = np.random.default_rng(
                np.random.SeedSequence([*stream.generate_state(4), msg.round])
            )
            sent = private_update(W_global, self.W_local, clip, sigma, rng)
        elif self.secure:  # N_l W^l_k and the objective, for the server's weighted sums
            arrays = {f"W_local_{k}": self.n_samples * W for k, W in enumerate(self.W_local)}
            arrays["objective"] = np.array([learner.objective[-1]])
            return self.reply(msg, arrays=self._masked(arrays, msg.round), meta=meta)
        else:
            meta["local_objective"] = learner.objective[-1]
        return self.reply(msg, arrays={f"W_local_{k}": W for k, W in enumerate(sent)}, meta=meta)

    @handles("final")
    def on_final(self, msg: Message) -> Message:
        """Keep the final global ``W_k``; predict this client's own test samples with it."""
        c = self.Y.shape[1]
        self.W = [msg.array(f"W_{k}", (v.shape[1], c)) for k, v in enumerate(self.views)]
        if self.test is None:
            return self.reply(msg)
        test_views, y_test = self.test
        Z, _ = fedmv_consensus(
            [X @ W for X, W in zip(scaled_views(test_views, self.scaler), self.W, strict=True)],
            self.zetas,
            max_iter=self.test_opts[0],
            tol=self.test_opts[1],
        )
        self.y_test_pred = np.argmax(Z, axis=1)
        correct = int(np.sum(self.y_test_pred == y_test))
        return self.reply(msg, meta={"n_test": len(y_test), "n_correct": correct})

    def state_dict(self) -> dict[str, np.ndarray]:
        """This client's private state after a round: its ``Z^l``, local ``W^l_k``, objectives."""
        learner = self._learner()
        state = {f"W_local_{k}": np.asarray(W) for k, W in enumerate(self.W_local)}
        state["objective"] = np.asarray(learner.objective, dtype=np.float64)
        if isinstance(learner, _LocalMVL):
            state["Z"] = learner.Z
        return state

    def load_state(self, state: Mapping[str, np.ndarray]) -> None:
        """Continue from :meth:`state_dict`; the next round then equals the uninterrupted one."""
        if self.learner is None:  # pooled scaling: built when the statistics arrive
            self._pending = dict(state)
            return
        learner, who, c = self.learner, f"client {self.name!r}", self.Y.shape[1]
        if isinstance(learner, _LocalMVL):
            learner.Z = restore(state, {"Z": learner.Z.shape}, who)["Z"]
        learner.objective = [float(f) for f in state["objective"]]
        shapes = {f"W_local_{k}": (pr.X.shape[1], c) for k, pr in enumerate(learner.problems)}
        self.W_local = list(restore(state, shapes, who, optional=tuple(shapes)).values())

    def results(self) -> dict[str, np.ndarray]:
        """What a client keeps: the final global model, its scaler, its test predictions."""
        out: dict[str, np.ndarray] = {f"W_{k}": W for k, W in enumerate(self.W)}
        out.update({f"feature_importances_{k}": row_norms(W) for k, W in enumerate(self.W)})
        if self.scaler is not None:
            out.update(x_mean=self.scaler[0], x_scale=self.scaler[1])
        if self.y_test_pred is not None:
            out["y_test_pred"] = self.y_test_pred
        return out


def private_update(
    W_global: Sequence[np.ndarray],
    W_local: Sequence[np.ndarray],
    clip: float,
    sigma: float,
    rng: np.random.Generator,
) -> list[np.ndarray]:
    """What a client sends under ``model_dp``: ``W + clip(W^l - W) + N(0, sigma^2)`` per view,
    the update clipped to Frobenius norm ``clip`` over all views jointly."""
    delta = [L - G for L, G in zip(W_local, W_global, strict=True)]
    norm = float(np.sqrt(sum(float(np.sum(d * d)) for d in delta)))
    f = min(1.0, clip / norm) if norm > 0 else 1.0
    return [
        G + f * d + sigma * rng.standard_normal(G.shape)
        for G, d in zip(W_global, delta, strict=True)
    ]


def pooled_moments(
    n: np.ndarray, sums: np.ndarray, m2: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Pooled mean and standard deviation from per-client counts, sums and centred sums of
    squares (a constant feature gets scale 1)."""
    mean = sums.sum(axis=0) / n.sum()
    means = sums / n[:, None]
    var = (m2.sum(axis=0) + (n[:, None] * (means - mean) ** 2).sum(axis=0)) / n.sum()
    sd = np.sqrt(var)
    sd[sd < 1e-12] = 1.0
    return mean, sd


def pooled_scaler(
    replies: Mapping[str, Message], width: int, frac_bits: int | None
) -> tuple[np.ndarray, np.ndarray]:
    """Pooled mean and standard deviation from the clients' ``moments`` replies: from every
    client's count, sums and centred sums of squares, or under secure aggregation
    (``frac_bits``) from the masked totals, so that only ``N = sum_l N_l`` and the totals of
    the feature sums and sums of squares are learnt (a constant feature gets scale 1)."""
    if frac_bits is None:
        msgs = list(replies.values())
        sums, m2 = (np.stack([m.array(k, (width,)) for m in msgs]) for k in ("x_sum", "x_m2"))
        return pooled_moments(np.array([m.count("n_samples") for m in msgs]), sums, m2)
    got = unmask_sum(replies, {"masked_x_sum": (width,), "masked_x_sq": (width,)}, frac_bits)
    N = float(sum(m.count("n_samples") for m in replies.values()))
    mean = got["masked_x_sum"] / N
    sd = np.sqrt(np.maximum(got["masked_x_sq"] / N - mean**2, 0.0))
    sd[sd < 1e-12] = 1.0
    return mean, sd


def secure_mean_W(
    replies: Mapping[str, Message], shapes: Sequence[tuple[int, ...]], frac_bits: int
) -> tuple[list[np.ndarray], float]:
    """``W_k = sum_l N_l W^l_k / N`` and the clients' summed local objective from their masked
    ``local_train`` replies under secure aggregation: nothing per client."""
    shaped = {f"masked_W_local_{k}": shape for k, shape in enumerate(shapes)}
    got = unmask_sum(replies, {**shaped, "masked_objective": (1,)}, frac_bits)
    N = float(sum(m.count("n_samples") for m in replies.values()))
    return [got[name] / N for name in shaped], float(got["masked_objective"][0])


def linear_predictor(
    Ws: Sequence[np.ndarray], scaler: tuple[np.ndarray, np.ndarray] | None
) -> Callable[[np.ndarray, np.ndarray | None], np.ndarray]:
    """``X -> argmax_c sum_k (X_k W_k)[:, c]`` for features ``X`` with the views side by side
    (scaled with ``scaler``, or with the given rows' own mean and deviation when it is
    ``None``): how a holder of the ``W_k`` labels samples whose features it knows."""
    W = np.vstack(Ws)

    def predict(X: np.ndarray, lengths: np.ndarray | None = None) -> np.ndarray:
        X = np.asarray(X, dtype=np.float64).reshape(len(X), -1)
        mean, sd = scaler if scaler is not None else (X.mean(0), X.std(0))
        return np.argmax(((X - mean) / np.where(sd > 1e-12, sd, 1.0)) @ W, axis=1)

    return predict


def _model(
    name: str, victim: str, Ws: list[np.ndarray], scaler: tuple[np.ndarray, np.ndarray] | None
) -> Observation:
    """A received model as an observation about ``victim``'s samples (rows: all of its group)."""
    none = np.zeros(0, dtype=np.int64)
    predict = linear_predictor(Ws, scaler)
    return Observation(name, "model", victim, none, none, victim, victim, predict)


class HFedMVServer(Coordinator):
    """The H-FedMV server: broadcasts the global ``W_k`` and averages with weights ``N_l / N``.

    ``pooled``: pool the clients' feature statistics before round 1 (``moments``,
    ``scale``). After the last round it sends the final ``W_k`` (``final``) and pools
    the clients' test counts into :attr:`scores`.
    """

    def __init__(
        self,
        clients: Sequence[str],
        Ws: list[np.ndarray],
        n_rounds: int,
        *,
        pooled: bool = False,
        frac_bits: int | None = None,
    ) -> None:
        super().__init__()
        self.frac_bits = frac_bits  # secure aggregation (None: the plain protocol)
        self.clients = list(clients)
        self.W = Ws
        self.n_rounds = n_rounds
        self.pooled = pooled
        self.objective: list[float] = []
        self.scores: dict[str, Any] = {}

    @staticmethod
    def aggregate(
        local: Sequence[Sequence[np.ndarray]], sizes: Sequence[float]
    ) -> list[np.ndarray]:
        """``W_k = sum_l (N_l / N) W^l_k`` for every view ``k`` (Algorithm 3)."""
        N = float(sum(sizes))
        return [
            sum(((n / N) * Ws[k] for n, Ws in zip(sizes, local, strict=True)), np.zeros_like(W))
            for k, W in enumerate(local[0])
        ]

    def state_dict(self) -> dict[str, np.ndarray]:
        """The server's state after a round: the global ``W_k`` and the objective history."""
        return {**self.arrays(), "objective": np.asarray(self.objective, dtype=np.float64)}

    def load_state(self, state: Mapping[str, np.ndarray]) -> None:
        """Continue from :meth:`state_dict`: :meth:`run` goes on with the next round."""
        shapes = {f"W_{k}": W.shape for k, W in enumerate(self.W)}
        self.W = list(restore(state, shapes, "the server").values())
        self.objective = [float(f) for f in state["objective"]]

    def pool_statistics(self) -> tuple[np.ndarray, np.ndarray]:
        """Pooled training mean / standard deviation from the clients' sums; sent back to them."""
        replies = self.broadcast(self.clients, "moments", round=len(self.objective))
        width = sum(W.shape[0] for W in self.W)  # each n_samples is checked as a count there
        mean, sd = pooled_scaler({c: replies[c] for c in self.clients}, width, self.frac_bits)
        self.broadcast(
            self.clients, "scale", arrays={"x_mean": mean, "x_scale": sd}, round=len(self.objective)
        )
        return mean, sd

    def run(self, on_round_end: Callable[[int], None] | None = None) -> list[np.ndarray]:
        """Rounds ``len(objective) + 1 .. n_rounds`` (all of them unless :meth:`load_state`),
        then the final model to every client.

        ``on_round_end(r)`` is called after round ``r`` (e.g. to write a checkpoint).
        """
        if self.frac_bits is not None:  # fresh keys for this run (also a resumed one)
            secure_sum_setup(self, self.clients, self.frac_bits, round=len(self.objective))
        if self.pooled:
            self.pool_statistics()
        for r in range(len(self.objective) + 1, self.n_rounds + 1):
            replies = self.broadcast(self.clients, "local_train", arrays=self.arrays(), round=r)
            msgs = [replies[c] for c in self.clients]
            if self.frac_bits is not None:  # sum_l N_l W^l_k, divided by N: nothing per client
                self.W, f = secure_mean_W(replies, [W.shape for W in self.W], self.frac_bits)
            else:
                local = [
                    [m.array(f"W_local_{k}", W.shape) for k, W in enumerate(self.W)] for m in msgs
                ]
                self.W = self.aggregate(local, [m.count("n_samples") for m in msgs])
                reported = [m.meta.get("local_objective") for m in msgs]
                f = (  # NaN under model_dp: the clients report none
                    float("nan")
                    if None in reported
                    else sum(m.number("local_objective") for m in msgs)
                )
            self.objective.append(f)
            if on_round_end is not None:
                on_round_end(r)
        self._final()
        return self.W

    def arrays(self) -> dict[str, np.ndarray]:
        """The global model as it is sent: ``W_0 .. W_{K-1}``."""
        return {f"W_{k}": W for k, W in enumerate(self.W)}

    def _final(self) -> None:
        replies = self.broadcast(
            self.clients, "final", arrays=self.arrays(), round=len(self.objective)
        )
        if any("n_test" not in r.meta for r in replies.values()):
            return
        counts = {
            c: (int(r.number("n_test")), int(r.number("n_correct"))) for c, r in replies.items()
        }
        n_test = sum(n for n, _ in counts.values())
        correct = sum(k for _, k in counts.values())
        self.scores.update(
            test_accuracy=correct / max(n_test, 1),
            n_test=n_test,
            test_accuracy_per_client={c: k / max(n, 1) for c, (n, k) in counts.items()},
        )

    def progress(self) -> list[str]:
        lines = [f"round {r + 1}: objective {v:.6g}" for r, v in enumerate(list(self.objective))]
        res = self.scores
        if "test_accuracy" in res:
            lines.append(
                f"test: accuracy {res['test_accuracy']:.4f} on {res['n_test']} samples "
                "(every client predicts its own)"
            )
        return lines

    def summary(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """``(metrics, arrays)`` of the run: objective, rounds, test scores; the global ``W_k``."""
        obj = list(self.objective)
        metrics = {"objective": obj, "rounds_done": len(obj), **self.scores}
        return metrics, self.arrays()


# --------------------------------------------------------------------------- the spec


class HorizontalClients(Algorithm):
    """Horizontal federations (H-FedMV, S-FedMV): every party a client with its own
    labelled samples, all views side by side in one ``X`` (``view_dims``), labels as
    class indices ``0..C-1``; each client aligns only its own IDs."""

    client_ndim: ClassVar[int] = 2  # of X: (n, d) features or (n, T, d) sequences
    secure_sum_of = "clients"

    def role(self, run: RunSpec, party: str) -> str:
        return "client"

    def check_federation(self, fed: Roster) -> None:
        if set(fed.label_owners) != set(fed.parties):
            raise ConfigError(
                f"{self.name}: every client holds the labels of its own samples; set "
                f"federation.label_owners = federation.parties ({list(fed.parties)})"
            )

    def groups(self, run: RunSpec) -> list[AlignGroup]:
        """One alignment group per client (its own IDs), and one per client's test split."""
        out = [AlignGroup(c, (c,)) for c in run.federation.parties]
        if run.params.evaluate:
            out += [AlignGroup(f"{c}:test", (c,), "test") for c in run.federation.parties]
        return out

    def check_data(self, run: RunSpec, party: str, data: PartyData) -> None:
        super().check_data(run, party, data)
        X = data.features
        if X.ndim != self.client_ndim or X.shape[-1] == 0:
            shape = "(n, d_1 + ... + d_K)" if self.client_ndim == 2 else "(n, T, c_1 + ... + c_K)"
            raise DataError(f"client {party!r} must hold X of shape {shape}, got {X.shape}")
        for what, y in (("y", data.y), ("y_test", data.y_test)):
            if y is not None and (not np.issubdtype(y.dtype, np.integer) or (y < 0).any()):
                raise DataError(
                    f"client {party!r}: {what} must hold class indices 0..C-1 (integers)"
                )
        if run.params.evaluate and (data.X_test is None or data.y_test is None):
            raise DataError(
                f"client {party!r}: its file needs ids_test, X_test and y_test "
                "(or set params.evaluate = false)"
            )

    def party_info(self, run: RunSpec, party: str, local: Local) -> dict[str, Any]:
        data = local.data
        assert data.y is not None
        dims = data.view_dims or (data.features.shape[-1],)
        return {"n_classes": int(np.max(data.y)) + 1, "view_dims": ",".join(map(str, dims))}

    def make_setup(self, run: RunSpec, infos: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
        """The agreed label set (``0..C-1``) and view layout, checked to be the same everywhere."""
        layouts = {p: str(infos[p]["view_dims"]) for p in run.federation.parties}
        if len(set(layouts.values())) != 1:
            raise DataError(
                f"the clients' views differ (view_dims per client: {layouts}); every client must "
                "hold every view with the same features"
            )
        n_classes = max(int(infos[p]["n_classes"]) for p in run.federation.parties)
        if n_classes < 2:
            raise DataError("the clients' labels contain fewer than two classes")
        return {"n_classes": n_classes, "view_dims": next(iter(layouts.values()))}


def view_dims_of(setup: Mapping[str, Any]) -> list[int]:
    """The widths of the views, agreed at setup."""
    return [int(d) for d in str(setup["view_dims"]).split(",")]


@dataclass(frozen=True)
class HFedMVParams:
    """Hyper-parameters of H-FedMV: the one declaration used by :class:`HFedMV`, experiments
    and deployments (``[params]``).

    ``beta``/``zeta``: one value or one per view. ``standardize``: ``"none"`` (the
    paper), ``"local"`` or ``"pooled"`` (module docstring). ``evaluate``
    (deployments): every client predicts its own test split with the final model
    and reports its counts.
    """

    beta: float | tuple[float, ...] = 4.0
    zeta: float | tuple[float, ...] = 8.0
    eta: float = 16.0
    n_rounds: int = 20
    local_iter: int = 2
    inner_max_iter: int = 5
    inner_tol: float = 1e-6
    test_max_iter: int = 1000
    test_tol: float = 1e-8
    eps: float = 1e-10
    """ε of the IRLS reweighting (keeps a zero row of ``W_k`` from dividing by zero)."""
    standardize: str = "none"
    evaluate: bool = False

    def validate(self) -> None:
        check_weights(self)  # one per view: checked against the views at build
        check_count(self.n_rounds, "n_rounds")
        check_count(self.local_iter, "local_iter")
        check_iter(self.inner_max_iter, self.inner_tol, "inner_max_iter", "inner_tol")
        check_iter(self.test_max_iter, self.test_tol, "test_max_iter", "test_tol")
        if self.standardize not in STANDARDIZE:
            raise ConfigError(f"params.standardize must be one of {list(STANDARDIZE)}")


class HFedMVAlgorithm(HorizontalClients, LinearAlgorithm):
    """H-FedMV as a federated algorithm: clients with all views of their own samples."""

    name = "hfedmv"
    Params = HFedMVParams
    defenses = frozenset({"none", "secagg", "label_rr", "model_dp"})

    def dp_releases(self, run: RunSpec) -> int:
        """Under ``model_dp`` a client's data enters one release (its update) per round."""
        return int(run.params.n_rounds)

    def make_setup(self, run: RunSpec, infos: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
        if run.defense.kind == "model_dp" and run.params.standardize == "pooled":
            raise ConfigError(
                "model_dp does not noise the pooled feature moments: set params.standardize "
                "to 'local' or 'none'"
            )
        return super().make_setup(run, infos)

    def policy(self, run: RunSpec, setup: Mapping[str, Any]) -> PrivacyPolicy:
        K, pooled = len(view_dims_of(setup)), run.params.standardize == "pooled"
        policy = hfedmv_policy(K, pooled=pooled)
        if run.defense.secagg_bits is None:
            return policy
        masked = {f"W_local_{k}": [f"masked_W_local_{k}"] for k in range(K)}
        masked["W_local_0"].append("masked_objective")
        if pooled:
            masked |= {"x_sum": ["masked_x_sum"], "x_m2": ["masked_x_sq"]}
        return secured_policy(policy, masked)

    def build_party(
        self, run: RunSpec, party: str, local: Local, setup: Mapping[str, Any]
    ) -> HFedMVClient:
        p: HFedMVParams = run.params
        parties = run.federation.parties
        seed = spawn_streams(run.seed, len(parties) + 1)[1 + parties.index(party)]
        K, c = len(view_dims_of(setup)), int(setup["n_classes"])
        betas, zetas = per_party(p.beta, K, "beta"), per_party(p.zeta, K, "zeta")

        def take(group: str) -> tuple[list[np.ndarray], np.ndarray]:
            _, X, y = local.take(group)
            assert y is not None
            return [np.ascontiguousarray(v, dtype=np.float64) for v in local.data.views(X)], y

        views, y = take(party)
        Y = np.eye(c)[np.asarray(y, dtype=np.int64)]
        test = take(f"{party}:test") if f"{party}:test" in local.rows else None
        make = partial(
            _LocalMVL,
            Y=Y,
            betas=betas,
            zetas=zetas,
            eta=p.eta,
            seed=seed,
            solver=IRLSOptions(p.inner_max_iter, p.inner_tol, p.eps),
        )
        return HFedMVClient(
            party,
            views,
            Y,
            make,
            local_iter=p.local_iter,
            standardize=p.standardize,
            test=test,
            zetas=zetas,
            test_opts=(p.test_max_iter, p.test_tol),
            secure=run.defense.secagg_bits is not None,
            dp=self._dp(run, party),
        )

    def _dp(self, run: RunSpec, party: str) -> tuple[float, float, np.random.SeedSequence] | None:
        d = run.defense
        if d.kind != "model_dp":
            return None
        z = noise_multiplier(d, self.dp_releases(run))
        return float(d.clip), 2.0 * z * float(d.clip), member_entropy(run, party)

    def build_coordinator(
        self, run: RunSpec, setup: Mapping[str, Any], local: Local | None = None
    ) -> HFedMVServer:
        p: HFedMVParams = run.params
        clients = run.federation.parties
        seed = spawn_streams(run.seed, len(clients) + 1)[0]
        W0 = _init_W(view_dims_of(setup), int(setup["n_classes"]), seed)
        pooled = p.standardize == "pooled"
        return HFedMVServer(
            clients, W0, p.n_rounds, pooled=pooled, frac_bits=run.defense.secagg_bits
        )

    def round_message(self, role: str) -> str:
        return "local_train"

    def observations(
        self, run: RunSpec, setup: Mapping[str, Any], recording: Recording
    ) -> list[Observation]:
        """The models an attacker received, as label predictors for samples whose features it
        knows: the server gets every client's own ``W_local_k`` (trained on that client's
        samples only), a client gets the global ``W_k`` (about every other client). With
        pooled scaling both know the pooled statistics, without scaling none is needed; with
        each client's own scaling the attacker scales the rows it knows with their own
        statistics."""
        K, width = len(view_dims_of(setup)), sum(view_dims_of(setup))
        scaler: tuple[np.ndarray, np.ndarray] | None = None  # "local": unknown to the attacker
        if run.params.standardize == "none":  # the model is on raw features
            scaler = (np.zeros(width), np.ones(width))
        bits = run.defense.secagg_bits
        if run.params.standardize == "pooled":
            got = recording.select("moments:reply") or recording.select("scale")
            if got and got[0].kind == "scale":
                scaler = (got[0].arrays["x_mean"], got[0].arrays["x_scale"])
            elif got:  # the server: from the clients' statistics (only their sums, with secagg)
                scaler = pooled_scaler({m.sender: m.message() for m in got}, width, bits)
        out = []
        clients = run.federation.parties
        if recording.party == run.federation.coordinator:
            replies = recording.select("local_train:reply")
            last = [m for m in replies if m.round == max((r.round for r in replies), default=0)]
            if last and bits is not None:  # the sum is all it learns: the global model
                shapes = [(d, int(setup["n_classes"])) for d in view_dims_of(setup)]
                Ws, _ = secure_mean_W({m.sender: m.message() for m in last}, shapes, bits)
                out += [_model("W from the masked sum", c, Ws, scaler) for c in clients]
            for m in last if bits is None else []:
                Ws = [m.arrays[f"W_local_{k}"] for k in range(K)]
                out.append(_model(f"W_local from {m.sender}", m.sender, Ws, scaler))
        else:
            for m in (recording.select("final") or recording.select("local_train"))[-1:]:
                Ws = [m.arrays[f"W_{k}"] for k in range(K)]
                out += [_model("global W", c, Ws, scaler) for c in clients if c != recording.party]
        return out

    def demo_data(self, cfg: Any) -> dict[str, PartyData]:
        """Deal a built-in multi-view dataset to the clients: all views of their own samples.

        ``[data]``: ``dataset``, ``views`` (default: all of the dataset's), ``n_per_class``
        (balanced subsample, 0 = all), ``n_test`` (stratified held-out samples, dealt
        IID to the clients, 0 = none), ``scenario`` (how the training samples are
        dealt, :func:`fedviews.data.partition_clients`: ``"iid"``, ``"label_skew"``,
        ``"dirichlet"``). Labels are written as class indices ``0..C-1``; every file
        holds ``view_dims`` and lists its rows in its own random order.
        """
        from fedviews.data import balanced_subsample, load, partition_clients

        fed, spec = cfg.federation, cfg.data
        ds = load(spec.dataset, **({"views": list(spec.views)} if spec.views else {}))
        if spec.n_per_class:
            ds = ds.subset(balanced_subsample(ds.y, spec.n_per_class, random_state=cfg.seed))
        classes = np.unique(ds.y)
        y = np.searchsorted(classes, np.asarray(ds.y)).astype(np.int64)
        X = np.hstack([np.asarray(v, dtype=np.float64) for v in ds.views])
        dims = [int(v.shape[1]) for v in ds.views]
        tr, te = held_out_split(y, spec.n_test, cfg.seed)
        M = len(fed.parties)
        parts = partition_clients(y[tr], M, spec.scenario, random_state=cfg.seed)
        tparts = partition_clients(y[te], M, "iid", random_state=cfg.seed) if len(te) else None
        rng = np.random.default_rng(cfg.seed)
        files: dict[str, PartyData] = {}
        for m, client in enumerate(fed.parties):
            rows = tr[parts[m]][rng.permutation(len(parts[m]))]
            test: dict[str, Any] = {}
            if tparts is not None:
                trows = te[tparts[m]][rng.permutation(len(tparts[m]))]
                test = {"ids_test": ds.ids[trows], "X_test": X[trows], "y_test": y[trows]}
            files[client] = PartyData(ds.ids[rows], X[rows], y[rows], view_dims=tuple(dims), **test)
        return files


HFEDMV_SPEC = register_algorithm_spec(HFedMVAlgorithm())


# --------------------------------------------------------------------------- estimators


def _check_clients(
    clients: Any, single_view: bool = False
) -> tuple[list[list[np.ndarray]], list[np.ndarray]]:
    """Validate ``[(Xs, y), ...]``: every client holds every view, same widths, and labels."""
    if not isinstance(clients, (list, tuple)) or len(clients) == 0:
        raise DataError("clients must be a non-empty list of (Xs, y) pairs, one per client")
    Xss: list[list[np.ndarray]] = []
    ys: list[np.ndarray] = []
    for l, item in enumerate(clients):  # noqa: E741
        if not isinstance(item, (list, tuple)) or len(item) != 2:
            raise DataError(f"clients[{l}] must be a pair (Xs, y), got {type(item).__name__}")
        Xs, y = item
        _labels_present(y, f"client {l}")
        Xs = check_Xs([Xs] if single_view else Xs, name=f"clients[{l}].Xs")
        Xss.append(Xs)
        ys.append(check_y(y, Xs[0].shape[0], name=f"clients[{l}].y"))
    K = len(Xss[0])
    widths = [X.shape[1] for X in Xss[0]]
    for l, Xs in enumerate(Xss[1:], start=1):  # noqa: E741
        if len(Xs) != K:
            raise DataError(
                f"client {l} holds {len(Xs)} views but client 0 holds {K}; in H-FedMV every client "
                "must hold every view (drop the missing view everywhere, or impute it at that client)"
            )
        w = [X.shape[1] for X in Xs]
        if w != widths:
            bad = [k for k in range(K) if w[k] != widths[k]]
            raise DataError(
                f"view dimensions differ across clients: client {l} has widths {w}, client 0 has "
                f"{widths} (views {bad}); every client must describe a view with the same features"
            )
    return Xss, ys


def _global_classes(ys: Sequence[np.ndarray]) -> np.ndarray:
    classes = np.unique(np.concatenate([np.asarray(y) for y in ys]))
    if len(classes) < 2:
        raise DataError("the clients' labels contain fewer than two classes")
    return classes


@register_estimator("hfedmv")
class HFedMV(_ConsensusPredictor):
    """Horizontal federated multi-view learning (Algorithm 3).

    Parameters
    ----------
    beta, zeta, eta : float or list
        β_k (paper: 4), ζ_k and η (paper: from {2^0..2^5}, the same for all clients).
    n_rounds : int, default=20
        Communication rounds (paper: 20).
    local_iter : int, default=2
        Passes of local multi-view learning per round (Algorithm 3's "while not converge").
    inner_max_iter, inner_tol : int, float
        IRLS iterations of every W step.
    test_max_iter, test_tol : int, float
        Testing-phase consensus (Eqs. 18-19, run locally by each client).
    eps : float
    standardize : {"none", "local", "pooled"}, default="none"
        Feature scaling before training: none, every client with its own training
        statistics, or the pooled statistics of all clients (from their sums; only
        per-feature sums cross). :meth:`predict` scales new rows the same way (with
        ``"local"``, as the client it names).
    defense : str, dict or Defense, optional
        ``"secagg"``: the server learns only the weighted sums of the clients' models
        (and, pooled, of their feature sums), never one client's; ``"label_rr"``: every
        client randomizes its training labels; ``"model_dp"``: clipped, noised updates,
        client-level DP (:class:`~fedviews.federation.Defense`).
    random_state : int or None
        Stream 0: server's random ``W_k``; stream ``1 + l``: client ``l``'s ``Z^l``.
    transport : callable, optional
        ``transport(policy) -> Transport``.

    Attributes
    ----------
    W_ : list of ndarray
        Global ``W_k`` after the last round (held by the server and every client).
    local_W_ : list of list of ndarray
        Every client's ``W^l_k`` of the last round (simulation only; each is sent
        to the server, which is what the aggregation test checks).
    objective_ : list of float
        Sum over clients of the local objective (Eq. 1 on local data) after local training, per round.
    history_ : list of float
        ``objective_`` (the per-round record every federated estimator exposes).
    client_sizes_ : list of int
    scalers_ : list of (ndarray, ndarray) or None
        Every client's ``(mean, scale)`` of its views side by side (``standardize``;
        the same for all clients with ``"pooled"``; ``None`` without scaling).
    privacy_ : dict
        The privacy ledger of the run's defense per client; empty without one.
    classes_, run_stats_, transport_
    """

    def __init__(
        self,
        beta: float | Sequence[float] = 4.0,
        zeta: float | Sequence[float] = 8.0,
        eta: float = 16.0,
        n_rounds: int = 20,
        local_iter: int = 2,
        inner_max_iter: int = 5,
        inner_tol: float = 1e-6,
        test_max_iter: int = 1000,
        test_tol: float = 1e-8,
        eps: float = 1e-10,
        standardize: str = "none",
        defense: Any = None,
        random_state: int | None = 0,
        transport: Any = None,
    ) -> None:
        store_params(self, locals())

    def fit(self, clients: Sequence[tuple[Sequence[np.ndarray], np.ndarray]]) -> HFedMV:
        """Run Algorithm 3; ``clients[l] = (Xs_l, y_l)`` with every view of client l's samples.

        Client ``l`` is named ``client{l}`` and built from its own views and labels
        only (:class:`HFedMVAlgorithm`), exactly as in a deployment.
        """
        Xss, ys = _check_clients(clients)
        K = len(Xss[0])
        self.classes_ = _global_classes(ys)  # the label set is agreed beforehand (public metadata)
        params = estimator_params(HFedMVParams, self, skip=("evaluate",))
        self.zetas_ = per_party(params.zeta, K, "zeta")
        names = tuple(f"client{l}" for l in range(len(Xss)))  # noqa: E741
        roster = Roster(names, label_owners=names)
        run = RunSpec("hfedmv", params, roster, self.random_state, Defense.of(self.defense))
        dims = tuple(X.shape[1] for X in Xss[0])
        datas = {
            name: PartyData(
                np.arange(len(y)),
                np.hstack(Xs),
                np.searchsorted(self.classes_, y).astype(np.int64),
                view_dims=dims,
            )
            for name, Xs, y in zip(names, Xss, ys, strict=True)
        }
        self.n_features_in_ = list(dims)
        with small_blas():
            fed = build_in_process(run, datas, transport=self.transport)
            fed()
        server = fed.coordinator
        assert isinstance(server, HFedMVServer)
        self.privacy_ = fed.privacy
        return self.adopt(server, [fed.parties[n] for n in names], fed.transport)

    def adopt(self, server: HFedMVServer, clients: Sequence[Party], transport: Transport) -> HFedMV:
        """Take the fitted model from a finished run's server and clients (this estimator's,
        or the fusion stage of S-FedMV); ``classes_``, ``zetas_`` and ``n_features_in_``
        are the caller's."""
        parties = [c for c in clients if isinstance(c, HFedMVClient)]
        self.W_ = server.W
        self.local_W_ = [p.W_local for p in parties]
        self.client_sizes_ = [p.n_samples for p in parties]
        self.scalers_ = [p.scaler for p in parties]
        self.objective_ = list(server.objective)
        self.history_ = self.objective_
        self.feature_importances_ = [row_norms(W) for W in self.W_]
        self.transport_ = transport
        self.run_stats_ = transport.log.summary()
        return self

    def decision_function(self, Xs: Sequence[np.ndarray], client: int | None = None) -> np.ndarray:
        """Consensus ``Z^test`` (Eqs. 18-19) of raw views ``Xs``, run locally by their holder:
        scaled first as the clients scaled their training views (``standardize``); with
        ``"local"`` scaling ``client`` names whose statistics to use (the client predicting)."""
        check_fitted(self, "W_", "scalers_")
        Xs = check_Xs(Xs, n_views=len(self.W_), n_features=self.n_features_in_)
        return super().decision_function(scaled_views(Xs, self._scaler(client)))

    def predict(self, Xs: Sequence[np.ndarray], client: int | None = None) -> np.ndarray:
        """Class labels: ``argmax`` of :meth:`decision_function`."""
        Z = self.decision_function(Xs, client)  # raises NotFittedError before fit
        return self.classes_[np.argmax(Z, axis=1)]

    def _scaler(self, client: int | None) -> Scaler | None:
        scalers = self.scalers_
        if client is not None:
            return scalers[party_index(client, len(scalers), "client")]
        first = scalers[0]
        for s in scalers[1:]:  # "local": each client its own
            if (s is None) != (first is None) or not all(map(np.array_equal, s or (), first or ())):
                raise ConfigError(
                    "every client scaled its views with its own statistics (standardize="
                    "'local'): pass client=l to predict as client l"
                )
        return first


@register_estimator("single_view_fl")
class SingleViewFL(BaseEstimator):
    """The "Single View FL" baseline: FedAvg of Eq. (20) over clients holding one view.

    Every round each client runs ``local_iter`` IRLS iterations of
    ``min ||X^l W - Y^l||^2 + beta ||W||_{2,1}`` from the global ``W``, and the
    server averages with weights ``N_l / N`` (same server and policy as H-FedMV).

    ``fit(clients)`` takes ``[(X_l, y_l), ...]`` with one 2-D view per client.

    Parameters
    ----------
    beta : float, default=4
        ℓ2,1 strength of Eq. (20).
    n_rounds : int, default=20
        Communication rounds.
    local_iter : int, default=5
        IRLS iterations per client and round.
    inner_tol, eps : float
        IRLS stopping rule and ε of Eq. (5).
    random_state : int or None
        Seed of the server's random initial ``W``.
    transport : callable, optional
        ``transport(policy) -> Transport`` (default: in-process).

    Attributes
    ----------
    W_ : ndarray (d, n_classes)
        The global ``W`` after the last round.
    objective_ : list of float
        Sum over clients of their local objective, per round.
    history_ : list of float
        ``objective_`` (the per-round record every federated estimator exposes).
    classes_, n_features_in_
    run_stats_, transport_
        Message statistics and the transport (its ``log`` lists every message).
    """

    def __init__(
        self,
        beta: float = 4.0,
        n_rounds: int = 20,
        local_iter: int = 5,
        inner_tol: float = 1e-6,
        eps: float = 1e-10,
        random_state: int | None = 0,
        transport: Any = None,
    ) -> None:
        store_params(self, locals())

    def fit(self, clients: Sequence[tuple[np.ndarray, np.ndarray]]) -> SingleViewFL:
        Xss, ys = _check_clients(clients, single_view=True)
        (beta,) = per_party(self.beta, 1, "beta")
        check_count(self.n_rounds, "n_rounds")
        check_iter(self.local_iter, self.inner_tol, "local_iter", "inner_tol")
        check_positive(self.eps, "eps")
        self.classes_ = _global_classes(ys)
        solver = IRLSOptions(self.local_iter, self.inner_tol, self.eps)
        ss = spawn_streams(self.random_state, 1)
        self.n_features_in_ = Xss[0][0].shape[1]
        policy = hfedmv_policy(1)
        with small_blas():
            parties = [
                HFedMVClient(
                    f"client{l}",
                    Xs,
                    Y,
                    partial(_SingleViewLearner, Y=Y, beta=beta, solver=solver),
                    local_iter=self.local_iter,
                )
                for l, (Xs, y) in enumerate(zip(Xss, ys, strict=True))  # noqa: E741
                for Y in [one_hot(y, self.classes_)[0]]
            ]
            server = HFedMVServer(
                [p.name for p in parties],
                _init_W([self.n_features_in_], len(self.classes_), ss[0]),
                self.n_rounds,
            )
            custom: Transport | None = self.transport(policy) if self.transport else None
            self.transport_ = federate([server, *parties], policy, custom)
            self.W_ = server.run()[0]
        self.objective_ = list(server.objective)
        self.history_ = self.objective_
        self.run_stats_ = self.transport_.log.summary()
        return self

    def predict(self, X: np.ndarray) -> np.ndarray:
        """``argmax X W`` with the global ``W``."""
        check_fitted(self, "W_", "classes_")
        (X,) = check_Xs([X], name="X", n_features=[self.n_features_in_])
        return self.classes_[np.argmax(X @ self.W_, axis=1)]
