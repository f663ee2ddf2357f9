"""Helpers shared by the sample-consistency detectors: valid samples, pair models with recorded fallbacks.

A package-private helper module of `haldet.detectors` (the leading underscore keeps the detector registry from
scanning it); detectors here and suite detectors (`suites/verigray/nli_verifier`) import it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from haldet.detectors.base import Detector
from haldet.models.pairs.base import Pair, PairModel
from haldet.models.pairs.cache import PairCache
from haldet.models.pairs.loader import load_pair_model


def nonempty(samples: Any) -> list[str] | None:
    """The non-empty sample texts (stripped), or None when the signal is missing for the item."""
    if samples is None:
        return None
    return [s.strip() for s in samples if isinstance(s, str) and s.strip()]


def answer_and_samples(response: Any, samples: Any) -> tuple[str, list[str]] | str:
    """The stripped answer and its non-empty samples, or why the item cannot be scored (shared by every detector
    that compares an answer with its samples)."""
    kept = nonempty(samples)
    if kept is None:
        return "no samples"
    if not kept:
        return "all samples are empty"
    if not isinstance(response, str) or not response.strip():
        return "empty response"
    return response.strip(), kept


def with_question(question: str, text: str, include: bool = True) -> str:
    """The NLI text of an answer or sample: "question text" (stripped) when `include` and there is a question, else
    the text. One rule for every detector that puts the question in its NLI input (semantic entropy, the graph
    methods, KLE, Semantic Density), so their pairs are the same strings and each is computed once."""
    return f"{question} {text}".strip() if include and question else text


def sample_logliks(value: Any, n_samples: int) -> np.ndarray | None:
    """SAMPLE_LOGLIKS as a float64 [K, 2] array, or None when missing or misshapen."""
    if value is None:
        return None
    arr = np.asarray(value, dtype=np.float64)
    if arr.ndim != 2 or arr.shape[1] != 2 or (n_samples >= 0 and arr.shape[0] != n_samples):
        return None
    return arr


def pair_model(det: Detector, kind: str, model_param: str, fallback_param: str = "fallback",
               **kw: Any) -> PairModel:
    """Load the detector's pair model (or its fallback) once per process; record which one in `det.meta`."""
    model, meta = load_pair_model(kind, det.params[model_param], fallback=det.params.get(fallback_param),
                                  device=det.params.get("device", "auto"), **kw)
    det.meta[model_param] = meta
    return model


def cache_for(det: Detector) -> PairCache:
    return PairCache(det.workdir)


def pair_scores(det: Detector, kind: str, model_param: str, pairs: Sequence[Pair], label: str) -> np.ndarray:
    """[len(pairs), width] scores of `pairs` by the detector's pair model (its `batch_size` and `max_length`
    params), through its pair cache, with a progress line `label` counting the distinct pairs."""
    model = pair_model(det, kind, model_param, batch_size=det.params["batch_size"],
                       max_length=det.params["max_length"])
    return cache_for(det).scores(model, pairs, det.progress(label, len(set(pairs))))


ENDPOINT_PARAMS = ("base_url", "api_key_env", "timeout", "concurrency", "retries")


def prompted_scores(det: Detector, question: str, model: str, pairs: Sequence[Pair], label: str,
                    settings: dict[str, Any] | None = None) -> tuple[np.ndarray, PairModel]:
    """[len(pairs), 1] replies of the LLM `model` to `question` (`haldet.models.pairs.prompted.QUESTIONS`) about
    each pair, through the pair cache (each distinct pair asked once per model and question), with the model that
    answered. `settings` (default: the detector's own) gives `base_url` (None = a local model) and the endpoint's
    `api_key_env`, `timeout`, `concurrency`, `retries`; `batch_size` is the detector's."""
    source = det.params if settings is None else settings
    kw = {k: source[k] for k in ENDPOINT_PARAMS if source.get(k) is not None}
    loaded, _ = load_pair_model(question, model, batch_size=int(det.params.get("batch_size", 8)), **kw)
    return cache_for(det).scores(loaded, pairs, det.progress(label, len(set(pairs)))), loaded
