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

Initialisation (MMVFL Algorithm 1, line 1; FedMV Algorithm 2): ``Z`` (stream 0)
and party ``k``'s ``Z_k`` (stream ``1 + k``) are random non-negative matrices with
orthonormal columns; the first W step starts IRLS from ``A = I`` (ridge).

Testing phase (FedMV Eqs. 12-13): with ``P_k = X_k^test W_k`` fixed, alternate
``Z^test = sum zeta_k Z_k^test / sum zeta_k`` and
``Z_k^test = (P_k + zeta_k Z^test) / (1 + zeta_k)`` from ``Z_k^test = P_k``.

Secure aggregation (``defense.kind = "secagg"``, :mod:`fedviews.federation._secagg`):
the server needs the ``Z_k`` only through ``S = sum_k zeta_k Z_k``, ``sum_k zeta_k``
and, for the objective, ``sum_k zeta_k ||Z_k||^2`` and the parties' summed local
terms (``sum_k zeta_k ||Z_k - Z||^2 = sum_k zeta_k ||Z_k||^2 - 2 <S, Z> + sum_k zeta_k
||Z||^2``). Every party then sends ``zeta_k Z_k`` and those scalars masked
(``masked_zeta_Z_k``, ``masked_stats_Z_k``; their test twins), and the server
learns only the sums. The iterates equal the plain run's to the fixed-point
resolution (``2^-frac_bits`` per value).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedviews.data import PartyData, standardized_with
from fedviews.errors import ConvergenceWarning, DataError, ProtocolError
from fedviews.federation import (
    Coordinator,
    Defense,
    Local,
    Message,
    Observation,
    PrivacyPolicy,
    Recording,
    Roster,
    RunSpec,
    SecureSumParty,
    build_in_process,
    handles,
    secure_sum_setup,
    secured_policy,
    spawn_streams,
    unmask_sum,
)
from fedviews.linear._common import (
    LinearAlgorithm,
    Scaler,
    orthonormal_nonnegative,
    per_party,
    restore,
    scaled,
    small_blas,
)
from fedviews.linear._l21 import L21Problem, l21_norm, relative_change_below, row_norms


def masked_names(name: str) -> tuple[str, str]:
    """The masked arrays that stand for ``name`` (``Z_k``, ``Z_k_test``) under secure
    aggregation: ``zeta_k`` times it, and ``(zeta_k, zeta_k ||.||^2, local terms)``."""
    return f"masked_zeta_{name}", f"masked_stats_{name}"


def secure_sums(
    replies: Mapping[str, Message], name: str, n_classes: int, frac_bits: int
) -> tuple[np.ndarray, float, float, float]:
    """``(sum zeta_k Z_k, sum zeta_k, sum zeta_k ||Z_k||^2, sum of local terms)`` of the
    parties' masked replies for ``name`` (``Z_k`` or ``Z_k_test``; each checked: shape,
    ``uint64``): all that the server learns under secure aggregation."""
    zeta_name, stats_name = masked_names(name)
    n = next(iter(replies.values())).array(zeta_name, (None, n_classes)).shape[0]
    sums = unmask_sum(replies, {zeta_name: (n, n_classes), stats_name: (3,)}, frac_bits)
    zsum, zsq, local = (float(v) for v in sums[stats_name])
    if not zsum > 0:
        raise ProtocolError(f"the parties' zeta_k sum to {zsum}: each must be > 0")
    return sums[zeta_name], zsum, zsq, local


def sq(A: np.ndarray) -> float:
    """``||A||_F^2``."""
    return float(np.einsum("ij,ij->", A, A))


def consensus_weights(zetas: Sequence[float]) -> np.ndarray:
    """``zeta_k / sum zeta`` (the weights of the consensus averages)."""
    z = np.asarray(zetas, dtype=np.float64)
    return z / z.sum()


