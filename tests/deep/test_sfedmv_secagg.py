"""S-FedMV with secure aggregation: both stages (the GRU extractors' FedAvg and the H-FedMV
fusion) send only masked N_l-weighted sums, and the run equals the plain one."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("cryptography")

from fedviews.data import load_sequences  # noqa: E402
from fedviews.deep.sfedmv import SFedMV  # noqa: E402
from fedviews.deep.sfedmv.nets import get_params  # noqa: E402

TINY = {"hidden_size": 8, "n_rounds": 2, "local_epochs": 1, "batch_size": 16, "fusion_rounds": 3}


@pytest.fixture(scope="module")
def clients():
    ds = load_sequences("watch")
    subjects = ds.clients()[:3]
    idx = np.concatenate(
        [np.flatnonzero(ds.client_ids == s)[::2][: 20 + 5 * i] for i, s in enumerate(subjects)]
    )
    return ds.subset(idx).by_client()


def test_the_secure_run_equals_the_plain_run_and_sends_only_masked_sums(clients):
    torch.set_num_threads(1)
    plain = SFedMV(**TINY, random_state=0).fit(clients)
    secure = SFedMV(**TINY, random_state=0, defense="secagg").fit(clients)
    for k in range(2):
        a, b = get_params(plain.extractors_[k]), get_params(secure.extractors_[k])
        for name in a:
            np.testing.assert_allclose(b[name], a[name], rtol=1e-4, atol=1e-6)
    for a, b in zip(plain.fusion_.W_, secure.fusion_.W_):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(secure.round_loss_, plain.round_loss_, rtol=1e-6)
    cross = secure.run_stats_["crossings"]
    for c in ("client0", "client1", "client2"):
        sent = set(cross[f"{c} -> coordinator"])
        assert sent and all(n.startswith("masked_") for n in sent)
        assert {"masked_view0/loss", "masked_view1/loss", "masked_objective"} <= sent
    assert secure.transport_.policy.allowed[("client", "coordinator")] == sent
