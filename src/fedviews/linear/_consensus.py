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

Testing phase (FedMV Eqs. 12-13): :mod:`fedviews.linear._testing_phase`.

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

import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from fedviews.errors import FedViewsError, ProtocolError
from fedviews.federation import (
    Coordinator,
    LargestSent,
    Message,
    handles,
    reported_count,
    reported_share,
    secure_sum_setup,
    unmask_sum,
)
from fedviews.linear._common import (
    Scaler,
    orthonormal_nonnegative,
    restore,
)
from fedviews.linear._l21 import L21Problem, l21_norm, relative_change_below, row_norms
from fedviews.linear._testing_phase import (
    ConsensusTester,
    consensus_iterations,
    consensus_weights,
    masked_names,
    sq,
    z_k_step,
)


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


def z_step(
    zetas: Sequence[float], Zks: Sequence[np.ndarray], eta: float = 0.0, Y: np.ndarray | None = None
) -> np.ndarray:
    """The Z step ``sum_k zeta_k Z_k / sum_k zeta_k`` (MMVFL Eq. 14); with the label term
    (``Y``), ``(sum_k zeta_k Z_k + eta Y) / (sum_k zeta_k + eta)`` (FedMV Eqs. 10 and 17)."""
    S = np.asarray(sum(z * Zk for z, Zk in zip(zetas, Zks, strict=True)))
    return S / sum(zetas) if Y is None else (S + eta * Y) / (sum(zetas) + eta)


@dataclass(frozen=True)
class IRLSOptions:
    """The inner IRLS loop of a W step: iterations, relative tolerance, ε, solver form."""

    max_iter: int = 20
    tol: float = 1e-6
    eps: float = 1e-10
    method: str = "auto"