def z_k_step(
    XW: np.ndarray, Z: np.ndarray, zeta: float, eta: float = 0.0, Y: np.ndarray | None = None
) -> np.ndarray:
    """The closed-form Z_k step ``(X_k W_k + zeta_k Z) / (1 + zeta_k)`` (MMVFL Eq. 12;
    FedMV Eqs. 8, 16, and 13 with ``P_k`` and ``Z^test``); with a label term (``Y`` and
    ``eta > 0``), ``(X_k W_k + zeta_k Z + eta Y) / (1 + zeta_k + eta)`` (MMVFL Eq. 11)."""
    if Y is not None and eta:
        return (XW + zeta * Z + eta * Y) / (1.0 + zeta + eta)
    return (XW + zeta * Z) / (1.0 + zeta)


def z_step(
    zetas: Sequence[float], Zks: Sequence[np.ndarray], eta: float = 0.0, Y: np.ndarray | None = None
) -> np.ndarray:
    """The Z step ``sum_k zeta_k Z_k / sum_k zeta_k`` (MMVFL Eq. 14); with the label term
    (``Y``), ``(sum_k zeta_k Z_k + eta Y) / (sum_k zeta_k + eta)`` (FedMV Eqs. 10 and 17)."""
    S = np.asarray(sum(z * Zk for z, Zk in zip(zetas, Zks, strict=True)))
    return S / sum(zetas) if Y is None else (S + eta * Y) / (sum(zetas) + eta)


def consensus_iterations(
    Zks: Sequence[np.ndarray],
    update: Callable[[np.ndarray, int], Sequence[np.ndarray]],
    w: np.ndarray,
    max_iter: int,
    tol: float,
) -> tuple[np.ndarray, int]:
    """The testing-phase loop (FedMV Eqs. 12-13), run locally or with the parties.

    Iteration 1 averages ``Zks`` (the ``Z_k^test = P_k``) into
    ``Z^test = sum_k w_k Z_k^test`` (Eq. 12); iteration ``it`` averages
    ``update(Z^test, it)``, the ``Z_k^test`` of Eq. (13). Stops when
    ``||Z_t - Z_{t-1}||_F <= tol ||Z_t||_F`` or after ``max_iter`` iterations.

    Returns
    -------
    Z_test, n_iter
        The consensus and the number of iterations run.
    """
    Z = sum(wk * z for wk, z in zip(w, Zks, strict=True))
    it = 1
    for it in range(2, max_iter + 1):  # noqa: B007
        Z_new = sum(wk * z for wk, z in zip(w, update(Z, it), strict=True))
        done = np.sqrt(sq(Z_new - Z)) <= tol * max(np.sqrt(sq(Z_new)), 1e-300)
        Z = Z_new
        if done:
            break
    return np.asarray(Z), it


@dataclass(frozen=True)
class IRLSOptions:
    """The inner IRLS loop of a W step: iterations, relative tolerance, ε, solver form."""

    max_iter: int = 20
    tol: float = 1e-6
    eps: float = 1e-10
    method: str = "auto"


