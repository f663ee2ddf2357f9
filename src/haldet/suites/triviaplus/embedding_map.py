"""TRIVIA+ Fig. 1: the test answers on a 2-D map fitted on the training answers, hallucinated and faithful apart.

The paper embeds each item with an NLI model (DeBERTa-v3-large, MNLI/FEVER/ANLI/LingNLI/WANLI), fits UMAP on the
training split and places the test split with it: prompted hallucinations (HaluEval) stand apart from the rest,
organic ones (RAGTruth, TRIVIA+) mix with the faithful answers. Here the embedding is what the run stored: the proxy
model's hidden states at its last stored layer, mean-pooled over the answer tokens (the `features` stage's
`hidden_mean`) or, when the run stored only that, at the last answer token (`hidden_last`), read through the run's
reader; a run that stored neither draws no map. The map is
UMAP (umap-learn, `pip install haldet[umap]`: 2 components, `N_NEIGHBORS` neighbours, seed 0), fitted on the train
items and applied to the test items; without umap-learn, or with the suite option `answer_map: pca`, it is PCA
(scikit-learn), fitted and applied the same way, and the figure says which (`answer_map: none`: no map). Labels are
the clean labels that ship with the data.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

import numpy as np

from haldet.figures.data import Scatter

if TYPE_CHECKING:  # annotations only: the reader (h5py, pyarrow) is the caller's
    from haldet.store.reader import CellReader, RunReader

STAGE, ARRAYS = "features", ("hidden_mean", "hidden_last")  # the first the run stored is the embedding
N_NEIGHBORS = 15
MIN_TRAIN = 5  # fewer training items with an embedding and a label: no map (nothing to fit)
COLOURS = {"hallucinated": "#d62728", "faithful": "#2ca02c"}  # the paper's red and green


def method(wanted: str = "umap") -> str:
    """The projection that runs: `wanted`, except "umap" without umap-learn installed gives "pca"."""
    return "pca" if wanted == "umap" and importlib.util.find_spec("umap") is None else wanted


def project(train: np.ndarray, test: np.ndarray, how: str, seed: int = 0) -> np.ndarray:
    """The test rows' 2-D coordinates under a projection fitted on the train rows (UMAP or PCA)."""
    if how == "umap":
        import umap  # lazy: numba, compiled on first use (tens of seconds)

        fitted = umap.UMAP(n_components=2, n_neighbors=min(N_NEIGHBORS, len(train) - 1), random_state=seed)
        return np.asarray(fitted.fit(train).transform(test), dtype=float)
    if how == "pca":
        from sklearn.decomposition import PCA  # lazy: sklearn (the suite module stays light)

        return np.asarray(PCA(n_components=2, random_state=seed).fit(train).transform(test), dtype=float)
    raise ValueError(f"unknown projection {how!r} (umap or pca)")


def embeddings(cell: CellReader) -> tuple[str, dict[str, np.ndarray]]:
    """The pooling the run stored (`ARRAYS`, in order) and each item's last stored layer of it, as float64."""
    for name in ARRAYS:
        found = cell.arrays(STAGE, name)
        if found:
            return name, {i: np.asarray(a, dtype=float).reshape(-1, a.shape[-1])[-1] for i, a in found.items()}
    return "", {}


def answer_map(cell: CellReader, labels: Mapping[str, str], title: str, name: str, how: str | None = None
               ) -> Scatter | None:
    """The map of one cell, or None when it stored no embeddings or too few training items have one."""
    pooled, vectors = embeddings(cell)
    parts = cell.parts()
    known = {i: v for i, v in vectors.items() if labels.get(i) in ("hallucination", "correct")}
    train = sorted(i for i in known if parts.get(i) == "train")
    test = sorted(i for i in known if parts.get(i) == "test")
    if len(train) < MIN_TRAIN or not test:
        return None
    wanted, how = how or "umap", method(how or "umap")
    xy = project(np.stack([known[i] for i in train]), np.stack([known[i] for i in test]), how)
    groups: dict[str, list[tuple[float, float]]] = {"faithful": [], "hallucinated": []}
    for i, (x, y) in zip(test, xy, strict=True):
        groups["hallucinated" if labels[i] == "hallucination" else "faithful"].append((float(x), float(y)))
    library = ("umap-learn" if how == "umap" else "scikit-learn" if wanted == how else
               "scikit-learn: umap-learn is not installed, pip install haldet[umap]")
    return Scatter(name, title, groups, xlabel=f"{how.upper()} 1", ylabel=f"{how.upper()} 2", colours=COLOURS,
                   note=f"{len(test)} test answers placed by a {how.upper()} fitted on {len(train)} training answers "
                        f"({library}); "
                        "embedding: the proxy model's last stored layer, "
                        f"{'mean over the answer tokens' if pooled == 'hidden_mean' else 'the last answer token'} "
                        "(the paper: a DeBERTa-v3-large NLI model)")


def answer_maps(run: RunReader, labels: Callable[[str], dict[str, str]], datasets: tuple[str, ...],
                how: str | None = None) -> list[Scatter]:
    """Fig. 1 per cell of the suite's datasets in the run."""
    out = []
    for entry in run.entries():
        dataset, model = str(entry.get("dataset")), str(entry.get("model"))
        if dataset not in datasets or entry.get("error"):
            continue
        found = answer_map(run.cell(dataset, model), labels(dataset), f"Fig. 1: {dataset} test answers ({model})",
                           f"triviaplus-fig1-{dataset}-{model}", how)
        if found is not None:
            out.append(found)
    return out
