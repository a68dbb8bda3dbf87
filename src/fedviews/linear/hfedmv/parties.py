"""The H-FedMV parties (Che et al., Algorithm 3): the client and the server, and the
helpers of their secure sums, pooled scaling and client-level DP; see
:mod:`fedviews.linear.hfedmv.spec` for the protocol. They never import the spec."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

import numpy as np

from fedviews.data import standardized_with
from fedviews.errors import FedViewsError, ProtocolError
from fedviews.federation import (
    Coordinator,
    LargestSent,
    Message,
    MetaValue,
    SecureSumParty,
    handles,
    largest_input,
    reported_count,
    secure_sum_setup,
    unmask_sum,
)
from fedviews.linear._common import Scaler, restore, scaled_views
from fedviews.linear._l21 import row_norms
from fedviews.linear._testing_phase import fedmv_consensus
from fedviews.linear.hfedmv.protocol import LocalLearner

Learner = Any  # LocalLearner or the Single View FL learner: ``problems``, ``objective``, ``passes``


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
        mean, scale = (
            msg.array("x_mean", (width,), np.float64),
            msg.array("x_scale", (width,), np.float64),
        )
        if not (scale > 0).all():
            raise ProtocolError(f"{msg.sender!r} sent a pooled scale that is not positive")
        self._build((mean, scale))
        return self.reply(msg)

    @handles("local_train")
    def on_local_train(self, msg: Message) -> Message:
        learner, c = self._learner(), self.Y.shape[1]
        W_global = [
            msg.array(f"W_{k}", (pr.X.shape[1], c), np.float64)
            for k, pr in enumerate(learner.problems)
        ]
        # a poisoned W_global overflows here (numpy's warning would precede the refusal of
        # the NaN, which names the client that poisoned it: HFedMVServer._overflowed)
        with np.errstate(over="ignore", invalid="ignore"):
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
        self.W = [
            msg.array(f"W_{k}", (v.shape[1], c), np.float64) for k, v in enumerate(self.views)
        ]
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
        if isinstance(learner, LocalLearner):
            state["Z"] = learner.Z
        return state

    def load_state(self, state: Mapping[str, np.ndarray]) -> None:
        """Continue from :meth:`state_dict`; the next round then equals the uninterrupted one."""
        if self.learner is None:  # pooled scaling: built when the statistics arrive
            self._pending = dict(state)
            return
        learner, who, c = self.learner, f"client {self.name!r}", self.Y.shape[1]
        if isinstance(learner, LocalLearner):
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
        sums, m2 = (
            np.stack([m.array(k, (width,), np.float64) for m in msgs]) for k in ("x_sum", "x_m2")
        )
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


class HFedMVServer(Coordinator):
    """The H-FedMV server: broadcasts the global ``W_k`` and averages with weights ``N_l / N``.

    ``pooled``: pool the clients' feature statistics before round 1 (``moments``,
    ``scale``). After the last round it sends the final ``W_k`` (``final``) and pools
    the clients' test counts into :attr:`scores`.
    """

    _transient: ClassVar[Mapping[str, Callable[[], Any]]] = {
        "_averaged": dict,
        "_sent": lambda: LargestSent("W_local"),
    }

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
        #: the clients' ``W_local`` of the last round, averaged into ``W`` (kept one round, to
        #: name the client whose huge values made another's step overflow: :meth:`_overflowed`)
        self._averaged: dict[str, list[np.ndarray]] = {}
        #: the largest ``max |W_local|`` each client sent so far (a client fails on a
        #: poisoned ``W`` rounds later, when every client's model has grown towards it)
        self._sent = LargestSent("W_local")

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
            try:
                replies = self.broadcast(self.clients, "local_train", arrays=self.arrays(), round=r)
            except FedViewsError as exc:
                blamed = self._overflowed(exc)
                if blamed is exc:
                    raise
                raise blamed from exc
            msgs = [replies[c] for c in self.clients]
            if self.frac_bits is not None:  # sum_l N_l W^l_k, divided by N: nothing per client
                self.W, f = secure_mean_W(replies, [W.shape for W in self.W], self.frac_bits)
            else:
                local = [
                    [m.array(f"W_local_{k}", W.shape, np.float64) for k, W in enumerate(self.W)]
                    for m in msgs
                ]
                self._averaged = dict(zip(self.clients, local, strict=True))
                for c, Ws in self._averaged.items():
                    self._sent.add(c, *Ws)
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

    def _overflowed(self, exc: FedViewsError) -> FedViewsError:
        """The refusal of a client's ``W_local`` that is not finite, or of a client's failure
        on ``W`` (its solver's "numerically singular"), naming the client whose own
        ``W_local`` of the round before was huge and the largest
        (:func:`~fedviews.federation.largest_input`,
        :func:`~fedviews.federation.failed_on_huge_input`): the weighted average is finite,
        so the server sends a poisoned ``W_k`` and an honest client's local step overflows
        or fails on it. Anything else (or nothing to compare: the first round, secure
        aggregation, which sees no client's ``W_local``) is ``exc`` as it came."""
        if exc.at is not None:  # a client failed on W (its solver: "numerically singular")
            return self._sent.failure(exc) or exc
        inputs = {
            c: {f"W_local_{k}": W for k, W in enumerate(Ws)} for c, Ws in self._averaged.items()
        }
        array = getattr(exc, "array", None)
        if array is None or exc.party not in self._averaged:
            return exc
        return largest_input(exc.party, inputs)(array) or exc

    def arrays(self) -> dict[str, np.ndarray]:
        """The global model as it is sent: ``W_0 .. W_{K-1}``."""
        return {f"W_{k}": W for k, W in enumerate(self.W)}

    def _final(self) -> None:
        replies = self.broadcast(
            self.clients, "final", arrays=self.arrays(), round=len(self.objective)
        )
        if any("n_test" not in r.meta for r in replies.values()):
            return
        counts = {}
        for c, r in replies.items():
            n = reported_count(r, "n_test")
            counts[c] = (n, reported_count(r, "n_correct", at_most=n))
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