class ConsensusParty(SecureSumParty):
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
        This party's test rows (raw), loaded for the testing phase when it starts.
    scaler
        ``(mean, scale)`` of its own training columns with ``params.standardize``: ``X``
        is already scaled with it, and every test view it loads is scaled with it
        (:meth:`load_test`); it never leaves the party and is part of its results.
    classes
        A label owner's labels in the order of the columns of ``W`` (``Y``'s; with
        ``labels``, its ``classes``): part of its results, to read ``argmax X W`` as labels.
    secure
        Send ``Z_k`` (and ``Z_k_test``) only masked for the server's secure sum; a
        request before the key exchange is refused.
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
        scaler: Scaler | None = None,
        classes: np.ndarray | None = None,
        secure: bool = False,
    ) -> None:
        super().__init__(name, role=role)
        self.secure, self.scaler = secure, scaler
        self.problem = L21Problem(X, method=solver.method, eps=solver.eps)
        self.beta, self.zeta, self.eta = beta, zeta, eta
        self.Y = Y
        self.solver = solver
        self.labels, self.X_test = labels, X_test
        self.classes = classes if labels is None else labels[1]
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
        self.Z_k = z_k_step(XW, Z, self.zeta, self.eta, self.Y)  # MMVFL Eqs. (11)-(12)
        local = sq(XW - self.Z_k) + self.beta * l21_norm(self.W)
        if self.Y is not None and self.eta:
            local += self.eta * sq(self.Z_k - self.Y)
        return local

    @handles("update")
    def on_update(self, msg: Message) -> Message:
        local = self.local_update(msg.array("Z", self.Z_k.shape))
        return self._send_Z(msg, "Z_k", self.Z_k, local)

    def _send_Z(self, msg: Message, name: str, Z_k: np.ndarray, local: float | None) -> Message:
        """The reply with ``Z_k`` (``name``), ``zeta_k`` and the local objective terms: in the
        clear, or (``secure``) masked for the server's secure sum of ``zeta_k Z_k``,
        ``zeta_k``, ``zeta_k ||Z_k||^2`` and the local terms."""
        if not self.secure:
            meta: dict[str, float] = {"zeta": self.zeta}
            if local is not None:
                meta["local_objective"] = local
            return self.reply(msg, arrays={name: Z_k}, meta=meta)
        keys = self.keyed_sum(name)
        zeta_name, stats_name = masked_names(name)
        stats = np.array([self.zeta, self.zeta * sq(Z_k), local or 0.0])
        arrays = {zeta_name: self.zeta * Z_k, stats_name: stats}
        return self.reply(msg, arrays=keys.mask(arrays, msg.round))

    def state_dict(self) -> dict[str, np.ndarray]:
        """This party's private state after a round: ``W`` (the warm start), ``Z_k``, IRLS counts."""
        state = {"Z_k": self.Z_k, "inner_iterations": np.asarray(self.inner_iterations, np.int64)}
        if self.W is not None:
            state["W"] = self.W
        return state

    def load_state(self, state: Mapping[str, np.ndarray]) -> None:
        """Continue from :meth:`state_dict`; the next round then equals the uninterrupted one."""
        (n, d), c = self.problem.X.shape, self.Z_k.shape[1]
        saved = restore(state, {"Z_k": (n, c), "W": (d, c)}, f"party {self.name!r}", ("W",))
        self.W, self.Z_k = saved.get("W"), saved["Z_k"]
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
        """Local: the party reads its own (raw) test view, scales it as its training view was
        scaled, and computes ``P_k = X_k^test W_k``."""
        if self.W is None:
            raise ProtocolError(f"{self.name}: the testing phase starts before any training round")
        if X_test.shape[1] != self.W.shape[0]:
            raise DataError(
                f"{self.name}: test view has {X_test.shape[1]} features, fit with {self.W.shape[0]}"
            )
        self.P_test = scaled(X_test, self.scaler) @ self.W

    @handles("test_init")
    def on_test_init(self, msg: Message) -> Message:
        if self.P_test is None:
            if self.X_test is None:
                raise DataError(f"{self.name!r} has no test data (ids_test, X_test)")
            self.load_test(self.X_test)
        assert self.P_test is not None
        self.Z_k_test = self.P_test.copy()
        return self._send_Z(msg, "Z_k_test", self.Z_k_test, None)

    @handles("test_update")
    def on_test_update(self, msg: Message) -> Message:
        if self.P_test is None:
            raise ProtocolError(f"{self.name!r} got test_update before test_init")
        Z_test = msg.array("Z_test", self.P_test.shape)
        self.Z_k_test = z_k_step(self.P_test, Z_test, self.zeta)  # Eq. (13)
        return self._send_Z(msg, "Z_k_test", self.Z_k_test, None)

    def results(self) -> dict[str, np.ndarray]:
        """What this party keeps at the end: ``W``, ``Z_k``, feature importances (row norms),
        its scaler (``x_mean``, ``x_scale``: new rows are scaled with it before ``X W``) and,
        at a label owner, the ``classes`` of ``W``'s columns."""
        out = {"Z_k": self.Z_k}
        if self.W is not None:
            out.update(W=self.W, feature_importances=row_norms(self.W))
        if self.scaler is not None:
            out.update(x_mean=self.scaler[0], x_scale=self.scaler[1])
        if self.classes is not None:
            out["classes"] = self.classes
        if self.y_test_pred is not None:
            out["y_test_pred"] = self.y_test_pred
        return out


