"""The container every loader returns."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from fedviews.data._validation import check_ids, check_rows, check_view_names, check_Xs, check_y
from fedviews.errors import DataError


@dataclass(frozen=True)
class MultiViewDataset:
    """A multi-view dataset: the same samples seen through several feature sets.

    Attributes
    ----------
    views : list of ndarray
        One ``(n_samples, d_k)`` float64 array per view.
    y : ndarray
        ``(n_samples,)`` integer class indices into ``class_names``.
    ids : ndarray
        ``(n_samples,)`` unique sample IDs (strings or integers).
    view_names : list of str
    class_names : list of str
    name : str
        Dataset name (for reports).
    description : str
        Provenance and size (for ``fedviews datasets info``).
    images : ndarray or None
        ``(n_samples, H, W)`` raw images when the views are derived from images.
    """

    views: list[np.ndarray]
    y: np.ndarray
    ids: np.ndarray
    view_names: list[str]
    class_names: list[str]
    name: str = "dataset"
    description: str = ""
    images: np.ndarray | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        views = check_Xs(self.views, name=f"{self.name}.views")
        n = views[0].shape[0]
        object.__setattr__(self, "views", views)
        object.__setattr__(self, "y", check_y(self.y, n, name=f"{self.name}.y"))
        object.__setattr__(self, "ids", check_ids(self.ids, name=f"{self.name}.ids"))
        if len(self.ids) != n:
            raise DataError(f"{self.name}: {len(self.ids)} ids for {n} samples")
        if len(self.view_names) != len(views):
            raise DataError(
                f"{self.name}: {len(self.view_names)} view names for {len(views)} views"
            )
        if self.images is not None and len(self.images) != n:
            raise DataError(f"{self.name}: {len(self.images)} images for {n} samples")

    @property
    def n_samples(self) -> int:
        return int(self.views[0].shape[0])

    @property
    def n_views(self) -> int:
        return len(self.views)

    @property
    def n_classes(self) -> int:
        return len(self.class_names)

    @property
    def n_features(self) -> list[int]:
        return [int(v.shape[1]) for v in self.views]

    def subset(self, index: np.ndarray) -> MultiViewDataset:
        """Return the dataset restricted to the rows ``index`` (positions or boolean mask)."""
        index = check_rows(index, len(self.y))
        return replace(
            self,
            views=[v[index] for v in self.views],
            y=self.y[index],
            ids=self.ids[index],
            view_names=list(self.view_names),
            class_names=list(self.class_names),
            images=None if self.images is None else self.images[index],
        )

    def select_views(self, names: list[str]) -> MultiViewDataset:
        """Return the dataset with only the views named in ``names`` (in that order)."""
        names = check_view_names(names, self.view_names, dataset=self.name)
        views = [self.views[self.view_names.index(n)] for n in names]
        return replace(self, views=views, view_names=names, class_names=list(self.class_names))

    def summary(self) -> dict[str, object]:
        counts = np.bincount(self.y.astype(np.int64), minlength=self.n_classes)
        return {
            "name": self.name,
            "n_samples": self.n_samples,
            "views": dict(zip(self.view_names, self.n_features, strict=True)),
            "n_classes": self.n_classes,
            "class_counts": dict(zip(self.class_names, counts.tolist(), strict=True)),
            "description": self.description,
        }
