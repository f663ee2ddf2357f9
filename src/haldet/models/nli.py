"""Pair models for the sample-consistency detectors: entailment (NLI), semantic similarity and BERTScore.

One interface, `PairModel.compute(pairs) -> [N, width]`, with these backends:

- `HFEntailment`: any HF sequence-classification NLI model (default roberta-large-mnli; hub id or local path).
  Columns follow `NLI_COLUMNS` (entailment, neutral, contradiction) whatever the model's own label order.
- `LLMEntailment` (name `llm:<model>`): a causal LM asked whether the premise entails the hypothesis; the
  next-token probabilities of the three label words, renormalised, are the three columns.
- `CrossEncoderSimilarity`: a sentence-transformers cross-encoder (default cross-encoder/stsb-distilroberta-base),
  one column in [0, 1].
- `BiEncoderSimilarity` (name `bi:<model>` or an embedding alias such as `minilm`): cosine of sentence
  embeddings clipped to [0, 1]; the offline stand-in for the cross-encoder.
- `BERTScorePairs`: the bert-score library's (P, R, F1) of a candidate against a reference.
- `HFSupport` / `LLMSupport` (kind "support"; `llm:<model>` for the second): MiniCheck-style fact checkers, one
  column = P(the document supports the claim). A sequence-classification checkpoint reads the column its config
  names supported/entailment/consistent, or column 1 of an unnamed 2-way head (MiniCheck's convention); a causal LM
  (Bespoke-MiniCheck-7B style) is asked whether the document supports the claim, and the next-token probabilities
  of "Yes" and "No", renormalised over the two, give P(supported).
- `EndpointSupport` (kind "support", name `openai:<model>` with a `base_url`): the same Yes/No question asked of a
  checker served behind an OpenAI-compatible endpoint (Bespoke-MiniCheck-7B under vLLM), read from the first
  generated token's top log-probs. It may abstain (`PairModel.abstains`): a pair without a usable answer is NaN
  with `why(pair)`, never stored, so it is asked again next time.

`PairCache` runs a model over the pairs of many items at once: it drops duplicates, answers pairs already
computed (in this process or, with a cell directory, in an earlier run: `pairs/<model>.jsonl`), and batches
the rest (length-sorted), so each distinct pair is computed once per run.

`load_pair_model` tries the requested model and, when it cannot be loaded (offline, missing files), says so on
the `haldet` logger and loads the configured fallback; the returned `meta` records which model produced the
numbers, so the manifest shows it.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from haldet.backends.openai_client import (
    OPENAI_BASE_URL,
    CallFailed,
    ChatReply,
    OpenAIEndpoint,
    Usage,
    api_key,
    gather_closing,
    run_coroutine,
)
from haldet.backends.structured import ClientSettings
from haldet.errors import HaldetError
from haldet.store import StageLog, model_slug
from haldet.util.assets import hub_reachable

log = logging.getLogger("haldet")

NLI_COLUMNS = ("entailment", "neutral", "contradiction")
ENTAILMENT, NEUTRAL, CONTRADICTION = 0, 1, 2
Pair = tuple[str, str]
Progress = Callable[[int], None]


# ---------------------------------------------------------------------------------------------------- loading
def _local_only(name: str) -> bool:
    """Load from local files only: a local path, or any hub id when the hub cannot be reached."""
    return Path(name).expanduser().exists() or not hub_reachable()


def _device(device: str) -> str:
    if device != "auto":
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _load_error(name: str, exc: Exception, what: str) -> HaldetError:
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return HaldetError(f"cannot load {what} {name!r}: {first}", where="detector_params",
                       hint="offline? give a local model directory, or keep the fallback parameter set")


class PairModel:
    """Scores (a, b) text pairs; `id` names exactly what produced the numbers (recorded with the scores)."""

    kind = ""           # "nli", "similarity" or "bertscore"
    width = 1           # values per pair
    columns: tuple[str, ...] = ("score",)
    abstains = False    # may return NaN rows (a pair it could not score); `why(pair)` then says why
    remote = False      # served behind an endpoint: no local files to fingerprint

    def __init__(self, name: str, *, batch_size: int = 16) -> None:
        self.name = name
        self.batch_size = max(1, int(batch_size))
        self.pairs_per_call = self.batch_size  # pairs `PairCache` hands to one `compute` call
        self.id = f"{self.kind}:{name}"

    def compute(self, pairs: Sequence[Pair]) -> np.ndarray:
        """[len(pairs), width] float64 for one batch (callers batch; see `PairCache`)."""
        raise NotImplementedError

    def prepare(self, pairs: Sequence[Pair]) -> None:
        """Called by `PairCache` with every pair it is about to compute (before batching them into `compute`
        calls): a model whose work is per text rather than per pair does that work once here."""

    def why(self, pair: Pair) -> str:
        """Why an abstaining model gave `pair` no value in its last `compute` ("" when it gave one)."""
        return ""


# checkpoints whose config leaves the labels generic (LABEL_0, ...): their documented order. SelfCheckGPT's own NLI
# model is a 2-class head (0 entailment, 1 contradiction; no neutral), its P(contradiction) the method's score.
KNOWN_LABELS: dict[str, tuple[str, ...]] = {"potsawee/deberta-v3-large-mnli": ("entailment", "contradiction")}


def _sequence_classifier(name: str, what: str, device: str) -> tuple[Any, Any, Any]:
    """Tokenizer, sequence-classification model (in eval mode, on its device) and that device; a model that
    cannot be loaded is one error naming it as `what`."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    local = _local_only(name)
    try:
        tokenizer = AutoTokenizer.from_pretrained(name, local_files_only=local)
        model = AutoModelForSequenceClassification.from_pretrained(name, local_files_only=local)
    except (OSError, ValueError) as exc:
        raise _load_error(name, exc, what) from None
    placed = torch.device(_device(device))
    model.to(placed).eval()
    return tokenizer, model, placed


