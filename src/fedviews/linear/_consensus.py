r"""The consensus protocol of MMVFL (Feng & Yu) and V-FedMV (Che et al.), written once.

Both minimise, over the parties' ``W_k``, ``Z_k`` and a consensus ``Z``,

.. math::
    \sum_k \|X_k W_k - Z_k\|_F^2 + \beta_k \|W_k\|_{2,1} + \zeta_k \|Z_k - Z\|_F^2
    + \eta \|\cdot - Y\|_F^2

and differ only in where the label term sits: MMVFL ties the label owner's own
``Z_l`` to ``Y`` (its Z_k step, Eq. 11 of MMVFL), V-FedMV ties the consensus
``Z`` to ``Y`` at the server (Eq. 10 of FedMV). One round: every party runs IRLS
on its W step (warm-started, cached Gram / Woodbury solver), updates ``Z_k`` in
closed form and sends only ``Z_k``; the server averages
``Z = (sum_k zeta_k Z_k [+ eta Y]) / (sum_k zeta_k [+ eta])`` and sends ``Z``
back. Every update is an exact block minimisation (or an IRLS majorisation
step), so the objective is non-increasing. Parties report their local objective
terms (and ``zeta_k``, which V-FedMV's parties send with ``Z_k``) as scalar
metadata.

Where the labels live: with the server (``Y`` given to :class:`ConsensusServer`;
V-FedMV as in the paper), at a party's own Z_k step (MMVFL), or — in a
deployment of V-FedMV, where the server is a separate process — at a label-owner
party that sends the one-hot ``Y`` to the server once (``labels``) and scores the
test-phase consensus (``score``).

Testing phase (FedMV Eqs. 12-13): with ``P_k = X_k^test W_k`` fixed, alternate
``Z^test = sum zeta_k Z_k^test / sum zeta_k`` and
``Z_k^test = (P_k + zeta_k Z^test) / (1 + zeta_k)`` from ``Z_k^test = P_k``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedviews.errors import DataError, ProtocolError
from fedviews.federation import Algorithm, Coordinator, Message, Party, handles
from fedviews.linear._common import (
    ConsensusState,
    orthonormal_nonnegative,
    restored_w_z,
    small_blas,
)
from fedviews.linear._l21 import L21Problem, row_norms

__all__ = [
    "ConsensusAlgorithm",
    "ConsensusParty",
    "ConsensusServer",
    "IRLSOptions",
    "consensus_weights",
    "sq",
]


def sq(A: np.ndarray) -> float:
    """``||A||_F^2``."""
    return float(np.einsum("ij,ij->", A, A))


def consensus_weights(zetas: Sequence[float]) -> np.ndarray:
    """``zeta_k / sum zeta`` (the weights of the consensus averages)."""
    z = np.asarray(zetas, dtype=np.float64)
    return z / z.sum()


@dataclass(frozen=True)
class IRLSOptions:
    """The inner IRLS loop of a W step: iterations, relative tolerance, ε, solver form."""

    max_iter: int = 20
    tol: float = 1e-6
    eps: float = 1e-10
    method: str = "auto"


class ConsensusParty(Party):
    """Party ``k``: its view ``X_k``, its ``W_k`` (and test rows, labels) never leave it.

    Parameters
    ----------
    Y, eta
        The label term of this party's own Z_k step (MMVFL's label owner);
        ``eta = 0``: none.
    labels
        ``(Y, classes, y_test)`` of a label owner that sends ``Y`` to the server
        (``labels``) and scores the test consensus (``score``): V-FedMV deployed.
    X_test
        This party's test rows, loaded for the testing phase when it starts.
    """

    def __init__(
        self,
        name: str,
        X: np.ndarray,
        *,
        beta: float,
        zeta: float,
        n_classes: int,
        seed: np.random.SeedSequence,
        Y: np.ndarray | None = None,
        eta: float = 0.0,
        solver: IRLSOptions = IRLSOptions(),
        role: str = "party",
        labels: tuple[np.ndarray, np.ndarray, np.ndarray | None] | None = None,
        X_test: np.ndarray | None = None,
    ) -> None:
        super().__init__(name, role=role)
        self.problem = L21Problem(X, method=solver.method, eps=solver.eps)
        self.beta, self.zeta, self.eta = beta, zeta, eta
        self.Y = Y
        self.solver = solver
        self.labels, self.X_test = labels, X_test
        self.W: np.ndarray | None = None
        self.Z_k = orthonormal_nonnegative(X.shape[0], n_classes, np.random.default_rng(seed))
        self.inner_iterations: list[int] = []
        self.P_test: np.ndarray | None = None
        self.Z_k_test: np.ndarray | None = None
        self.y_test_pred: np.ndarray | None = None

    # -- training --------------------------------------------------------------
    def local_update(self, Z: np.ndarray) -> float:
        """W step (IRLS to convergence, warm start) then Z_k step; returns local objective terms."""
        res = self.problem.solve(
            self.Z_k, self.beta, W0=self.W, max_iter=self.solver.max_iter, tol=self.solver.tol
        )
        self.W = res.W
        self.inner_iterations.append(res.n_iter)
        XW = self.problem.X @ self.W
        if self.Y is not None and self.eta:  # MMVFL Eq. (11)
            self.Z_k = (XW + self.zeta * Z + self.eta * self.Y) / (1.0 + self.zeta + self.eta)
        else:  # MMVFL Eq. (12), FedMV Eq. (8)
            self.Z_k = (XW + self.zeta * Z) / (1.0 + self.zeta)
        local = sq(XW - self.Z_k) + self.beta * float(row_norms(self.W).sum())
        if self.Y is not None and self.eta:
            local += self.eta * sq(self.Z_k - self.Y)
        return local

    @handles("update")
    def on_update(self, msg: Message) -> Message:
        local = self.local_update(msg.array("Z", self.Z_k.shape))
        return self.reply(
            msg, arrays={"Z_k": self.Z_k}, meta={"local_objective": local, "zeta": self.zeta}
        )

    def state_dict(self) -> dict[str, np.ndarray]:
        """This party's private state after a round: ``W`` (the warm start), ``Z_k``, IRLS counts."""
        state = {"Z_k": self.Z_k, "inner_iterations": np.asarray(self.inner_iterations, np.int64)}
        if self.W is not None:
            state["W"] = self.W
        return state

    def load_state(self, state: Mapping[str, np.ndarray]) -> None:
        """Continue from :meth:`state_dict`; the next round then equals the uninterrupted one."""
        self.W, self.Z_k = restored_w_z(self.name, self.problem.X.shape, self.Z_k.shape, state)
        self.inner_iterations = [int(i) for i in state.get("inner_iterations", [])]
        self.P_test = self.Z_k_test = None

    # -- labels (a label owner that is not the server) ---------------------------
    def _labels(self) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        if self.labels is None:
            raise ProtocolError(f"{self.name!r} holds no labels: only the label owner is asked")
        return self.labels

    @handles("labels")
    def on_labels(self, msg: Message) -> Message:
        return self.reply(msg, arrays={"Y": self._labels()[0]})

    @handles("score")
    def on_score(self, msg: Message) -> Message:
        _, classes, y_test = self._labels()
        if y_test is None:
            raise ProtocolError(f"{self.name!r} holds no test labels (y_test)")
        Z = msg.array("Z_test", (len(y_test), len(classes)))
        self.y_test_pred = classes[np.argmax(Z, axis=1)]
        accuracy = float(np.mean(self.y_test_pred == y_test))
        return self.reply(msg, meta={"accuracy": accuracy, "n_test": len(y_test)})

    # -- testing phase ---------------------------------------------------------
    def load_test(self, X_test: np.ndarray) -> None:
        """Local: the party reads its own test view and computes ``P_k = X_k^test W_k``."""
        if self.W is None:
            raise ProtocolError(f"{self.name}: the testing phase starts before any training round")
        if X_test.shape[1] != self.W.shape[0]:
            raise DataError(
                f"{self.name}: test view has {X_test.shape[1]} features, fit with {self.W.shape[0]}"
            )
        self.P_test = X_test @ self.W

    @handles("test_init")
    def on_test_init(self, msg: Message) -> Message:
        if self.P_test is None:
            if self.X_test is None:
                raise DataError(f"{self.name!r} has no test data (ids_test, X_test)")
            self.load_test(self.X_test)
        assert self.P_test is not None
        self.Z_k_test = self.P_test.copy()
        return self.reply(msg, arrays={"Z_k_test": self.Z_k_test}, meta={"zeta": self.zeta})

    @handles("test_update")
    def on_test_update(self, msg: Message) -> Message:
        if self.P_test is None:
            raise ProtocolError(f"{self.name!r} got test_update before test_init")
        Z_test = msg.array("Z_test", self.P_test.shape)
        self.Z_k_test = (self.P_test + self.zeta * Z_test) / (1.0 + self.zeta)
        return self.reply(msg, arrays={"Z_k_test": self.Z_k_test})  # Eq. (13)

    def results(self) -> dict[str, np.ndarray]:
        """What this party keeps at the end: ``W``, ``Z_k``, feature importances (row norms)."""
        if self.W is None:
            return {"Z_k": self.Z_k}
        out = {"W": self.W, "Z_k": self.Z_k, "feature_importances": row_norms(self.W)}
        if self.y_test_pred is not None:
            out["y_test_pred"] = self.y_test_pred
        return out


