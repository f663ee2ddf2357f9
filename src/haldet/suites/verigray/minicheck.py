"""MiniCheck-style sentence fact checker (Tang et al. 2024; VeriGray's "Fine-tuned LLMs" baseline MiniCheck 7B):
document + sentence -> P(the document supports the sentence).

The checker is an auxiliary model of kind "support" (`haldet.models.pairs`): a sequence-classification checkpoint
(MiniCheck's roberta/deberta heads; hub id or local path); with `llm:<model>`, a causal LM asked Yes/No
(Bespoke-MiniCheck-7B; hub id, local path or an embedded alias); or with `openai:<model>`, the same question asked
of a checker served behind an OpenAI-compatible endpoint (`base_url`, `api_key_env`, `timeout`, `concurrency`,
`retries`, `backoff`: the endpoint settings' names elsewhere; `params`: its request parameters as every role
declares them, `haldet.endpoint_params`), read from the first generated token's `top_logprobs` alternatives.
Its identity (requested, loaded, fingerprint; an endpoint's model name and base URL)
keys the scores and lands in the manifest; a checker that cannot be loaded, or an endpoint that does not answer,
is an error naming it (or, only when the `fallback` parameter names one, a local checker that cannot be loaded
gives way to the recorded substitute). An endpoint reply without log-probs, or without Yes or No among the first
token's alternatives, makes the sentence NaN with that reason (never 0.5).

As MiniCheck does, a long document is cut into chunks of about `chunk_words` words (at sentence boundaries where
possible) and a sentence's support is the highest over the chunks (NaN when a chunk got no answer). The chunk size
is the checkpoint's own (`chunk_words: auto`, `CHUNKS`): the MiniCheck package reads its 7B checker
(Bespoke-MiniCheck-7B) in chunks of about 32K tokens, here 24,000 words (0.75 words per token) with
`max_length: auto` = 32,768 tokens, and its classifier heads in chunks of about 400 words; the resolved values are
the detector's parameters, so they key its scores. The causal-LM question is haldet's wording in the structure the
7B checkpoint was trained to read (`haldet/templates/support_check.txt`, the documented default); the `prompt`
parameter replaces it for an asked checker (text or {path: FILE}, a Python format string with the fields premise
and hypothesis), as does a run config's `templates: {support_check: ...}` where the parameter is unset: the text is
in the detector's parameters and the checker's id, so it keys the scores. Score =
1 - P(supported), higher = less faithful; `decision_threshold` 0.5 is the checker's own binary verdict
(unsupported = Unfaithful).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from haldet.detectors._consistency import cache_for, pair_model
from haldet.detectors.base import Detector, Scores, register
from haldet.detectors.unit import UnitScores
from haldet.errors import HaldetError
from haldet.models.pairs.support import ENDPOINT_PREFIX, ENDPOINT_SETTINGS, checker_params, support_prompt
from haldet.signals import Signal, SignalView

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
# per checkpoint (a part of the checker's name, lower case): (chunk words, max_length in tokens) for `auto`
CHUNKS = {"minicheck-7b": (24000, 32768)}
DEFAULT_CHUNK = (400, 2048)  # MiniCheck's classifier heads (roberta, deberta, flan-t5): about 400 words


def checkpoint_chunks(checker: str) -> tuple[int, int]:
    """(chunk words, max_length) the checker's own package uses (`CHUNKS`), else `DEFAULT_CHUNK`."""
    name = checker.lower()
    return next((sizes for part, sizes in CHUNKS.items() if part in name), DEFAULT_CHUNK)


def chunks(document: str, words: int) -> list[str]:
    """The document in pieces of at most about `words` words, cut between sentences (a longer sentence is cut
    between words); one piece when it is short enough."""
    pieces: list[str] = []
    current: list[str] = []
    for sentence in _SENTENCE_END.split(document.strip()):
        tokens = sentence.split()
        while len(tokens) > words:  # a sentence longer than a chunk
            if current:
                pieces.append(" ".join(current))
                current = []
            pieces.append(" ".join(tokens[:words]))
            tokens = tokens[words:]
        if current and len(current) + len(tokens) > words:
            pieces.append(" ".join(current))
            current = []
        current += tokens
    if current:
        pieces.append(" ".join(current))
    return pieces or [document.strip()]


def checker_prompt(value: Any, checker: str) -> str:
    """A user's question for an asked checker (`prompt`: the text, or {path: FILE}), read and checked (fields
    premise and hypothesis); an error for a classifier-head checker, which is asked no question."""
    where = "detector_params.minicheck.prompt"
    if not checker.startswith(("llm:", ENDPOINT_PREFIX)):
        raise HaldetError(f"checker {checker!r} is a classifier head: it reads the (document, claim) pair, not a "
                          "prompt", where=where, hint="drop prompt, or use an llm: or openai: checker")
    if isinstance(value, dict) and set(value) == {"path"}:
        path = Path(str(value["path"])).expanduser()
        try:
            value = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise HaldetError(f"cannot read the fact checker's prompt {path}: {exc.strerror}", where=where,
                              hint="give a readable file, or the text inline") from None
    if not isinstance(value, str):
        raise HaldetError(f"prompt must be text or {{path: FILE}}, not {value!r}", where=where,
                          hint="e.g. prompt: {path: my_check.txt}")
    return support_prompt(value, where)


