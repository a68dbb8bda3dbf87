"""The testing phase of FedMV (Che et al., Eqs. 12-13), shared by V-FedMV and H-FedMV, and the
party that plays it (:class:`ConsensusTester`; the training party of MMVFL and V-FedMV,
:class:`~fedviews.linear._consensus.ConsensusParty`, is one).

With ``P_k = X_k^test W_k`` fixed, alternate ``Z^test = sum zeta_k Z_k^test / sum zeta_k``
(Eq. 12) and ``Z_k^test = (P_k + zeta_k Z^test) / (1 + zeta_k)`` (Eq. 13) from
``Z_k^test = P_k``: in one place (:func:`fedmv_consensus`: an H-FedMV client, a loaded
estimator) or with the parties (the server's ``test_init`` / ``test_update``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from fedviews.errors import DataError, ProtocolError
from fedviews.federation import Message, SecureSumParty, handles
from fedviews.linear._common import Scaler, check_iter, per_party, scaled


def masked_names(name: str) -> tuple[str, str]:
    """The masked arrays that stand for ``name`` (``Z_k``, ``Z_k_test``) under secure
    aggregation: ``zeta_k`` times it, and ``(zeta_k, zeta_k ||.||^2, local terms)``."""
    return f"masked_zeta_{name}", f"masked_stats_{name}"


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


def fedmv_consensus(
    Ps: Sequence[np.ndarray],
    zeta: float | Sequence[float],
    *,
    max_iter: int = 1000,
    tol: float = 1e-8,
) -> tuple[np.ndarray, int]:
    """Testing phase (Eqs. 12-13) run in one place: the consensus ``Z^test`` of ``P_k = X_k^test W_k``.

    Returns ``(Z_test, n_iter)``. Stops when ``||Z_t - Z_{t-1}||_F <= tol ||Z_t||_F``.
    This is the local computation of an H-FedMV client and the centralized twin of
    the V-FedMV testing protocol.
    """
    zetas = per_party(zeta, len(Ps), "zeta")
    check_iter(max_iter, tol, "test_max_iter", "test_tol")

    def update(Z: np.ndarray, it: int) -> list[np.ndarray]:  # Eq. (13)
        return [z_k_step(P, Z, z) for P, z in zip(Ps, zetas, strict=True)]

    Zk = [np.array(P, dtype=np.float64) for P in Ps]
    return consensus_iterations(Zk, update, consensus_weights(zetas), max_iter, tol)


class ConsensusTester(SecureSumParty):
    """Party ``k`` in the testing phase (FedMV Eqs. 12-13): its fitted ``W_k``, ``zeta_k`` and
    scaler, and its own test rows; only ``Z_k^test`` leaves it.

    The training party (:class:`ConsensusParty`) is one; a deployed party that predicts new
    rows with the model part it kept (``fedviews predict``) is built as one from its fitted
    ``W`` alone. A label owner (``classes``: its labels in the order of ``W``'s columns)
    turns the consensus it is sent (``predict``) into class labels.

    Parameters
    ----------
    W
        The fitted ``W_k`` (``None`` until a training round ran).
    zeta
        ``zeta_k``, sent with every ``Z_k^test`` (the server weighs the average by it).
    scaler
        ``(mean, scale)`` of its own training columns with ``params.standardize``: every
        test view it loads is scaled with it (:meth:`load_test`); it never leaves the party.
    X_test
        This party's test rows (raw), loaded for the testing phase when it starts.
    classes
        A label owner's labels in the order of the columns of ``W``: part of its results,
        to read ``argmax Z^test`` as labels.
    secure
        Send ``Z_k_test`` only masked for the server's secure sum; a request before the key
        exchange is refused.
    """

    def __init__(
        self,
        name: str,
        *,
        zeta: float,
        role: str = "party",
        W: np.ndarray | None = None,
        scaler: Scaler | None = None,
        X_test: np.ndarray | None = None,
        classes: np.ndarray | None = None,
        secure: bool = False,
    ) -> None:
        super().__init__(name, role=role)
        self.zeta, self.W, self.scaler, self.X_test = zeta, W, scaler, X_test
        self.classes, self.secure = classes, secure
        self.P_test: np.ndarray | None = None
        self.Z_k_test: np.ndarray | None = None
        #: the label owner's labels of its test rows (``score``) or new rows (``predict``)
        self.y_test_pred: np.ndarray | None = None
        #: the consensus ``Z^test`` it was sent to predict from (``predict``)
        self.Z_test: np.ndarray | None = None

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

    def hold_test(self, X_test: np.ndarray) -> None:
        """Local: this party now holds the (raw) test view ``X_test`` of its own rows; the
        next testing phase (``test_init``) reads it, as a deployed party reads its file's."""
        self.X_test, self.P_test = X_test, None

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
        Z_test = msg.array("Z_test", self.P_test.shape, np.float64)
        self.Z_k_test = z_k_step(self.P_test, Z_test, self.zeta)  # Eq. (13)
        return self._send_Z(msg, "Z_k_test", self.Z_k_test, None)

    @handles("predict")
    def on_predict(self, msg: Message) -> None:
        """The label owner's prediction of its test rows: ``argmax`` of the consensus
        ``Z^test`` (Eq. 2) the server computed with every party, as class labels."""
        if self.classes is None:
            raise ProtocolError(f"{self.name!r} holds no labels: only the label owner predicts")
        if self.P_test is None:
            raise ProtocolError(f"{self.name!r} got predict before test_init")
        self.Z_test = msg.array("Z_test", (len(self.P_test), len(self.classes)), np.float64)
        self.y_test_pred = self.classes[np.argmax(self.Z_test, axis=1)]