class HFEntailment(PairModel):
    """An HF sequence-classification NLI model; label order read from its config (id2label), or for a checkpoint
    with generic labels from `KNOWN_LABELS`."""

    kind = "nli"
    width = 3
    columns = NLI_COLUMNS

    def __init__(self, name: str, *, batch_size: int = 16, max_length: int = 512, device: str = "auto") -> None:
        super().__init__(name, batch_size=batch_size)
        self.id = f"hf-nli:{name}"
        self.max_length = max_length
        self.tokenizer, self.model, self.device = _sequence_classifier(name, "NLI model", device)
        self.index = self._label_index(self.model.config.id2label, name)

    @staticmethod
    def _label_index(id2label: dict[int, str], name: str) -> list[int | None]:
        """Model column of each of entailment, neutral, contradiction (neutral may be absent: 2-way models)."""
        generic = all(str(label).upper().startswith("LABEL_") for label in id2label.values())
        # the hub id, or a local copy in a folder named like it (offline use)
        known = KNOWN_LABELS.get(name) or next((v for k, v in KNOWN_LABELS.items()
                                                if Path(name).name == k.rsplit("/", 1)[-1]), None)
        if generic and known is not None and len(known) == len(id2label):
            id2label = dict(enumerate(known))
        found: dict[str, int] = {}
        for idx, label in id2label.items():
            low = str(label).lower()
            for col in NLI_COLUMNS:
                if low.startswith(col[:6]):
                    found[col] = int(idx)
        if "entailment" not in found or "contradiction" not in found:
            raise HaldetError(f"NLI model {name!r} has labels {sorted(map(str, id2label.values()))}, not "
                              "entailment/neutral/contradiction", where="detector_params (nli_model)",
                              hint="use an MNLI-style model whose config names its labels")
        return [found.get(col) for col in NLI_COLUMNS]

    def compute(self, pairs: Sequence[Pair]) -> np.ndarray:
        import torch

        enc = self.tokenizer([p for p, _ in pairs], [h for _, h in pairs], truncation=True,
                             max_length=self.max_length, padding=True, return_tensors="pt")
        with torch.inference_mode():
            logits = self.model(**{k: v.to(self.device) for k, v in enc.items()}).logits.float()
        probs = torch.softmax(logits, dim=-1).cpu().numpy().astype(np.float64)
        out = np.zeros((len(pairs), 3))
        for col, idx in enumerate(self.index):
            if idx is not None:
                out[:, col] = probs[:, idx]
        return out


NLI_PROMPT = (
    "Read the premise and the hypothesis.\n\n"
    "Premise: {premise}\n"
    "Hypothesis: {hypothesis}\n\n"
    "If the premise is true, must the hypothesis be true as well? Reply with one word: entailment (it must be "
    "true), contradiction (it must be false), or neutral (it could be either)."
)
NLI_WORDS = ("entailment", "neutral", "contradiction")


