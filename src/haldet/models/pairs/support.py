"""Fact checkers (kind "support"): one column, P(the document supports the claim).

- `HFSupport`: a MiniCheck-style sequence-classification checkpoint; reads the column its config names
  supported/entailment/consistent, or column 1 of an unnamed 2-way head (MiniCheck's convention).
- `LLMSupport` (`llm:<model>`): a causal LM (Bespoke-MiniCheck-7B style) asked whether the document supports the
  claim; the next-token probabilities of "Yes" and "No", renormalised over the two, give P(supported).
- `EndpointSupport` (`openai:<model>` with a `base_url`): the same question asked of a checker served behind an
  OpenAI-compatible endpoint, read from the first generated token's top log-probs. It may abstain
  (`PairModel.abstains`): a pair without a usable answer is NaN with `why(pair)`, never stored, so it is asked
  again next time. Its requests carry what its `params` declare (`haldet.endpoint_params.EndpointParams`, as every
  role that asks an endpoint): a declaration is part of its id, so of the pair cache's and the detector's keys, and
  a parameter the server refuses stops the scoring with one message naming the setting to change.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import string
from collections.abc import Sequence
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
from haldet.endpoint_params import EndpointParams
from haldet.errors import HaldetError
from haldet.models.pairs.base import Pair, PairModel, keep_value, pair_id, sequence_classifier, unanswered
from haldet.models.pairs.entailment import LLMEntailment
from haldet.text.templates import packaged_template

SUPPORT_WORDS = ("support", "entail", "consistent", "faithful", "yes")
# The question a causal-LM checker answers (packaged template `support_check`, Python format fields premise and
# hypothesis): haldet's wording in the structure Bespoke-MiniCheck-7B was trained to read (the instruction, then
# "Document:", "Claim:", a yes/no question and "Answer:"). Its version names the wording in the checkers' ids, so a
# pair scored under an older wording is never reused.
SUPPORT_PROMPT = packaged_template("support_check.txt").strip()
SUPPORT_PROMPT_VERSION = "2"


def support_prompt(text: str | None, where: str) -> str:
    """The question a causal-LM checker is asked: `text` (a user's replacement, checked to be a Python format string
    with exactly the fields premise and hypothesis), else the packaged `SUPPORT_PROMPT`."""
    if text is None:
        return SUPPORT_PROMPT
    try:
        fields = {name for _, name, _, _ in string.Formatter().parse(text) if name is not None}
    except ValueError as exc:
        raise HaldetError(f"the fact checker's prompt is not a valid template: {exc}", where=where,
                          hint="write {premise} and {hypothesis} where the document and the claim go; double any "
                               "other brace ({{ }})") from None
    if fields != {"premise", "hypothesis"}:
        raise HaldetError(f"the fact checker's prompt has the fields {sorted(fields)}", where=where,
                          hint="it needs exactly {premise} (the document) and {hypothesis} (the claim); double any "
                               "other brace ({{ }})")
    return text.strip()


def prompt_suffix(prompt: str) -> str:
    """What a replaced prompt adds to a checker's id ("" for the packaged one, so its ids stay as they were): a
    digest of the text, so pairs scored under another wording are never reused."""
    if prompt == SUPPORT_PROMPT:
        return ""
    return "+prompt-" + hashlib.sha256(prompt.encode()).hexdigest()[:12]


class HFSupport(PairModel):
    """A MiniCheck-style sequence-classification checker (roberta/deberta/flan-t5 heads): P(supported)."""

    kind = "support"
    columns = ("supported",)

    def __init__(self, name: str, *, batch_size: int = 16, max_length: int = 512, device: str = "auto") -> None:
        super().__init__(name, batch_size=batch_size)
        self.id = f"hf-support:{name}"
        self.max_length = max_length
        self.tokenizer, self.model, self.device = sequence_classifier(name, "fact-checking classifier", device)
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
    id_prefix = f"llm-support-v{SUPPORT_PROMPT_VERSION}"

    def __init__(self, name: str, *, prompt: str | None = None, **kw: Any) -> None:
        super().__init__(name, **kw)
        self.prompt = support_prompt(prompt, "detector_params (prompt)")
        self.id += prompt_suffix(self.prompt)

    def compute(self, pairs: Sequence[Pair]) -> np.ndarray:
        return super().compute(pairs)[:, :1]


ENDPOINT_PREFIX = "openai:"
# detector parameters that reach an `openai:` checker (the names of the endpoint settings elsewhere in haldet)
ENDPOINT_SETTINGS = ("base_url", "api_key_env", "timeout", "concurrency", "retries", "backoff", "top_logprobs",
                     "params", "section")


def checker_params(declared: Any, where: str) -> EndpointParams:
    """A checker's declared request parameters (a mapping, or None for the defaults), validated with the setting
    named on a mistake."""
    if isinstance(declared, EndpointParams):
        return declared
    try:
        return EndpointParams.model_validate(dict(declared or {}))
    except (TypeError, ValueError) as exc:
        raise HaldetError(f"bad request parameters for the fact checker: {exc}", where=where,
                          hint="set temperature, top_p (true/false), max_tokens_field (max_tokens or "
                               "max_completion_tokens), reasoning_effort, reasoning") from None


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
                 top_logprobs: int = 5, batch_size: int = 8, prompt: str | None = None, params: Any = None,
                 section: str = "detector_params (checker)") -> None:
        super().__init__(name, batch_size=batch_size)
        self.prompt = support_prompt(prompt, "detector_params (prompt)")
        option = "detector_params (checker, base_url)"
        declared = checker_params(params, f"{section}.params")
        self.settings = ClientSettings(model=name, base_url=base_url, api_key_env=api_key_env, timeout=timeout,
                                       concurrency=max(1, int(concurrency)), retries=max(0, int(retries)),
                                       backoff=backoff, max_tokens=1, temperature=0.0, option=option,
                                       where=f"fact checker {name} at {base_url or OPENAI_BASE_URL}",
                                       params=declared, section=section)
        api_key(name, base_url, api_key_env, option)  # no key for a remote API: one error now, before any pair
        self.top_logprobs = int(top_logprobs)
        shaped = declared.identity()  # declared request parameters change replies: in the id (pair cache, keys)
        self.id = (f"endpoint-support-v{SUPPORT_PROMPT_VERSION}:{name}@{base_url or OPENAI_BASE_URL}"
                   f"{prompt_suffix(self.prompt)}"
                   + (f"|params={json.dumps(shaped, sort_keys=True)}" if shaped else ""))
        self.pairs_per_call = max(self.batch_size, 8 * self.settings.concurrency)  # requests in flight per call
        self.usage = Usage()
        self._why: dict[str, str] = {}

    def why(self, pair: Pair) -> str:
        return self._why.get(pair_id(*pair), "")

    def compute(self, pairs: Sequence[Pair]) -> np.ndarray:
        replies = run_coroutine(self._ask(pairs))
        failed = [r for r in replies if isinstance(r, CallFailed)]
        if failed:
            raise unanswered(self.settings.where, self.settings.option, len(failed), len(pairs), failed[-1].error)
        out = np.full((len(pairs), 1), np.nan)
        for row, (pair, reply) in enumerate(zip(pairs, replies, strict=True)):
            assert isinstance(reply, ChatReply)
            choice = reply.choices[0]
            if not choice.top_logprobs:
                value, why = None, "the endpoint returned no log-probs (serve the checker with log-probs enabled)"
            else:
                value, why = yes_no_support(choice.top_logprobs[0])
            keep_value(self._why, out, row, pair, value, why)
        return out

    async def _ask(self, pairs: Sequence[Pair]) -> list[ChatReply | CallFailed]:
        """Each pair's reply, or its `CallFailed`, with at most `concurrency` requests in flight."""
        s = self.settings
        client = OpenAIEndpoint(s.model, base_url=s.base_url, api_key_env=s.api_key_env, timeout=s.timeout,
                                breaker_after=s.breaker_after, where=s.where, option=s.option, section=s.section)
        # the one token read, at temperature 0, shaped as `params` declare (a refused parameter: one HaldetError)
        shaped = s.params.build(temperature=0.0, top_p=None, max_tokens=1)
        limit = asyncio.Semaphore(s.concurrency)

        async def one(premise: str, hypothesis: str) -> ChatReply | CallFailed:
            messages = [{"role": "user", "content": self.prompt.format(premise=premise, hypothesis=hypothesis)}]
            async with limit:
                try:
                    return await client.call(messages, attempts=s.retries + 1, backoff=s.backoff, usage=self.usage,
                                             logprobs=True, top_logprobs=self.top_logprobs, **shaped)
                except CallFailed as exc:
                    return exc

        return await gather_closing((one(p, h) for p, h in pairs), client)
