"""The Caltech7 .mat loader, on a file written here in the common multi-view layout."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from scipy.io import savemat

from fedviews import data
from fedviews.errors import DataError

WIDTHS = (48, 40, 254, 1984, 512, 928)


def write_mat(path: Path, widths: tuple[int, ...], n: int, *, column: bool = False) -> np.ndarray:
    rng = np.random.default_rng(0)
    cells = np.empty((len(widths), 1) if column else (1, len(widths)), dtype=object)
    for k, d in enumerate(widths):
        cells.flat[k] = rng.random((n, d))
    labels = np.repeat(np.arange(1, 8), n // 7)[:, None].astype(np.float64)
    savemat(path, {"X": cells, "Y": labels})
    return cells


def test_loads_caltech7_layout(tmp_path: Path) -> None:
    path = tmp_path / "Caltech101-7.mat"
    cells = write_mat(path, WIDTHS, 21)
    ds = data.load("caltech7", path=str(path))
    assert ds.n_samples == 21 and ds.n_features == list(WIDTHS)
    assert ds.view_names == ["gabor", "wavelet_moments", "centrist", "hog", "gist", "lbp"]
    assert ds.class_names == [str(k) for k in range(1, 8)]
    assert np.bincount(ds.y).tolist() == [3] * 7
    np.testing.assert_allclose(ds.views[3], cells.flat[3])


def test_env_var_and_column_cells(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "other.mat"
    write_mat(path, (5, 3), 14, column=True)
    monkeypatch.setenv("FEDVIEWS_CALTECH7", str(path))
    assert data.info("caltech7")["available"] is True
    assert data.fetch("caltech7") == path
    ds = data.load("caltech7")
    assert ds.n_features == [5, 3] and ds.view_names == ["view0", "view1"]


def test_missing_or_malformed_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FEDVIEWS_CALTECH7", raising=False)
    with pytest.raises(DataError, match="FEDVIEWS_CALTECH7"):
        data.load("caltech7")
    assert data.info("caltech7")["available"] is False
    with pytest.raises(DataError, match="not found"):
        data.load("caltech7", path=str(tmp_path / "nope.mat"))
    bad = tmp_path / "bad.mat"
    savemat(bad, {"X": np.zeros((3, 2)), "Y": np.zeros((3, 1))})
    with pytest.raises(DataError, match="cell array"):
        data.load("caltech7", path=str(bad))
    savemat(bad, {"views": np.zeros((3, 2))})
    with pytest.raises(DataError, match=r"no variable\(s\) \['X', 'Y'\]"):
        data.load("caltech7", path=str(bad))