class LLMEntailment(PairModel):
    """Entailment from a causal LM: next-token probabilities of the three label words after an NLI question,
    renormalised over the three. Works with any model `HFBackend` loads (embedded aliases included)."""

    kind = "nli"
    width = 3
    columns = NLI_COLUMNS
    words: tuple[str, ...] = NLI_WORDS
    prompt = NLI_PROMPT
    id_prefix = "llm-nli"

    def __init__(self, name: str, *, batch_size: int = 8, max_length: int = 1024, device: str = "auto") -> None:
        super().__init__(name, batch_size=batch_size)
        from haldet.backends.hf.backend import HFBackend

        self.id = f"{self.id_prefix}:{name}"
        self.max_length = max_length
        self.backend = HFBackend(name, device=device)
        self.candidates = self._candidate_ids()

    def _candidate_ids(self) -> list[list[int]]:
        """Token ids that start each label word (with and without a leading space, any capitalisation)."""
        tok = self.backend.tokenizer
        out: list[list[int]] = []
        for word in self.words:
            ids = {tok(v, add_special_tokens=False).input_ids[0]
                   for v in (word, word.capitalize(), " " + word, " " + word.capitalize())}
            out.append(sorted(ids))
        flat = [i for ids in out for i in ids]
        if len(flat) != len(set(flat)):
            raise HaldetError(f"the label words share first tokens in {self.name}'s vocabulary",
                              where="detector_params (nli_model)", hint="use another model for llm: entailment")
        return out

    def compute(self, pairs: Sequence[Pair]) -> np.ndarray:
        import torch

        be = self.backend
        model = be.model
        seqs = []
        for premise, hypothesis in pairs:
            text = be.render_chat([{"role": "user", "content": self.prompt.format(premise=premise,
                                                                               hypothesis=hypothesis)}])
            seqs.append(be.encode_prompt(text)[-self.max_length:])
        width = max(len(s) for s in seqs)
        pad = be.tokenizer.pad_token_id
        ids = torch.full((len(seqs), width), pad, dtype=torch.long)
        mask = torch.zeros((len(seqs), width), dtype=torch.long)
        for row, seq in enumerate(seqs):  # left padding: the next-token position is the last column
            ids[row, width - len(seq):] = torch.tensor(seq, dtype=torch.long)
            mask[row, width - len(seq):] = 1
        positions = (mask.cumsum(-1) - 1).clamp_min(0)  # left padding: real tokens start at position 0
        with torch.inference_mode():
            logits = model(input_ids=ids.to(be.device), attention_mask=mask.to(be.device),
                           position_ids=positions.to(be.device), logits_to_keep=1).logits[:, -1].float()
        logp = torch.log_softmax(logits, dim=-1)
        per_word = torch.stack([torch.logsumexp(logp[:, c], dim=-1) for c in self.candidates], dim=-1)
        return torch.softmax(per_word, dim=-1).cpu().numpy().astype(np.float64)


SUPPORT_WORDS = ("support", "entail", "consistent", "faithful", "yes")
SUPPORT_PROMPT = (
    "Document:\n{premise}\n\nClaim:\n{hypothesis}\n\n"
    "Is every part of the claim backed by the document? Reply Yes or No."
)


class HFSupport(PairModel):
    """A MiniCheck-style sequence-classification checker (roberta/deberta/flan-t5 heads): P(supported)."""

    kind = "support"
    columns = ("supported",)

    def __init__(self, name: str, *, batch_size: int = 16, max_length: int = 512, device: str = "auto") -> None:
        super().__init__(name, batch_size=batch_size)
        self.id = f"hf-support:{name}"
        self.max_length = max_length
        self.tokenizer, self.model, self.device = _sequence_classifier(name, "fact-checking classifier", device)
        self.column = self.support_column(self.model.config.id2label, name)

    @staticmethod
    def support_column(id2label: dict[int, str], name: str) -> int:
        named = [int(i) for i, lab in id2label.items() if any(w in str(lab).lower() for w in SUPPORT_WORDS)
                 and not str(lab).lower().startswith(("not", "un", "in", "non"))]
        if len(named) == 1:
            return named[0]
        if len(id2label) == 2 and not named:
            return 1  # MiniCheck's heads: label 1 = supported
        raise HaldetError(f"fact-checking classifier {name!r} has labels {sorted(map(str, id2label.values()))}: "
                          "cannot tell which one means 'supported'", where="detector_params (checker)",
                          hint="use a 2-way MiniCheck-style head, or one whose config names a 'supported' label")

    def compute(self, pairs: Sequence[Pair]) -> np.ndarray:
        import torch

        enc = self.tokenizer([p for p, _ in pairs], [h for _, h in pairs], truncation=True,
                             max_length=self.max_length, padding=True, return_tensors="pt")
        with torch.inference_mode():
            logits = self.model(**{k: v.to(self.device) for k, v in enc.items()}).logits.float()
        return torch.softmax(logits, dim=-1)[:, self.column : self.column + 1].cpu().numpy().astype(np.float64)