class ConsensusParty(ConsensusTester):
    """Party ``k``: its view ``X_k``, its ``W_k`` (and test rows, labels) never leave it.

    Parameters
    ----------
    Y, eta
        The label term of this party's own Z_k step (MMVFL's label owner);
        ``eta = 0``: none.
    labels
        ``(Y, classes, y_test)`` of a label owner that sends ``Y`` to the server
        (``labels``) and scores the test consensus (``score``): V-FedMV deployed.
    X_test, scaler, secure
        As :class:`ConsensusTester` (``X`` is already scaled with ``scaler``).
    classes
        A label owner's labels in the order of the columns of ``W`` (``Y``'s; with
        ``labels``, its ``classes``): part of its results, to read ``argmax X W`` as labels.
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
        super().__init__(
            name,
            zeta=zeta,
            role=role,
            scaler=scaler,
            X_test=X_test,
            classes=classes if labels is None else labels[1],
            secure=secure,
        )
        self.problem = L21Problem(X, method=solver.method, eps=solver.eps)
        self.beta, self.eta = beta, eta
        self.Y = Y
        self.solver = solver
        self.labels = labels
        self.Z_k = orthonormal_nonnegative(X.shape[0], n_classes, np.random.default_rng(seed))
        self.inner_iterations: list[int] = []

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
        local = self.local_update(msg.array("Z", self.Z_k.shape, np.float64))
        return self._send_Z(msg, "Z_k", self.Z_k, local)

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
        Z = msg.array("Z_test", (len(y_test), len(classes)), np.float64)
        self.y_test_pred = classes[np.argmax(Z, axis=1)]
        accuracy = float(np.mean(self.y_test_pred == y_test))
        return self.reply(msg, meta={"accuracy": accuracy, "n_test": len(y_test)})

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


def overflowed(
    parties: Sequence[str],
    zetas: Sequence[float],
    Zks: Sequence[np.ndarray],
    local: Sequence[float],
) -> ProtocolError:
    """The refusal of a round whose consensus or objective overflowed from finite inputs
    (e.g. a ``Z_k`` of 1e300, a ``zeta_k`` of 1e308): it names the party whose input is the
    largest (``zeta_k * max |Z_k|``, or its local objective), not the parties that would
    receive the overflowed ``Z`` and report infinities of their own."""
    with np.errstate(over="ignore"):
        size = [
            max(abs(z) * float(np.abs(Zk).max(initial=0.0)), abs(f))
            for z, Zk, f in zip(zetas, Zks, local, strict=True)
        ]
    k = int(np.argmax(size))
    return ProtocolError(
        f"{parties[k]!r} sent values so large (zeta_k * max |Z_k| = {size[k]:.3g}, local "
        f"objective {local[k]:.3g}) that the consensus overflows: refused",
        party=parties[k],
    )


def agreed_rows(replies: Mapping[str, Message], name: str, width: int) -> int:
    """The number of rows of ``name`` that most of ``replies`` carry (taking the first
    party's let a dishonest first party get the others named for its own count); a
    :class:`ProtocolError` without a culprit where no count has a majority."""
    rows = {p: len(r.array(name, (None, width))) for p, r in replies.items()}
    ranked = Counter(rows.values()).most_common()
    if len(ranked) > 1 and ranked[0][1] == ranked[1][1]:
        raise ProtocolError(f"the parties sent {name} of different numbers of rows: {rows}")
    return ranked[0][0]


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

    #: the largest ``max |Z_k|`` each party sent so far, to name the one whose huge values
    #: made another party fail on the consensus, rounds later (every party's ``Z_k`` grows
    #: towards the poisoned ``Z``; :func:`~fedviews.federation.failed_on_huge_input`); not
    #: pickled, not checkpointed (a resumed run compares the rounds since)
    _transient: ClassVar[Mapping[str, Callable[[], Any]]] = {"_sent": lambda: LargestSent("Z_k")}

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
        test_rows: int | None = None,
    ) -> None:
        super().__init__()
        self.frac_bits = frac_bits
        #: the rows of ``Z_k_test`` every party must send (the aligned test samples, as the
        #: setup agreed them); ``None``: those that most parties send
        self.test_rows = test_rows
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
        self._sent = LargestSent("Z_k")

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
                raise ProtocolError(f"{p!r} sent zeta = {z!r}; each zeta_k must be > 0", party=p)
        return zetas

    def _z_step(self, replies: Mapping[str, Message]) -> float:
        """The Z step (MMVFL Eq. 14; FedMV Eq. 10 with ``Y``); returns the round's objective."""
        Y, eta = self.Y, self.eta
        if self.frac_bits is None:
            Zks = [replies[p].array("Z_k", self.Z.shape, np.float64) for p in self.parties]
            zetas = self.zeta or self._zetas(replies)
            local = [replies[p].number("local_objective") for p in self.parties]
            with np.errstate(over="ignore", invalid="ignore"):
                Z = z_step(zetas, Zks, eta, Y)
                f = float(sum(local)) + sum(
                    z * sq(Zk - Z) for z, Zk in zip(zetas, Zks, strict=True)
                )
            if not (math.isfinite(f) and np.isfinite(Z).all()):
                raise overflowed(self.parties, zetas, Zks, local)
            self.Z = Z
            for p, Zk in zip(self.parties, Zks, strict=True):
                self._sent.add(p, Zk)
        else:  # from the secure sums: sum_k zeta_k ||Z_k - Z||^2 = zsq - 2 <S, Z> + zsum ||Z||^2
            S, zsum, zsq, f = secure_sums(replies, "Z_k", self.Z.shape[1], self.frac_bits)
            self.Z = S / zsum if Y is None else (S + eta * Y) / (zsum + eta)
            f += zsq - 2.0 * float(np.einsum("ij,ij->", S, self.Z)) + zsum * sq(self.Z)
        return float(f if Y is None else f + eta * sq(self.Z - Y))

    def run(self, on_round_end: Callable[[int], None] | None = None) -> np.ndarray:
        """Rounds ``len(objective) + 1 .. max_iter`` (all of them unless :meth:`load_state`),
        then the testing phase if configured.

        ``on_round_end(r)`` is called after round ``r`` (e.g. to write a checkpoint). Once
        training is over (converged, or ``max_iter`` rounds), a run is only the testing
        phase: how the estimator predicts new rows, with the runner that fitted it.
        """
        r = len(self.objective)
        if self.converged or r >= self.max_iter:
            return self._test_phase()
        if self.frac_bits is not None:  # fresh keys every run (and every resumption)
            secure_sum_setup(self, self.parties, self.frac_bits, round=r)
        if self.label_owner is not None:  # the label owner sends Y (a placeholder until then)
            assert self.Y is not None
            reply = self.send(self.label_owner, "labels", round=r)
            self.Y = reply.array("Y", self.Y.shape)
        prev = self.objective[-1] if self.objective else np.inf
        while not self.converged and r < self.max_iter:
            r += 1
            try:
                replies = self.broadcast(self.parties, "update", arrays={"Z": self.Z}, round=r)
            except FedViewsError as exc:  # a party failed on Z: one poisoned by a huge Z_k?
                blamed = self._sent.failure(exc)
                if blamed is None:
                    raise
                raise blamed from exc
            f = self._z_step(replies)
            self.objective.append(f)
            self.converged = relative_change_below(prev, f, self.tol)
            if on_round_end is not None:
                on_round_end(r)
            prev = f
        return self._test_phase()

    def _test_phase(self) -> np.ndarray:
        """The testing phase if configured (:attr:`test`); returns the training consensus."""
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
            rows = self.test_rows or agreed_rows(replies, "Z_k_test", self.Z.shape[1])
            shape = (rows, self.Z.shape[1])  # (a party that sends other rows is named)
        else:  # one "party": the securely summed average
            w = np.ones(1)

        def received(replies: Mapping[str, Message]) -> list[np.ndarray]:
            if self.frac_bits is None:
                return [replies[p].array("Z_k_test", shape, np.float64) for p in self.parties]
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
        """The testing phase: the consensus ``Z_test`` of the parties' test rows, scored by
        the label owner where a party holds the labels (without one, the server holds them
        and keeps ``Z_test``, as the paper's server predicts)."""
        Z_test = self.consensus(max_iter, tol)
        if self.label_owner is None:
            self.scores.update(Z_test=Z_test, test_iterations=self.test_iterations)
            return
        reply = self.send(
            self.label_owner,
            "score",
            arrays={"Z_test": Z_test},
            round=len(self.objective) + self.test_iterations,
        )
        self.scores.update(
            Z_test=Z_test,
            test_accuracy=reported_share(reply, "accuracy"),
            n_test=reported_count(reply, "n_test"),
            test_iterations=self.test_iterations,
        )

    def predict(self) -> None:
        """``fedviews predict``: the testing phase (:attr:`test`) on the parties' new rows, its
        consensus ``Z^test`` sent to the label owner, which predicts their labels (``argmax``,
        Eq. 2); the server keeps nothing but the iteration count."""
        if self.test is None or self.label_owner is None:
            raise ProtocolError("a prediction needs the testing phase's options and a label owner")
        Z_test = self.consensus(*self.test)
        round_ = len(self.objective) + self.test_iterations
        self.send(self.label_owner, "predict", arrays={"Z_test": Z_test}, round=round_)
        self.scores.update(test_iterations=self.test_iterations)

    def unconverged(self) -> str | None:
        """``None`` unless training stopped at ``max_iter`` rounds before ``tol`` held (and
        ``tol > 0``: ``tol = 0`` asks for ``max_iter`` rounds); then one sentence naming
        ``max_iter`` and the objective's last relative change (the deployment's output, the
        estimator's :class:`~fedviews.errors.ConvergenceWarning`)."""
        obj = list(self.objective)
        if self.converged or self.tol <= 0 or len(obj) < self.max_iter:
            return None
        change = abs(obj[-1] - obj[-2]) / max(abs(obj[-2]), 1e-300) if len(obj) > 1 else np.nan
        return (
            f"not converged: stopped after max_iter={self.max_iter} rounds, the objective still "
            f"changed by {change:.2g} (relative) in the last one, tol={self.tol:g}; raise "
            "max_iter for the converged solution"
        )

    def progress(self) -> list[str]:
        """One line per finished round, a note when training stopped before ``max_iter``
        rounds (converged) or at ``max_iter`` unconverged (:meth:`unconverged`), then the
        test result (once scored)."""
        obj = list(self.objective)
        lines = [f"round {r + 1}: objective {v:.6g}" for r, v in enumerate(obj)]
        note = self.unconverged()
        if self.converged and len(obj) < self.max_iter:
            note = (
                f"converged after {len(obj)} of max_iter={self.max_iter} rounds: the objective "
                f"changed by less than tol={self.tol:g} (relative) in the last one"
            )
        if note is not None:
            lines.append(note)
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
