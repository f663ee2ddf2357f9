"""Which pair model a name means, loaded once per process, with its fallback.

`load_pair_model` tries the requested model and, when it cannot be loaded (offline, missing files), says so on
the `haldet` logger and loads the configured fallback; the returned `meta` records which model produced the
numbers, so the manifest shows it. A model's `id` ends with its files' fingerprint (`model_suffix`).
"""

from __future__ import annotations

import json
import logging
from typing import Any

from haldet.errors import HaldetError
from haldet.models.pairs.base import PairModel
from haldet.models.pairs.bertscore import BERTScorePairs
from haldet.models.pairs.entailment import HFEntailment, LLMEntailment
from haldet.models.pairs.prompted import QUESTIONS, PromptedPairs
from haldet.models.pairs.similarity import BiEncoderSimilarity, CrossEncoderSimilarity
from haldet.models.pairs.support import ENDPOINT_PREFIX, ENDPOINT_SETTINGS, EndpointSupport, HFSupport, LLMSupport
from haldet.models.provenance import locate
from haldet.util.assets import EMBEDDING_ALIASES, hub_reachable

log = logging.getLogger("haldet")

_LOADED: dict[tuple[Any, ...], PairModel] = {}


def _build(kind: str, name: str, **kw: Any) -> PairModel:
    key = (kind, name, tuple(sorted(kw.items())))
    if key not in _LOADED:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # a local load's "Loading weights" bar is a stray line in a run's output
        if kind == "nli":
            if name.startswith("llm:"):
                kw.pop("max_length", None)
                _LOADED[key] = LLMEntailment(name[4:], **kw)
            else:
                _LOADED[key] = HFEntailment(name, **kw)
        elif kind == "similarity":
            if name.startswith("bi:") or name in EMBEDDING_ALIASES:
                kw.pop("max_length", None)
                _LOADED[key] = BiEncoderSimilarity(name.removeprefix("bi:"), **kw)
            else:
                _LOADED[key] = CrossEncoderSimilarity(name, **kw)
        elif kind == "bertscore":
            _LOADED[key] = BERTScorePairs(name, **kw)
        elif kind == "support":
            local = {k: v for k, v in kw.items() if k not in (*ENDPOINT_SETTINGS, "prompt")}  # a local fallback's
            prompt = {"prompt": kw["prompt"]} if kw.get("prompt") is not None else {}  # an asked checker's question
            if name.startswith(ENDPOINT_PREFIX):
                _LOADED[key] = EndpointSupport(name.removeprefix(ENDPOINT_PREFIX), batch_size=kw.get("batch_size", 8),
                                               **{k: v for k, v in kw.items() if k in ENDPOINT_SETTINGS}, **prompt)
            elif name.startswith("llm:"):
                _LOADED[key] = LLMSupport(name[4:], **local, **prompt)
            else:
                _LOADED[key] = HFSupport(name, **local)  # a classifier head reads the pair, not a question
        elif kind in QUESTIONS:  # an LLM asked in words (local model, or an endpoint given `base_url`)
            _LOADED[key] = PromptedPairs(name, QUESTIONS[kind], **kw)
        else:
            raise ValueError(f"unknown pair-model kind {kind!r}")
        _LOADED[key].id += model_suffix(name, _LOADED[key])
    return _LOADED[key]


def model_suffix(name: str, model: PairModel) -> str:
    """What else keys a pair model's numbers beyond its name: its files' fingerprint and its max_length (the pair
    cache is filed under `id`, so another revision or truncation never answers from it)."""
    if model.remote:  # its id names the endpoint already; no files here
        return ""
    length = getattr(model, "max_length", None)
    return f"@{locate(name) or 'unlocated'}" + (f":ml{length}" if length is not None else "")


def load_pair_model(kind: str, name: str, *, fallback: str | None = None,
                    **kw: Any) -> tuple[PairModel, dict[str, Any]]:
    """The requested model, or the fallback when it cannot be loaded (logged and recorded in `meta`).

    kind: "nli" (`llm:<model>` for the prompted backend), "similarity" (`bi:<model>` or an embedding alias for
    a bi-encoder), "bertscore", "support", or a question of `haldet.models.pairs.prompted.QUESTIONS`. Models are
    loaded once per process.
    """
    failed_key = (kind, name, json.dumps(kw, sort_keys=True, default=str))
    try:
        # tried once in this process: do not retry (or repeat the notice) for every use, unless its files have
        # appeared since (a download finished, a local copy was made): then the requested model is what runs
        if failed_key in _FAILED and locate(name) is None:
            raise _FAILED[failed_key]
        model = _build(kind, name, **kw)
        return model, {"requested": name, "loaded": name, "used": model.id}
    except HaldetError as exc:
        if not fallback or fallback == name:
            raise
        if failed_key not in _FAILED:
            _FAILED[failed_key] = exc
            log.warning("%s model %r %s; %r runs instead (named with every score it makes and in the manifest)",
                        kind, name, _unavailable_reason(), fallback)
        model = _build(kind, fallback, **kw)
        return model, {"requested": name, "loaded": fallback, "used": model.id, "fallback_reason": exc.what}


_FAILED: dict[tuple[str, str, str], HaldetError] = {}  # pair models that could not be loaded in this process


def _unavailable_reason() -> str:
    """Why a requested model did not load, in words (the library's own error text goes to the manifest)."""
    if not hub_reachable():
        return "is not in the local Hugging Face cache and the hub cannot be reached"
    return "could not be loaded (the reason is recorded in the manifest)"