class LLMSupport(LLMEntailment):
    """A causal-LM fact checker (`llm:<model>`): P(Yes) / (P(Yes) + P(No)) after `SUPPORT_PROMPT`."""

    kind = "support"
    width = 1
    columns = ("supported",)  # type: ignore[assignment]
    words = ("yes", "no")
    prompt = SUPPORT_PROMPT
    id_prefix = "llm-support"

    def compute(self, pairs: Sequence[Pair]) -> np.ndarray:
        return super().compute(pairs)[:, :1]


ENDPOINT_PREFIX = "openai:"
# detector parameters that reach an `openai:` checker (the names of the endpoint settings elsewhere in haldet)
ENDPOINT_SETTINGS = ("base_url", "api_key_env", "timeout", "concurrency", "retries", "backoff", "top_logprobs")


def yes_no_support(top: dict[str, float] | None) -> tuple[float | None, str]:
    """(P(Yes) / (P(Yes) + P(No)), "") from one position's top log-probs {token: log p} (tokens compared without
    case or surrounding spaces, variants summed), or (None, why) when there are none or neither word is among them."""
    if not top:
        return None, "no top log-probs for the first generated token"
    mass = {"yes": 0.0, "no": 0.0}
    for token, logprob in top.items():
        word = token.strip().lower()
        if word in mass:
            mass[word] += float(np.exp(logprob))
    total = mass["yes"] + mass["no"]
    if total <= 0.0:
        shown = ", ".join(repr(t) for t in list(top)[:5])
        return None, f"neither Yes nor No among the first token's {len(top)} top alternatives ({shown})"
    return mass["yes"] / total, ""