class ConsensusServer(Coordinator):
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
    frac_bits
        Secure aggregation: the parties' ``Z_k`` arrive masked, fixed point with this
        many fractional bits, and the server learns only their sums; ``None``: plain.
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
        frac_bits: int | None = None,
    ) -> None:
        super().__init__()
        self.frac_bits = frac_bits
        self.parties = list(parties)
        self.zeta = None if zeta is None else [float(z) for z in zeta]
        self.Y, self.eta = Y, eta
        self.Z = orthonormal_nonnegative(n_samples, n_classes, np.random.default_rng(seed))
        self.max_iter, self.tol = max_iter, tol
        self.label_owner, self.test = label_owner, test
        self.objective: list[float] = []
        self.converged = False
        self.test_iterations = 0
        self.scores: dict[str, Any] = {}

    def state_dict(self) -> dict[str, np.ndarray]:
        """The server's state after a round: ``Z``, the objective history, ``converged``."""
        return {
            "Z": self.Z,
            "objective": np.asarray(self.objective, dtype=np.float64),
            "converged": np.asarray(self.converged),
        }

    def load_state(self, state: Mapping[str, np.ndarray]) -> None:
        """Continue from :meth:`state_dict`: :meth:`run` goes on with the next round."""
        self.Z = restore(state, {"Z": self.Z.shape}, "the server")["Z"]
        self.objective = [float(f) for f in state["objective"]]
        self.converged = bool(state["converged"])

    def _zetas(self, replies: Mapping[str, Message]) -> list[float]:
        """The parties' ``zeta_k`` as they sent them (V-FedMV), each checked: ``> 0``."""
        zetas = [replies[p].number("zeta") for p in self.parties]
        for p, z in zip(self.parties, zetas, strict=True):
            if not z > 0:
                raise ProtocolError(f"{p!r} sent zeta = {z!r}; each zeta_k must be > 0")
        return zetas

    def _z_step(self, replies: Mapping[str, Message]) -> float:
        """The Z step (MMVFL Eq. 14; FedMV Eq. 10 with ``Y``); returns the round's objective."""
        Y, eta = self.Y, self.eta
        if self.frac_bits is None:
            Zks = [replies[p].array("Z_k", self.Z.shape) for p in self.parties]
            zetas = self.zeta or self._zetas(replies)
            f = float(sum(replies[p].number("local_objective") for p in self.parties))
            self.Z = z_step(zetas, Zks, eta, Y)
            f += sum(z * sq(Zk - self.Z) for z, Zk in zip(zetas, Zks, strict=True))
        else:  # from the secure sums: sum_k zeta_k ||Z_k - Z||^2 = zsq - 2 <S, Z> + zsum ||Z||^2
            S, zsum, zsq, f = secure_sums(replies, "Z_k", self.Z.shape[1], self.frac_bits)
            self.Z = S / zsum if Y is None else (S + eta * Y) / (zsum + eta)
            f += zsq - 2.0 * float(np.einsum("ij,ij->", S, self.Z)) + zsum * sq(self.Z)
        return float(f if Y is None else f + eta * sq(self.Z - Y))

    def run(self, on_round_end: Callable[[int], None] | None = None) -> np.ndarray:
        """Rounds ``len(objective) + 1 .. max_iter`` (all of them unless :meth:`load_state`),
        then the testing phase if configured.

        ``on_round_end(r)`` is called after round ``r`` (e.g. to write a checkpoint).
        """
        if self.frac_bits is not None:  # fresh keys every run (and every resumption)
            secure_sum_setup(self, self.parties, self.frac_bits, round=len(self.objective))
        if self.label_owner is not None:  # the label owner sends Y (a placeholder until then)
            assert self.Y is not None
            reply = self.send(self.label_owner, "labels", round=len(self.objective))
            self.Y = reply.array("Y", self.Y.shape)
        prev = self.objective[-1] if self.objective else np.inf
        r = len(self.objective)
        while not self.converged and r < self.max_iter:
            r += 1
            replies = self.broadcast(self.parties, "update", arrays={"Z": self.Z}, round=r)
            f = self._z_step(replies)
            self.objective.append(f)
            self.converged = relative_change_below(prev, f, self.tol)
            if on_round_end is not None:
                on_round_end(r)
            prev = f
        if self.test is not None:
            self._evaluate(*self.test)
        return self.Z

    def consensus(self, max_iter: int, tol: float) -> np.ndarray:
        """Testing phase (FedMV Eqs. 12-13, no labels), iterated with the parties."""
        r0 = len(self.objective)
        if self.frac_bits is not None:  # fresh keys: the test values are new values
            secure_sum_setup(self, self.parties, self.frac_bits, round=r0)
        replies = self.broadcast(self.parties, "test_init", round=r0 + 1)
        if self.frac_bits is None:
            w = consensus_weights(self._zetas(replies))
            shape = replies[self.parties[0]].array("Z_k_test", (None, self.Z.shape[1])).shape
        else:  # one "party": the securely summed average
            w = np.ones(1)

        def received(replies: Mapping[str, Message]) -> list[np.ndarray]:
            if self.frac_bits is None:
                return [replies[p].array("Z_k_test", shape) for p in self.parties]
            S, zsum, _, _ = secure_sums(replies, "Z_k_test", self.Z.shape[1], self.frac_bits)
            return [S / zsum]

        def update(Z: np.ndarray, it: int) -> list[np.ndarray]:  # Eq. (13) at every party
            replies = self.broadcast(
                self.parties, "test_update", arrays={"Z_test": Z}, round=r0 + it
            )
            return received(replies)

        Z, self.test_iterations = consensus_iterations(received(replies), update, w, max_iter, tol)
        return Z

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
        self.scores.update(
            Z_test=Z_test,
            test_accuracy=reply.number("accuracy"),
            n_test=int(reply.number("n_test")),
            test_iterations=self.test_iterations,
        )

    def progress(self) -> list[str]:
        """One line per finished round, then the test result (once scored)."""
        lines = [f"round {r + 1}: objective {v:.6g}" for r, v in enumerate(list(self.objective))]
        res = self.scores
        if "test_accuracy" in res:
            lines.append(
                f"test: consensus in {res['test_iterations']} iterations, accuracy "
                f"{res['test_accuracy']:.4f} on {res['n_test']} samples (scored by the label owner)"
            )
        return lines

    def summary(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """``(metrics, arrays)`` of the run: objective, convergence, test scores; ``Z``, ``Z_test``."""
        obj = list(self.objective)
        scores = {k: v for k, v in self.scores.items() if k != "Z_test"}
        metrics = {"objective": obj, "n_iter": len(obj), "converged": self.converged, **scores}
        return metrics, {"Z": self.Z, **{k: v for k, v in self.scores.items() if k == "Z_test"}}


class ConsensusAlgorithm(LinearAlgorithm):
    """What the MMVFL and V-FedMV specs share: params checked per party, at least two
    classes and how a party reads its data; the server and parties report progress and
    results themselves (the specs differ in roles, params and where ``eta Y`` sits).
    Both take secure aggregation of the ``Z_k`` (``defense.kind = "secagg"``)."""

    defenses = frozenset({"none", "secagg", "label_rr"})

    def secured(self, run: RunSpec, policy: PrivacyPolicy) -> PrivacyPolicy:
        """``policy``, with the masked arrays in place of ``Z_k``/``Z_k_test`` under secagg."""
        if run.defense.secagg_bits is None:
            return policy
        return secured_policy(policy, {n: masked_names(n) for n in ("Z_k", "Z_k_test")})

    def check_params(self, params: Any, fed: Roster) -> None:
        super().check_params(params, fed)
        params.validate(len(fed.parties))

    def make_setup(self, run: RunSpec, infos: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
        setup = super().make_setup(run, infos)
        # the label owner must report it (read from its report: a missing one names it)
        setup["n_classes"] = int(infos[run.federation.owners()[0]]["n_classes"])
        if setup["n_classes"] < 2:
            raise DataError("y must contain at least two classes")
        return setup

    def observations(
        self, run: RunSpec, setup: Mapping[str, Any], recording: Recording
    ) -> list[Observation]:
        """The label owner's labels as others see them: every party receives the consensus
        ``Z`` (close to the one-hot ``Y``: it is pulled towards it); the coordinator
        computes it from the ``Z_k`` and their ``zeta`` (and with a label-owner party,
        receives ``Y`` itself). Rows: the ``train`` group, in the aligned order; with a
        testing phase, also its consensus ``Z_test`` (rows of the ``test`` group): the
        model's predictions of the label owner's test samples."""
        owner = run.federation.owners()[0]
        if recording.party == owner:
            return []  # its own labels
        rows = np.arange(int(setup["n_samples"]))
        out = []
        for m in recording.select("labels:reply", "Y")[-1:]:
            out.append(Observation("Y", "consensus", "train", rows, m.arrays["Y"], owner))
        for m in recording.select("update", "Z")[-1:]:
            out.append(Observation("Z", "consensus", "train", rows, m.arrays["Z"], owner))
        for m in recording.select("test_update", "Z_test")[-1:]:  # the testing phase
            Z = m.arrays["Z_test"]
            out.append(Observation("Z_test", "consensus", "test", np.arange(len(Z)), Z, owner))
        replies = recording.select("update:reply", "Z_k")
        last = [m for m in replies if m.round == max((r.round for r in replies), default=0)]
        if last:  # the coordinator's own consensus (MMVFL Eq. 14), from what it received
            Z = z_step(
                [float(m.meta.get("zeta") or 1.0) for m in last], [m.arrays["Z_k"] for m in last]
            )
            out.append(Observation("Z from the Z_k", "consensus", "train", rows, Z, owner))
            for m in last:  # each party's own Z_k, less the common part: ~ X_k W_k / (1 + zeta_k)
                scale = 1.0 + float(m.meta.get("zeta") or 0.0)
                rep = scale * (m.arrays["Z_k"] - Z)
                name = f"Z_k of {m.sender}"
                out.append(Observation(name, "representation", "train", rows, rep, None, m.sender))
                # the baseline: what the consensus alone tells about the same features
                name = f"Z, for {m.sender}'s features"
                out.append(Observation(name, "representation", "train", rows, Z, None, m.sender))
        masked = recording.select("update:reply", masked_names("Z_k")[0])
        last = [m for m in masked if m.round == max((r.round for r in masked), default=0)]
        bits = run.defense.secagg_bits
        if last and bits is not None:  # secure aggregation: the sum is all it learns
            msgs = {m.sender: m.message() for m in last}
            S, zsum, _, _ = secure_sums(msgs, "Z_k", int(setup["n_classes"]), bits)
            Z = S / zsum
            out.append(Observation("Z from the masked sum", "consensus", "train", rows, Z, owner))
            for p in run.federation.parties:  # all it has about any party's features
                name = f"Z, for {p}'s features"
                out.append(Observation(name, "representation", "train", rows, Z, None, p))
        return out

    def party_inputs(
        self, run: RunSpec, party: str, local: Local, setup: Mapping[str, Any]
    ) -> tuple[np.ndarray | None, np.ndarray | None, dict[str, Any]]:
        """What party ``k`` builds its :class:`ConsensusParty` from, all of it its own:
        ``(y, y_test, kwargs)``. ``y``/``y_test``: its labels, if any; ``kwargs``: ``X``,
        ``X_test`` (with a ``test`` group), ``scaler`` (with ``params.standardize``: its own
        training mean and standard deviation, which scaled ``X`` and scales every test view
        it loads; nothing crosses), ``beta_k``, ``zeta_k``, ``n_classes``, the ``Z_k``
        stream ``1 + k`` (stream 0 is the server's ``Z``) and the IRLS options.
        """
        p, parties = run.params, run.federation.parties
        k = parties.index(party)
        _, X, y = local.take("train")
        X = X.reshape(len(X), -1).astype(np.float64)
        X_test = y_test = None
        if "test" in local.rows:
            _, Xt, y_test = local.take("test")
            X_test = Xt.astype(np.float64)
        scaler = None
        if p.standardize:
            X, scaler = standardized_with(X)
        kwargs = {
            "X": X,
            "X_test": X_test,
            "scaler": scaler,
            "beta": per_party(p.beta, len(parties), "beta")[k],
            "zeta": per_party(p.zeta, len(parties), "zeta")[k],
            "n_classes": int(setup["n_classes"]),
            "seed": spawn_streams(run.seed, len(parties) + 1)[1 + k],
            "solver": IRLSOptions(p.inner_max_iter, p.inner_tol, p.eps),
            "secure": run.defense.secagg_bits is not None,
        }
        return y, y_test, kwargs


class ConsensusFit:
    """The in-process fit of the MMVFL and V-FedMV estimators (mixed into them)."""

    transport: Any
    random_state: int | None
    defense: Any

    def fit_run(
        self,
        algorithm: str,
        params: Any,
        Xs: Sequence[np.ndarray],
        y: np.ndarray,
        owner: int | None,
    ) -> tuple[ConsensusServer, list[ConsensusParty]]:
        """Run ``algorithm`` with ``params`` in this process: party ``k`` (``party{k}``) is
        built from its own view ``Xs[k]`` only, with ``y`` if ``k == owner`` (``None``: the
        coordinator holds ``y``), exactly as in a deployment.

        Sets ``classes_``, ``transport_``, ``Z_``, ``W_``, ``Z_k_`` and ``scalers_`` (read
        from the party objects of the simulation; never sent), ``feature_importances_``,
        ``objective_`` (= ``history_``), ``n_iter_``, ``converged_``,
        ``n_features_in_`` and ``run_stats_``. Returns the server and the parties.
        """
        names = tuple(f"party{k}" for k in range(len(Xs)))
        holder = "coordinator" if owner is None else names[owner]
        roster = Roster(names, label_owner=holder)
        run = RunSpec(algorithm, params, roster, self.random_state, Defense.of(self.defense))
        ids = np.arange(len(y))
        datas = {
            p: PartyData(ids, X, y if p == holder else None) for p, X in zip(names, Xs, strict=True)
        }
        if owner is None:
            datas[holder] = PartyData(ids, None, y)
        self.classes_ = np.unique(y)
        with small_blas():
            fed = build_in_process(run, datas, transport=self.transport)
            self.transport_ = fed.transport
            self.Z_ = fed()
        server = fed.coordinator
        assert isinstance(server, ConsensusServer)
        parties = [p for n in names if isinstance(p := fed.parties[n], ConsensusParty)]
        self.W_: list[np.ndarray] = [p.W for p in parties if p.W is not None]
        self.Z_k_ = [p.Z_k for p in parties]
        self.scalers_ = [p.scaler for p in parties]
        self.feature_importances_ = [row_norms(W) for W in self.W_]
        self.objective_ = list(server.objective)
        self.history_ = self.objective_
        self.n_iter_ = len(self.objective_)
        self.converged_ = server.converged
        if not server.converged and params.tol > 0:  # tol = 0 asks for max_iter rounds
            obj = self.objective_
            change = abs(obj[-1] - obj[-2]) / max(abs(obj[-2]), 1e-300) if len(obj) > 1 else np.nan
            warnings.warn(
                ConvergenceWarning(
                    f"{type(self).__name__} stopped unconverged after max_iter={params.max_iter} "
                    f"rounds: the objective still changed by {change:.2g} (relative) in the last "
                    f"one, tol={params.tol:g}; raise max_iter for the converged solution"
                ),
                stacklevel=3,
            )
        self.n_features_in_ = [X.shape[1] for X in Xs]
        self.run_stats_ = self.transport_.log.summary()
        self.privacy_ = fed.privacy
        return server, parties


# --------------------------------------------------------------------------- reference


def consensus_centralized(
    Xs: Sequence[np.ndarray],
    Y: np.ndarray,
    betas: Sequence[float],
    zetas: Sequence[float],
    eta: float,
    *,
    label_owner: int | None,
    max_iter: int,
    tol: float,
    solver: IRLSOptions,
    random_state: int | None,
) -> dict[str, Any]:
    """The consensus updates run centrally in one function (no parties, no messages).

    The reference of :func:`~fedviews.linear.mmvfl_centralized` and
    :func:`~fedviews.linear.vfedmv_centralized`: the same initialisation streams
    (``Z`` from stream 0, ``Z_k`` from stream ``1 + k``), update order and stopping
    rule as the federated run, to check that it equals the centralized computation.

    Parameters
    ----------
    label_owner
        The party whose Z_k step holds ``eta ||Z_l - Y||^2`` (MMVFL Eq. 11; the Z
        step is Eq. 14); ``None``: the Z step holds ``eta ||Z - Y||^2`` (FedMV Eq. 10).

    Returns
    -------
    dict
        ``{"W": [...], "Z": Z, "Z_k": [...], "objective": [...]}``.
    """
    K = len(Xs)
    ss = spawn_streams(random_state, K + 1)
    n, c = Y.shape
    Z = orthonormal_nonnegative(n, c, np.random.default_rng(ss[0]))
    Zk = [orthonormal_nonnegative(n, c, np.random.default_rng(ss[1 + k])) for k in range(K)]
    Ws: list[Any] = [None] * K
    hist: list[float] = []
    prev = np.inf
    n_in, tol_in = solver.max_iter, solver.tol
    with small_blas():
        probs = [L21Problem(X, method=solver.method, eps=solver.eps) for X in Xs]
        for _ in range(max_iter):
            f = 0.0
            for k in range(K):
                Ws[k] = probs[k].solve(Zk[k], betas[k], W0=Ws[k], max_iter=n_in, tol=tol_in).W
                XW = Xs[k] @ Ws[k]
                Zk[k] = z_k_step(XW, Z, zetas[k], eta, Y if k == label_owner else None)
                if k == label_owner:  # MMVFL Eq. (11)
                    f += eta * sq(Zk[k] - Y)
                f += sq(XW - Zk[k]) + betas[k] * l21_norm(Ws[k])
            Z = z_step(zetas, Zk, eta, Y if label_owner is None else None)  # FedMV (10); MMVFL (14)
            f += sum(z * sq(zk - Z) for z, zk in zip(zetas, Zk, strict=True))
            if label_owner is None:
                f += eta * sq(Z - Y)
            hist.append(f)
            if relative_change_below(prev, f, tol):
                break
            prev = f
    return {"W": Ws, "Z": Z, "Z_k": Zk, "objective": hist}
