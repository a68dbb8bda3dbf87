"""Single View FL (the FedMV paper's baseline, Sec. 8.4): FedAvg of Eq. (20) against a
plain loop written from its description, and with one client against supFL (Eq. 20 on one
party's data is Eq. 15)."""

import numpy as np
import pytest

from fedviews.data import one_hot
from fedviews.federation import spawn_streams
from fedviews.linear import SingleViewFL, SupFL, l21_least_squares
from fedviews.linear.hfedmv.protocol import init_W


def _clients(sizes=(50, 20, 35), d=7, c=3, seed=0):
    """Clients of unequal sizes (so that N_l / N is no plain mean); the second lacks class 2."""
    rng = np.random.default_rng(seed)
    out = []
    for l, n in enumerate(sizes):  # noqa: E741
        y = np.arange(n) % (c - 1 if l == 1 else c)
        X = rng.normal(size=(n, d))
        X[:, :c] += 1.2 * np.eye(c)[y]
        out.append((X, y))
    return out


def test_fedavg_of_eq20_equals_a_plain_loop():
    """Each round every client runs ``local_iter`` IRLS iterations of Eq. (20) from the global W
    (the server's N(0, 1/d) draw first), and the server sets W = sum_l N_l / N W^l."""
    clients = _clients()
    beta, rounds, local_iter = 2.0, 4, 3
    est = SingleViewFL(beta=beta, n_rounds=rounds, local_iter=local_iter, random_state=7)
    est.fit(clients)
    classes = np.unique(np.concatenate([y for _, y in clients]))
    (W,) = init_W([clients[0][0].shape[1]], len(classes), spawn_streams(7, 1)[0])
    N = sum(len(y) for _, y in clients)
    objective = []
    for _ in range(rounds):
        local = [
            l21_least_squares(X, one_hot(y, classes)[0], beta, W0=W, max_iter=local_iter, tol=1e-6)
            for X, y in clients
        ]
        W = sum(len(y) / N * r.W for (_, y), r in zip(clients, local, strict=True))
        objective.append(sum(r.objective[-1] for r in local))
    np.testing.assert_allclose(est.W_, W, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(est.objective_, objective, rtol=1e-10)
    # the weights matter: the plain mean of the same local models is another W
    plain = np.mean([r.W for r in local], axis=0)
    assert np.abs(plain - W).max() > 1e-3


def test_one_client_is_supfl_on_its_data():
    """With a single client, FedAvg hands the client its own W back: the rounds continue one
    IRLS run of Eq. (20) from the server's random W, which converges to supFL's solution."""
    ((X, y),) = _clients(sizes=(60,))
    fl = SingleViewFL(beta=2.0, n_rounds=100, local_iter=5, inner_tol=0.0).fit([(X, y)])
    sup = SupFL(beta=2.0, max_iter=1000, tol=1e-14).fit([X], y)
    np.testing.assert_allclose(fl.W_, sup.W_[0], atol=1e-8)
    assert fl.objective_[-1] == pytest.approx(sup.objective_[0][-1], rel=1e-10)
    np.testing.assert_array_equal(fl.predict(X), sup.predict(X, party=0))