class EndpointSupport(PairModel):
    """A causal-LM fact checker behind an OpenAI-compatible endpoint (`openai:<model>` at `base_url`): the
    `SUPPORT_PROMPT` question as one user turn, temperature 0, one generated token with its `top_logprobs`
    alternatives; P(supported) = P(Yes) / (P(Yes) + P(No)) over them (`yes_no_support`). A reply without log-probs,
    or with neither word among the alternatives, is NaN with the reason. A request that still fails after its
    retries, or an endpoint the circuit breaker gives up on, is an error naming the endpoint: the pairs of earlier
    `compute` calls are already kept by `PairCache`, so a rerun asks only the rest."""

    kind = "support"
    columns = ("supported",)
    abstains = True
    remote = True
    prompt = SUPPORT_PROMPT

    def __init__(self, name: str, *, base_url: str | None = None, api_key_env: str = "OPENAI_API_KEY",
                 timeout: float = 60.0, concurrency: int = 8, retries: int = 4, backoff: float = 1.0,
                 top_logprobs: int = 5, batch_size: int = 8) -> None:
        super().__init__(name, batch_size=batch_size)
        option = "detector_params (checker, base_url)"
        self.settings = ClientSettings(model=name, base_url=base_url, api_key_env=api_key_env, timeout=timeout,
                                       concurrency=max(1, int(concurrency)), retries=max(0, int(retries)),
                                       backoff=backoff, max_tokens=1, temperature=0.0, option=option,
                                       where=f"fact checker {name} at {base_url or OPENAI_BASE_URL}")
        api_key(name, base_url, api_key_env, option)  # no key for a remote API: one error now, before any pair
        self.top_logprobs = int(top_logprobs)
        self.id = f"endpoint-support:{name}@{base_url or OPENAI_BASE_URL}"
        self.pairs_per_call = max(self.batch_size, 8 * self.settings.concurrency)  # requests in flight per call
        self.usage = Usage()
        self._why: dict[str, str] = {}

    def why(self, pair: Pair) -> str:
        return self._why.get(pair_id(*pair), "")

    def compute(self, pairs: Sequence[Pair]) -> np.ndarray:
        replies = run_coroutine(self._ask(pairs))
        failed = [r for r in replies if isinstance(r, CallFailed)]
        if failed:
            raise HaldetError(f"{self.settings.where} gave no answer to {len(failed)} of {len(pairs)} requests: "
                              f"{failed[-1].error}", where=self.settings.option,
                              hint="start the server or correct base_url (it usually ends in /v1); the pairs "
                                   "answered in earlier batches are kept and not asked again")
        out = np.full((len(pairs), 1), np.nan)
        for row, (pair, reply) in enumerate(zip(pairs, replies, strict=True)):
            assert isinstance(reply, ChatReply)
            choice = reply.choices[0]
            if not choice.top_logprobs:
                value, why = None, "the endpoint returned no log-probs (serve the checker with log-probs enabled)"
            else:
                value, why = yes_no_support(choice.top_logprobs[0])
            if value is None:
                self._why[pair_id(*pair)] = why
            else:
                out[row, 0] = value
                self._why.pop(pair_id(*pair), None)
        return out

    async def _ask(self, pairs: Sequence[Pair]) -> list[ChatReply | CallFailed]:
        """Each pair's reply, or its `CallFailed`, with at most `concurrency` requests in flight."""
        s = self.settings
        client = OpenAIEndpoint(s.model, base_url=s.base_url, api_key_env=s.api_key_env, timeout=s.timeout,
                                breaker_after=s.breaker_after, where=s.where, option=s.option)
        limit = asyncio.Semaphore(s.concurrency)

        async def one(premise: str, hypothesis: str) -> ChatReply | CallFailed:
            messages = [{"role": "user", "content": self.prompt.format(premise=premise, hypothesis=hypothesis)}]
            async with limit:
                try:
                    return await client.call(messages, attempts=s.retries + 1, backoff=s.backoff, usage=self.usage,
                                             temperature=0.0, max_tokens=1, logprobs=True,
                                             top_logprobs=self.top_logprobs)
                except CallFailed as exc:
                    return exc

        return await gather_closing((one(p, h) for p, h in pairs), client)


class CrossEncoderSimilarity(PairModel):
    """sentence-transformers cross-encoder similarity (STS-B models give one value in [0, 1])."""

    kind = "similarity"

    def __init__(self, name: str, *, batch_size: int = 32, max_length: int = 512, device: str = "auto") -> None:
        super().__init__(name, batch_size=batch_size)
        from sentence_transformers import CrossEncoder

        self.id = f"cross-encoder:{name}"
        try:
            self.model = CrossEncoder(name, device=_device(device), max_length=max_length,
                                      local_files_only=_local_only(name))
        except (OSError, ValueError) as exc:
            raise _load_error(name, exc, "cross-encoder") from None

    def compute(self, pairs: Sequence[Pair]) -> np.ndarray:
        scores = self.model.predict([list(p) for p in pairs], batch_size=self.batch_size, show_progress_bar=False)
        return np.clip(np.asarray(scores, dtype=np.float64).reshape(len(pairs), -1)[:, :1], 0.0, 1.0)


MAX_KEPT_EMBEDDINGS = 200_000  # texts whose embedding a bi-encoder keeps (~300 MB at MiniLM's width)