@register("minicheck")
class MiniCheck(Detector):
    """MiniCheck-style document -> sentence support; see the module docstring."""
    method_family = "judges and verifiers"
    paper = "Tang, Laban & Durrett 2024, MiniCheck: efficient fact-checking of LLMs on grounding documents"
    peers = ("TruthTorchLM",)

    version = "1"
    requires = frozenset({Signal.RESPONSE})
    auxiliary: ClassVar[dict[str, str]] = {"checker": "support"}
    levels: ClassVar[tuple[str, ...]] = ("response", "sentence", "claim", "span")
    decision_threshold: ClassVar[float] = 0.5  # P(supported) < 0.5: Unfaithful
    prompt_templates: ClassVar[dict[str, str]] = {"support_check": "prompt"}  # `templates: {support_check: ...}`
    defaults: ClassVar[dict[str, Any]] = {"checker": "llm:bespokelabs/Bespoke-MiniCheck-7B", "fallback": None,
                                          "chunk_words": "auto", "batch_size": 8, "max_length": "auto",
                                          "device": "auto",
                                          # an `openai:<model>` checker's endpoint (vLLM serving the checker, ...)
                                          "base_url": None, "api_key_env": "OPENAI_API_KEY", "timeout": 60.0,
                                          "concurrency": 8, "retries": 4, "backoff": 1.0, "top_logprobs": 5,
                                          # an asked checker's question (llm: / openai:): null = the packaged
                                          # support_check (the 7B checkpoint's format); text, or {path: FILE}
                                          "prompt": None,
                                          # its request parameters (temperature, max_tokens_field, ...; None: the
                                          # defaults, left out of the identity so earlier keys stay)
                                          "params": None}

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        words, length = checkpoint_chunks(str(self.params["checker"]))  # `auto`: the checkpoint's own sizes
        if self.params["chunk_words"] == "auto":
            self.params["chunk_words"] = words
        if self.params["max_length"] == "auto":
            self.params["max_length"] = length
        if self.params["prompt"] is not None:  # the text itself in the parameters: it keys the scores
            self.params["prompt"] = checker_prompt(self.params["prompt"], str(self.params["checker"]))
        # validated now (a mistake named before any pair); the declaration as set, or None for the defaults
        declared = checker_params(self.params["params"], f"detector_params.{self.name}.params").identity()
        self.params["params"] = declared

    def identity(self) -> dict[str, Any]:
        out = super().identity()
        if out["params"].get("params") is None:  # no declaration: the identity it had before `params` existed
            out["params"] = {k: v for k, v in out["params"].items() if k != "params"}
        return out

    def _endpoint_settings(self) -> dict[str, Any]:
        """What an `openai:` checker is given: the endpoint settings, its declared parameters (hashable: the loaded
        checker is shared by its settings) and the section a refused parameter's hint names."""
        out = {k: self.params[k] for k in ENDPOINT_SETTINGS if k in self.params and k != "params"}
        declared = self.params["params"]
        return {**out, "params": tuple(sorted(declared.items())) if declared else None,
                "section": f"detector_params.{self.name}"}

    def score(self, items: SignalView) -> Scores:
        values, reasons = self._check(items, [[r] for r in items.get(Signal.RESPONSE)])
        return Scores(np.array([v[0] for v in values]), [r[0] for r in reasons])

    def score_units(self, items: SignalView, level: str) -> UnitScores:
        """Per item, one score per unit of `level` (aligned to `instance.units_of(level)`) with reasons."""
        texts = [[u.text or (inst.response or "")[u.start:u.end] for u in inst.units_of(level)]
                 for inst in items.instances]
        return UnitScores(*self._check(items, texts))

    def _check(self, items: SignalView, texts: list[list[str]]) -> tuple[list[np.ndarray], list[list[str]]]:
        values = [np.full(len(t), np.nan) for t in texts]
        reasons = [[""] * len(t) for t in texts]
        wanted: list[tuple[int, int, list[tuple[str, str]]]] = []
        for i, (inst, units) in enumerate(zip(items.instances, texts, strict=True)):
            document = (inst.context or inst.question).strip()
            pieces = chunks(document, int(self.params["chunk_words"])) if document else []
            for u, text in enumerate(units):
                if not document:
                    reasons[i][u] = "no source document (context or question) to check against"
                elif not (text or "").strip():
                    reasons[i][u] = "empty response or unit"
                else:
                    wanted.append((i, u, [(p, text.strip()) for p in pieces]))
        if wanted:
            checker = str(self.params["checker"])
            endpoint = checker.startswith(ENDPOINT_PREFIX)
            asked = {"prompt": self.params["prompt"]} if self.params["prompt"] is not None else {}
            model = pair_model(self, "support", "checker", batch_size=self.params["batch_size"],
                               max_length=self.params["max_length"],
                               **(self._endpoint_settings() if endpoint else {}), **asked)
            usage = getattr(model, "usage", None)
            calls_before = usage.calls if usage is not None else 0
            pairs = [p for _, _, ps in wanted for p in ps]
            support = cache_for(self).scores(model, pairs, self.progress("minicheck pairs", len(set(pairs))))[:, 0]
            if usage is not None:  # what this scoring asked of the endpoint (answers already kept are not asked)
                self.meta["checker_requests"] = self.meta.get("checker_requests", 0) + usage.calls - calls_before
            at = 0
            for i, u, ps in wanted:
                per_chunk = support[at : at + len(ps)]
                at += len(ps)
                missing = np.flatnonzero(~np.isfinite(per_chunk))
                if missing.size:
                    k = int(missing[0])
                    where = f" (chunk {k + 1} of {len(ps)})" if len(ps) > 1 else ""
                    reasons[i][u] = f"checker {checker}: {model.why(ps[k]) or 'no support probability'}{where}"
                else:
                    values[i][u] = 1.0 - float(np.max(per_chunk))
        return values, reasons