class ConsensusServer(ConsensusState, Coordinator):
    """The server: averages the ``Z_k`` into ``Z``, tracks the objective, runs the test phase.

    Parameters
    ----------
    zeta
        The parties' ``zeta_k`` (MMVFL: known from the config); ``None``: every
        party sends its own with ``Z_k`` (V-FedMV).
    Y, eta
        The label term of the Z step (V-FedMV, Eq. 10); ``Y`` may be a zero
        placeholder of the right shape that ``label_owner`` replaces before round 1.
    label_owner
        The party that sends ``Y`` (``labels``) and scores the test consensus.
    test
        ``(max_iter, tol)``: after training, run the testing phase on the parties'
        own test rows and have ``label_owner`` score it.
    """

    def __init__(
        self,
        parties: Sequence[str],
        n_samples: int,
        n_classes: int,
        seed: np.random.SeedSequence,
        *,
        max_iter: int,
        tol: float,
        zeta: Sequence[float] | None = None,
        Y: np.ndarray | None = None,
        eta: float = 0.0,
        label_owner: str | None = None,
        test: tuple[int, float] | None = None,
    ) -> None:
        super().__init__()
        self.parties = list(parties)
        self.zeta = None if zeta is None else np.asarray(zeta, dtype=np.float64)
        self.Y, self.eta = Y, eta
        self.Z = orthonormal_nonnegative(n_samples, n_classes, np.random.default_rng(seed))
        self.max_iter, self.tol = max_iter, tol
        self.label_owner, self.test = label_owner, test
        self.objective: list[float] = []
        self.converged = False
        self.test_iterations = 0
        self.results: dict[str, Any] = {}

    def _fetch_labels(self) -> None:
        assert self.label_owner is not None and self.Y is not None
        reply = self.send(self.label_owner, "labels", round=len(self.objective))
        self.Y = reply.array("Y", self.Y.shape)

    def _z_step(self, replies: Mapping[str, Message]) -> float:
        Zks = [replies[p].array("Z_k", self.Z.shape) for p in self.parties]
        f = float(sum(replies[p].number("local_objective") for p in self.parties))
        if self.Y is None:  # MMVFL Eq. (14)
            assert self.zeta is not None
            zetas = self.zeta
            self.Z = np.tensordot(zetas, np.stack(Zks), axes=1) / zetas.sum()
            return f + float(sum(z * sq(Zk - self.Z) for z, Zk in zip(zetas, Zks, strict=True)))
        if self.zeta is None:
            zl = [replies[p].number("zeta") for p in self.parties]
        else:
            zl = [float(z) for z in self.zeta]
        num = sum(z * Zk for z, Zk in zip(zl, Zks, strict=True)) + self.eta * self.Y
        self.Z = num / (sum(zl) + self.eta)  # FedMV Eq. (10)
        f += sum(z * sq(Zk - self.Z) for z, Zk in zip(zl, Zks, strict=True))
        return f + self.eta * sq(self.Z - self.Y)

    def run(self, on_round_end: Callable[[int], None] | None = None) -> np.ndarray:
        """Rounds ``len(objective) + 1 .. max_iter`` (all of them unless :meth:`load_state`),
        then the testing phase if configured.

        ``on_round_end(r)`` is called after round ``r`` (e.g. to write a checkpoint).
        """
        if self.label_owner is not None:
            self._fetch_labels()
        prev = self.objective[-1] if self.objective else np.inf
        r = len(self.objective)
        while not self.converged and r < self.max_iter:
            r += 1
            replies = self.broadcast(self.parties, "update", arrays={"Z": self.Z}, round=r)
            f = self._z_step(replies)
            self.objective.append(f)
            self.converged = bool(
                self.tol > 0 and np.isfinite(prev) and abs(prev - f) <= self.tol * abs(prev)
            )
            if on_round_end is not None:
                on_round_end(r)
            prev = f
        if self.test is not None:
            self._evaluate(*self.test)
        return self.Z

    def consensus(self, max_iter: int, tol: float) -> np.ndarray:
        """Testing phase (FedMV Eqs. 12-13, no labels), iterated with the parties."""
        r0 = len(self.objective)
        replies = self.broadcast(self.parties, "test_init", round=r0 + 1)
        w = consensus_weights([replies[p].number("zeta") for p in self.parties])
        shape = replies[self.parties[0]].array("Z_k_test", (None, self.Z.shape[1])).shape
        Z = sum(
            wk * replies[p].array("Z_k_test", shape) for wk, p in zip(w, self.parties, strict=True)
        )
        it = 1
        for it in range(2, max_iter + 1):  # noqa: B007
            replies = self.broadcast(
                self.parties, "test_update", arrays={"Z_test": Z}, round=r0 + it
            )
            Z_new = sum(
                wk * replies[p].array("Z_k_test", shape)
                for wk, p in zip(w, self.parties, strict=True)
            )
            done = np.sqrt(sq(Z_new - Z)) <= tol * max(np.sqrt(sq(Z_new)), 1e-300)
            Z = Z_new
            if done:
                break
        self.test_iterations = it
        return np.asarray(Z)

    def _evaluate(self, max_iter: int, tol: float) -> None:
        if self.label_owner is None:
            raise ProtocolError("the testing phase is scored by a label owner; none is set")
        Z_test = self.consensus(max_iter, tol)
        reply = self.send(
            self.label_owner,
            "score",
            arrays={"Z_test": Z_test},
            round=len(self.objective) + self.test_iterations,
        )
        self.results.update(
            Z_test=Z_test,
            test_accuracy=reply.number("accuracy"),
            n_test=int(reply.number("n_test")),
            test_iterations=self.test_iterations,
        )

    def progress(self) -> list[str]:
        """One line per finished round, then the test result (once scored)."""
        lines = [f"round {r + 1}: objective {v:.6g}" for r, v in enumerate(list(self.objective))]
        res = self.results
        if "test_accuracy" in res:
            lines.append(
                f"test: consensus in {res['test_iterations']} iterations, accuracy "
                f"{res['test_accuracy']:.4f} on {res['n_test']} samples (scored by the label owner)"
            )
        return lines

    def summary(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """``(metrics, arrays)`` of the run: objective, convergence, test scores; ``Z``, ``Z_test``."""
        obj = list(self.objective)
        metrics: dict[str, Any] = {
            "objective": obj,
            "n_iter": len(obj),
            "converged": self.converged,
        }
        metrics.update({k: v for k, v in self.results.items() if k != "Z_test"})
        arrays = {"Z": self.Z}
        if "Z_test" in self.results:
            arrays["Z_test"] = self.results["Z_test"]
        return metrics, arrays


class ConsensusAlgorithm(Algorithm):
    """What the MMVFL and V-FedMV specs share: running, progress and results of the
    consensus server and parties (they differ in roles, params and where ``eta Y`` sits)."""

    def run_coordinator(
        self, coord: Coordinator, on_round_end: Callable[[int], None] | None = None
    ) -> np.ndarray:
        assert isinstance(coord, ConsensusServer)
        with small_blas():
            return coord.run(on_round_end=on_round_end)

    def progress(self, coord: Coordinator) -> list[str]:
        assert isinstance(coord, ConsensusServer)
        return coord.progress()

    def party_results(self, party: Party) -> dict[str, np.ndarray]:
        assert isinstance(party, ConsensusParty)
        return party.results()

    def coordinator_results(
        self, coord: Coordinator
    ) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        assert isinstance(coord, ConsensusServer)
        return coord.summary()