class BiEncoderSimilarity(PairModel):
    """Cosine similarity of sentence embeddings, clipped to [0, 1] (negative cosine = unrelated).

    Each distinct text is embedded once per process (kept by text): the pairs of K samples share their texts, and
    the pair batches of `PairCache` would otherwise embed the same text again in every batch it appears in."""

    kind = "similarity"

    def __init__(self, name: str, *, batch_size: int = 64, device: str = "auto") -> None:
        super().__init__(name, batch_size=batch_size)
        from sentence_transformers import SentenceTransformer

        from haldet.util.assets import resolve_embedding

        self.id = f"bi-encoder:{name}"
        path = resolve_embedding(name)
        try:
            self.model = SentenceTransformer(path, device=_device(device), local_files_only=_local_only(path))
        except (OSError, ValueError) as exc:
            raise _load_error(name, exc, "sentence encoder") from None
        self.embeddings: dict[str, np.ndarray] = {}

    def prepare(self, pairs: Sequence[Pair]) -> None:
        wanted = {t for p in pairs for t in p}
        texts = sorted(wanted - self.embeddings.keys())
        if texts:
            if len(self.embeddings) + len(texts) > MAX_KEPT_EMBEDDINGS:  # a long multi-cell process: bounded
                self.embeddings.clear()
                texts = sorted(wanted)
            emb = self.model.encode(texts, batch_size=self.batch_size, normalize_embeddings=True,
                                    convert_to_numpy=True, show_progress_bar=False)
            self.embeddings.update(zip(texts, emb, strict=True))

    def compute(self, pairs: Sequence[Pair]) -> np.ndarray:
        self.prepare(pairs)
        a = np.stack([self.embeddings[p[0]] for p in pairs])
        b = np.stack([self.embeddings[p[1]] for p in pairs])
        return np.clip((a * b).sum(-1).astype(np.float64), 0.0, 1.0)[:, None]


PAIRS_PER_BERTSCORE_CALL = 1024  # bounds the token embeddings one call keeps (~100 MB at MiniLM's width)


class BERTScorePairs(PairModel):
    """bert-score (P, R, F1) of candidate a against reference b. `num_layers` defaults to the library's table
    for known models and to the last layer for any other encoder (e.g. the packaged MiniLM)."""

    kind = "bertscore"
    width = 3
    columns = ("precision", "recall", "f1")

    def __init__(self, name: str, *, batch_size: int = 64, num_layers: int | None = None,
                 rescale_with_baseline: bool = False, device: str = "auto") -> None:
        super().__init__(name, batch_size=batch_size)
        from bert_score import BERTScorer
        from bert_score.utils import model2layers
        from transformers import AutoConfig

        from haldet.util.assets import resolve_embedding

        path = resolve_embedding(name)
        local = _local_only(path)
        try:
            if num_layers is None:
                num_layers = model2layers.get(name) or AutoConfig.from_pretrained(
                    path, local_files_only=local).num_hidden_layers
            if local and not Path(path).exists():
                raise OSError(f"{name} is not available offline")
            self.scorer = BERTScorer(model_type=path, num_layers=num_layers, batch_size=self.batch_size,
                                     device=_device(device), lang="en" if rescale_with_baseline else None,
                                     rescale_with_baseline=rescale_with_baseline)
        except (OSError, ValueError, KeyError, AssertionError) as exc:
            raise _load_error(name, exc, "BERTScore encoder") from None
        self.id = f"bertscore:{name}:L{num_layers}" + (":rescaled" if rescale_with_baseline else "")
        # bert-score embeds each distinct sentence of a call once and batches by `batch_size` itself: a call of many
        # pairs embeds an answer sentence once for all the sample sentences it is matched with
        self.pairs_per_call = max(self.batch_size, PAIRS_PER_BERTSCORE_CALL)

    def compute(self, pairs: Sequence[Pair]) -> np.ndarray:
        p, r, f = self.scorer.score([a for a, _ in pairs], [b for _, b in pairs], batch_size=self.batch_size)
        return np.stack([p.numpy(), r.numpy(), f.numpy()], axis=-1).astype(np.float64)


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
            from haldet.util.assets import EMBEDDING_ALIASES

            if name.startswith("bi:") or name in EMBEDDING_ALIASES:
                kw.pop("max_length", None)
                _LOADED[key] = BiEncoderSimilarity(name.removeprefix("bi:"), **kw)
            else:
                _LOADED[key] = CrossEncoderSimilarity(name, **kw)
        elif kind == "bertscore":
            _LOADED[key] = BERTScorePairs(name, **kw)
        elif kind == "support":
            local = {k: v for k, v in kw.items() if k not in ENDPOINT_SETTINGS}  # e.g. a local fallback's
            if name.startswith(ENDPOINT_PREFIX):
                _LOADED[key] = EndpointSupport(name.removeprefix(ENDPOINT_PREFIX), batch_size=kw.get("batch_size", 8),
                                               **{k: v for k, v in kw.items() if k in ENDPOINT_SETTINGS})
            elif name.startswith("llm:"):
                _LOADED[key] = LLMSupport(name[4:], **local)
            else:
                _LOADED[key] = HFSupport(name, **local)
        else:
            raise ValueError(f"unknown pair-model kind {kind!r}")
        _LOADED[key].id += model_suffix(name, _LOADED[key])
    return _LOADED[key]


