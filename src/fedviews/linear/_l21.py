r"""ℓ2,1-regularised least squares by iteratively reweighted least squares (IRLS).

Solves

.. math:: \min_W \|XW - T\|_F^2 + \beta \|W\|_{2,1}, \qquad \|W\|_{2,1} = \sum_i \|w^{(i)}\|_2

(row-wise ℓ2,1: rows of ``W`` are features, so a zero row discards a feature)
with the half-quadratic scheme of MMVFL Eqs. (5)-(8) (Hou et al. 2014, Nie et al. 2010)::

    A = diag(1 / (2 (||w_i|| + eps)))                 (Eq. 7)
    W = (X^T X + beta A)^{-1} X^T T                     (Eq. 8)

Linear algebra
--------------
* ``n >= d`` ("primal"): the Gram matrix ``G = X^T X`` is computed once per
  :class:`L21Problem` and reused across IRLS iterations *and* across calls with
  new targets ``T`` (MMVFL calls the solver every round with a new ``Z_k``).
  Each iteration factorises ``G + beta A`` by Cholesky and solves; no inverse
  is ever formed.
* ``n < d`` ("woodbury", e.g. Caltech7's 1984-feature view): by the push-through
  identity ``(X^T X + beta A)^{-1} X^T = A^{-1} X^T (X A^{-1} X^T + beta I)^{-1}``,
  each iteration factorises an ``n x n`` matrix instead of ``d x d``.

Monotonicity
------------
With ``c_i = ||w_i|| + eps`` the quadratic ``||w||^2/(2c_i) + c_i/2`` upper-bounds
``||w||``, so each IRLS step decreases the objective up to at most
``beta * sum_i eps^2 / (2 c_i) <= beta * d * eps / 2`` (exactly monotone for
``eps -> 0``). With the default ``eps = 1e-10`` this slack is far below any tolerance.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import scipy.linalg as sla

from fedviews.errors import ConfigError, DataError


def row_norms(W: np.ndarray) -> np.ndarray:
    """ℓ2 norm of every row of ``W`` (the feature importances)."""
    return np.sqrt(np.einsum("ij,ij->i", W, W))


def l21_norm(W: np.ndarray) -> float:
    """Row-wise ℓ2,1 norm: the sum of the ℓ2 norms of the rows of ``W``."""
    return float(row_norms(W).sum())


@dataclass
class L21Result:
    """Output of :func:`l21_least_squares`."""

    W: np.ndarray
    objective: list[float] = field(default_factory=list)
    n_iter: int = 0
    converged: bool = False


def relative_change_below(prev: float, f: float, tol: float) -> bool:
    """The stopping rule of IRLS and of the consensus rounds: ``|f_prev - f| <= tol |f_prev|``
    (never with ``tol = 0``)."""
    return bool(tol > 0 and np.isfinite(prev) and abs(prev - f) <= tol * max(abs(prev), 1e-300))


def _check_beta(beta: float | np.ndarray, d: int) -> float | np.ndarray:
    """A positive scalar, or one positive value per row of ``W`` (block-wise β)."""
    b = np.asarray(beta, dtype=np.float64)
    if b.ndim == 0:
        if not np.isfinite(b) or b <= 0:
            raise ConfigError(f"beta must be a positive number, got {beta!r}")
        return float(b)
    if b.shape != (d,):
        raise ConfigError(f"a per-feature beta must have shape ({d},), got {b.shape}")
    if not (np.isfinite(b).all() and (b > 0).all()):
        raise ConfigError("every beta must be a positive number")
    return b


def _cho_solve(M: np.ndarray, rhs: np.ndarray, beta: float | np.ndarray) -> np.ndarray:
    """``M⁻¹ rhs`` for the symmetric positive definite IRLS system ``M`` (overwritten) by its
    Cholesky factor; a DataError where it is numerically singular.

    LAPACK's ``potrf``/``potrs`` directly: what ``scipy.linalg.cho_factor``/``cho_solve``
    call (the same factor, the same solution to the last bit), without their per-call
    argument handling, which cost as much as the factorisations of an MMVFL fit's thousand
    small systems (``benchmarks/bench_mmvfl.py``)."""
    potrf, potrs = _LAPACK
    c, info = potrf(M, lower=0, clean=0, overwrite_a=1)
    if info == 0:
        x, info = potrs(c, rhs, lower=0)
        if info == 0:
            return np.asarray(x)
    raise DataError(
        f"the IRLS system is numerically singular (LAPACK info {info}): "
        f"beta={np.min(beta):g} is too small for the scale of X (or X has duplicated / "
        "collinear columns); raise beta or standardize the features"
    )


#: LAPACK's double-precision Cholesky factorisation and solve
_LAPACK = sla.get_lapack_funcs(("potrf", "potrs"), (np.empty(1, dtype=np.float64),))


class L21Problem:
    """A design matrix with its cached factorisation data, solvable for many targets.

    Parameters
    ----------
    X : ndarray of shape (n_samples, n_features)
    method : {"auto", "primal", "woodbury"}
        ``auto`` picks Woodbury when ``n_samples < n_features``.
    eps : float
        The ε of Eq. (7).
    """

    def __init__(self, X: np.ndarray, *, method: str = "auto", eps: float = 1e-10) -> None:
        X = np.asarray(X, dtype=np.float64)
        if X.ndim != 2:
            raise DataError(f"X must be 2-D, got shape {X.shape}")
        if not np.isfinite(X).all():
            raise DataError("X contains NaN or infinite values")
        if method not in ("auto", "primal", "woodbury"):
            raise ConfigError(f"method must be 'auto', 'primal' or 'woodbury', got {method!r}")
        if not eps > 0:
            raise ConfigError(f"eps must be positive, got {eps!r}")
        n, d = X.shape
        self.X = X
        self.eps = float(eps)
        self.method = ("woodbury" if n < d else "primal") if method == "auto" else method
        # cached once: the Gram matrix (d x d) for the primal form
        self.gram = X.T @ X if self.method == "primal" else None

    def objective(self, W: np.ndarray, T: np.ndarray, beta: float | np.ndarray) -> float:
        R = self.X @ W - T
        return float(np.einsum("ij,ij->", R, R) + np.sum(beta * row_norms(W)))

    def step(
        self,
        W: np.ndarray | None,
        T: np.ndarray,
        beta: float | np.ndarray,
        XtT: np.ndarray | None = None,
    ) -> np.ndarray:
        """One IRLS step: A from ``W`` (Eq. 7; ``None`` means A = I), then W by Eq. (8).

        ``beta`` may be one value per row (block-wise regularisation, as in supMVLFL).
        """
        d = self.X.shape[1]
        a_inv = np.ones(d) if W is None else 2.0 * (row_norms(W) + self.eps)  # diag of A^{-1}
        if self.method == "primal":
            assert self.gram is not None
            M = self.gram.copy()
            M.flat[:: d + 1] += beta / a_inv  # its diagonal
            rhs = self.X.T @ T if XtT is None else XtT
            return _cho_solve(M, rhs, beta)
        # Woodbury / push-through with D = beta A (diagonal):
        # (X^T X + D)^{-1} X^T T = D^{-1} X^T (X D^{-1} X^T + I)^{-1} T
        d_inv = a_inv / beta
        XD = self.X * d_inv
        K = XD @ self.X.T
        K.flat[:: K.shape[0] + 1] += 1.0  # its diagonal
        return XD.T @ _cho_solve(K, T, beta)

    def solve(
        self,
        T: np.ndarray,
        beta: float | np.ndarray,
        *,
        W0: np.ndarray | None = None,
        max_iter: int = 100,
        tol: float = 1e-6,
    ) -> L21Result:
        """Run IRLS from ``W0`` (``None``: start from A = I, i.e. the ridge solution).

        Stops when the relative objective change is below ``tol`` or after ``max_iter``
        iterations. ``objective`` holds the value after every iteration.
        """
        beta = _check_beta(beta, self.X.shape[1])
        T = np.asarray(T, dtype=np.float64)
        if T.ndim != 2 or T.shape[0] != self.X.shape[0]:
            raise DataError(f"T must have shape ({self.X.shape[0]}, c), got {T.shape}")
        if max_iter < 1:
            raise ConfigError(f"max_iter must be >= 1, got {max_iter}")
        if W0 is not None:
            W0 = np.asarray(W0, dtype=np.float64)
            if W0.shape != (self.X.shape[1], T.shape[1]):
                raise DataError(
                    f"W0 must have shape ({self.X.shape[1]}, {T.shape[1]}), got {W0.shape}"
                )
        XtT = self.X.T @ T if self.method == "primal" else None
        TT = float(np.einsum("ij,ij->", T, T))

        def objective(W: np.ndarray) -> float:
            if XtT is None:
                return self.objective(W, T, beta)
            # ||XW - T||^2 = tr(W^T G W) - 2 tr(W^T X^T T) + ||T||^2: O(d^2 c), not O(n d c)
            assert self.gram is not None
            fit = float(np.einsum("ij,ij->", W, self.gram @ W - 2.0 * XtT)) + TT
            return max(fit, 0.0) + float(np.sum(beta * row_norms(W)))

        W = W0
        prev = objective(W0) if W0 is not None else np.inf
        hist: list[float] = []
        converged = False
        it = 0
        for it in range(1, max_iter + 1):  # noqa: B007
            W = self.step(W, T, beta, XtT)
            f = objective(W)
            hist.append(f)
            converged = relative_change_below(prev, f, tol)
            if converged:
                break
            prev = f
        assert W is not None
        return L21Result(W=W, objective=hist, n_iter=it, converged=converged)


def l21_least_squares(
    X: np.ndarray,
    T: np.ndarray,
    beta: float | np.ndarray,
    *,
    W0: np.ndarray | None = None,
    max_iter: int = 100,
    tol: float = 1e-6,
    eps: float = 1e-10,
    method: str = "auto",
) -> L21Result:
    """Solve ``min_W ||XW - T||_F^2 + beta ||W||_{2,1}`` (row-wise) by IRLS.

    Parameters
    ----------
    X : ndarray of shape (n_samples, n_features)
    T : ndarray of shape (n_samples, n_targets)
    beta : float or ndarray of shape (n_features,)
        Regularisation strength, > 0 (one value per feature for block-wise ℓ2,1).
    W0 : ndarray, optional
        Warm start; ``None`` starts from ``A = I`` (ridge solution).
    max_iter, tol : int, float
        Stop after ``max_iter`` iterations or when the relative objective change < ``tol``.
    eps : float
        ε of Eq. (7).
    method : {"auto", "primal", "woodbury"}
        Cholesky on ``X^T X + beta A`` or on ``X A^{-1} X^T + beta I``; ``auto`` picks
        Woodbury when ``n_samples < n_features``.

    Returns
    -------
    L21Result
        ``W`` (n_features, n_targets), ``objective`` per iteration, ``n_iter``, ``converged``.
    """
    from fedviews.linear._common import small_blas

    with small_blas():
        return L21Problem(X, method=method, eps=eps).solve(
            T, beta, W0=W0, max_iter=max_iter, tol=tol
        )