def model_suffix(name: str, model: PairModel) -> str:
    """What else keys a pair model's numbers beyond its name: its files' fingerprint and its max_length (the pair
    cache is filed under `id`, so another revision or truncation never answers from it)."""
    from haldet.models.provenance import locate

    if model.remote:  # its id names the endpoint already; no files here
        return ""
    length = getattr(model, "max_length", None)
    return f"@{locate(name) or 'unlocated'}" + (f":ml{length}" if length is not None else "")


def load_pair_model(kind: str, name: str, *, fallback: str | None = None,
                    **kw: Any) -> tuple[PairModel, dict[str, Any]]:
    """The requested model, or the fallback when it cannot be loaded (logged and recorded in `meta`).

    kind: "nli" (`llm:<model>` for the prompted backend), "similarity" (`bi:<model>` or an embedding alias for
    a bi-encoder), "bertscore". Models are loaded once per process.
    """
    from haldet.models.provenance import locate

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


# ---------------------------------------------------------------------------------------------------- caching
def pair_id(a: str, b: str) -> str:
    return hashlib.sha256(json.dumps([a, b]).encode()).hexdigest()[:24]


_MEMORY: dict[str, dict[str, np.ndarray]] = {}
PREPARE_BLOCK = 4096  # pairs handed to `PairModel.prepare` at once (bounds what is prepared before it is stored)


class PairCache:
    """Computes pairs once: process memory, then `<cell>/pairs/<model>.jsonl`, then the model (batched). The NaN
    rows of an abstaining model are returned as they are and never kept, so they are asked again next time."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = root
        self._read: set[str] = set()

    def _log(self, model: PairModel) -> StageLog | None:
        return None if self.root is None else StageLog(self.root / "pairs" / f"{model_slug(model.id)}.jsonl")

    def scores(self, model: PairModel, pairs: Sequence[Pair], progress: Progress | None = None) -> np.ndarray:
        """[len(pairs), model.width] for the given pairs (duplicates computed once)."""
        memo = _MEMORY.setdefault(model.id, {})
        disk = self._log(model)
        if disk is not None and model.id not in self._read:
            for rec in disk.read(model.id).values():
                memo.setdefault(rec["id"], np.asarray(rec["v"], dtype=np.float64))
            self._read.add(model.id)
        ids = [pair_id(a, b) for a, b in pairs]
        todo: dict[str, Pair] = {}
        abstained: dict[str, np.ndarray] = {}  # NaN rows of an abstaining model (`PairModel.abstains`)
        for pid, pair in zip(ids, pairs, strict=True):
            if pid not in memo:
                todo.setdefault(pid, pair)
        if progress is not None and len(set(ids)) > len(todo):
            progress(len(set(ids)) - len(todo))  # already known: the bar counts distinct pairs
        if todo:
            order = sorted(todo, key=lambda k: len(todo[k][0]) + len(todo[k][1]))
            step = model.pairs_per_call
            prepared = 0
            for start in range(0, len(order), step):
                if start >= prepared:  # per-text work for the next block of pairs, done once for the block
                    prepared = start + max(PREPARE_BLOCK, step)
                    model.prepare([todo[k] for k in order[start:prepared]])
                chunk = order[start : start + step]
                values = model.compute([todo[k] for k in chunk])
                answered = np.isfinite(values).all(axis=-1) if values.ndim == 2 else np.zeros(0, dtype=bool)
                if values.shape != (len(chunk), model.width) or not (model.abstains or answered.all()):
                    raise RuntimeError(f"{model.id} returned {values.shape} values, some non-finite")
                for k, v, ok in zip(chunk, values, answered, strict=True):
                    (memo if ok else abstained)[k] = v  # an abstention is never kept: asked again next time
                if disk is not None:
                    disk.append({"id": k, "key": model.id, "v": [round(float(x), 7) for x in v]} for k, v, ok in
                                zip(chunk, values, answered, strict=True) if ok)
                if progress is not None:
                    progress(len(chunk))
        if not ids:
            return np.zeros((0, model.width))
        return np.stack([memo[k] if k in memo else abstained[k] for k in ids])
