"""The `vllm` backend (optional extra `vllm`, a GPU): fast greedy answers and K samples with vLLM, same records as hf.

Model spec `vllm:MODEL` (hub id, local directory, `.gguf` file or embedded alias; a GGUF is served from the same
converted safetensors directory the hf backend uses). The tokenizer, chat rendering and prompt encoding are the hf
backend's (this class extends it without ever loading transformers weights), and prompts are handed to vLLM as
token ids, so both backends see exactly the same ids. Prefix caching is on (K samples and the auxiliary queries
share their prompt's KV cache).

- greedy: temperature 0, the sampled token's log-prob per position (`logprobs=0`);
- K samples: one request per prompt with `n=K` and the item's own seed, so samples do not depend on the batch;
  log-probs are the model's raw log-probs of each sampled token;
- self-evaluation: next-token log-probs of the True/False candidate ids read as prompt log-probs of the prompt
  extended by each candidate (exact, not limited to a top-k list).
- given responses (`token_pass`): prompt + response handed as one prompt with `prompt_logprobs`, so each response
  token's log-prob given everything before it is vLLM's own (exact), and the top-k alternatives come from the same
  call. vLLM returns at most `vllm.max_logprobs` alternatives per position (recorded in the fingerprint as
  `logprobs_top_k`), so the entropy at a position is read from those: the top-k terms plus the remaining
  probability mass as one more outcome, a lower bound of the full entropy that is exact when the top k hold all
  the mass (`entropy_from_topk`).
Settings (`vllm.*`): tensor parallelism, memory share, longest sequence, alternatives per position.
Hidden states, attentions and the teacher-forced feature pass stay with the hf backend: they are not among its
declared `capabilities`, `forward` refuses, and `haldet.backends.select.check_signals` refuses such detectors
before any work.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from haldet.backends.base import Capability, GenOutput, TokenOutput, TokenRequest
from haldet.backends.hf.backend import HFBackend
from haldet.backends.hf.thinking import split_output
from haldet.backends.hf.tokens import fit_to_window
from haldet.config import VLLMConfig
from haldet.errors import HaldetError

PREFIX = "vllm:"


def vllm_model_name(spec: str) -> str:
    return spec[len(PREFIX):] if spec.startswith(PREFIX) else spec


class VLLMBackend(HFBackend):
    kind = "vllm"
    # gray-box: no transformers weights here, so no hidden states, attentions or teacher-forced pass
    capabilities = frozenset({Capability.TEXT, Capability.N_SAMPLES, Capability.LOGPROBS, Capability.ENTROPIES,
                              Capability.CANDIDATE_LOGPROBS, Capability.TEACHER_FORCED})

    def __init__(self, name: str, *, device: str = "auto", settings: VLLMConfig | None = None,
                 chat_template_kwargs: dict[str, Any] | None = None, reasoning: dict[str, Any] | None = None
                 ) -> None:
        try:
            import vllm
        except ImportError:
            raise HaldetError("the vllm backend needs vLLM, which is not installed", where=f"--model {name}",
                              hint="pip install 'haldet[vllm]' on a machine with a GPU, or use the hf backend "
                                   "(the model name without the vllm: prefix)") from None
        # tokenizer only; vLLM places the weights itself
        super().__init__(vllm_model_name(name), device="cpu", chat_template_kwargs=chat_template_kwargs,
                         reasoning=reasoning)
        self.name = name
        self.vllm_version = vllm.__version__
        self.vllm_settings = settings or VLLMConfig()
        self._llm: Any = None

    @property
    def llm(self) -> Any:
        """The vLLM engine, started on first use (a fully cached rerun never starts it)."""
        if self._llm is None:
            from vllm import LLM

            cfg = self.vllm_settings
            self._llm = LLM(model=self._source, tokenizer=self._source, enable_prefix_caching=True, seed=0,
                            gpu_memory_utilization=cfg.gpu_memory_utilization,
                            tensor_parallel_size=cfg.tensor_parallel_size, max_model_len=cfg.max_model_len,
                            max_logprobs=cfg.max_logprobs)
            self.stop_ids = stop_ids(self._source, self.tokenizer)
        return self._llm

    @property
    def model(self) -> Any:
        raise self.unavailable("transformers weights (the vllm backend serves the model through vLLM)")

    def fingerprint(self) -> dict[str, Any]:
        fp = super().fingerprint()
        cfg = self.vllm_settings
        fp.update(backend=self.kind, model=self.name, vllm=self.vllm_version, logprobs_top_k=cfg.max_logprobs,
                  tensor_parallel_size=cfg.tensor_parallel_size)
        return fp

    def _text_config(self) -> Any:
        config = self.model_config  # read from the model's files: no transformers weights here
        return getattr(config, "get_text_config", lambda: config)()

    def window(self) -> int:
        return self.vllm_settings.max_model_len or super().window()

    def token_pass(self, requests: list[TokenRequest], *, top_k: int, entropies: bool, attention: bool,
                   batch_size: int, progress: Any = None, layers: bool = False,
                   prev_attention: bool = False) -> list[TokenOutput]:
        """Token evidence of given answers from vLLM's prompt log-probs (one request per answer, prompt + answer
        as its prompt); attention weights and per-layer states are not available here."""
        if attention or layers or prev_attention:
            raise self.unavailable("attention weights or per-layer states of given text")
        from vllm import SamplingParams

        limit = self.vllm_settings.max_logprobs
        want = min(limit, max(top_k, limit if entropies else 0))
        outputs: list[TokenOutput | None] = [None] * len(requests)
        runnable = []
        for i, req in enumerate(requests):
            if not req.answer_ids:
                outputs[i] = TokenOutput(key=req.key, token_logprobs=np.zeros(0))
                continue
            ids, start, info = fit_to_window(req, self.window())
            if not ids:
                outputs[i] = TokenOutput(key=req.key, window=info)
                continue
            runnable.append((i, ids, start, info))
        params = SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=want)
        results = list(self.llm.generate([{"prompt_token_ids": ids} for _, ids, _, _ in runnable], params,
                                         use_tqdm=False)) if runnable else []
        for (i, ids, start, info), result in zip(runnable, results, strict=True):
            outputs[i] = token_output(requests[i].key, result.prompt_logprobs, ids, start, top_k=top_k,
                                      entropies=entropies, limit=limit, window=info)
            if progress is not None:
                progress(1)
        return [o for o in outputs if o is not None]

    def _run(self, prompts: list[str], params: list[Any]) -> list[Any]:
        ids = [{"prompt_token_ids": self.encode_prompt(p)} for p in prompts]
        return list(self.llm.generate(ids, params, use_tqdm=False))

    def generate(self, prompts: list[str], *, max_new_tokens: int, batch_size: int, progress: Any = None,
                 candidates: Sequence[int] | None = None) -> list[GenOutput]:
        from vllm import SamplingParams

        params = SamplingParams(temperature=0.0, max_tokens=max_new_tokens, logprobs=0, seed=0)
        outs = [self.answer_of(completion_output(r.outputs[0], self.stop_ids))
                for r in self._run(prompts, [params] * len(prompts))]
        if candidates is not None:
            for out, lps in zip(outs, self._next_token_logprobs(prompts, candidates), strict=True):
                out.extra["candidate_logprobs"] = lps
        return outs

    def sample(self, prompts: list[str], *, k: int, temperature: float, top_p: float, seeds: Sequence[int],
               max_new_tokens: int, batch_size: int, progress: Any = None,
               hidden: tuple[int, str] | None = None) -> list[list[GenOutput]]:
        from vllm import SamplingParams

        params = [SamplingParams(n=k, temperature=temperature, top_p=top_p, max_tokens=max_new_tokens, logprobs=0,
                                 seed=int(seed) % (2**31 - 1)) for seed in seeds]
        return [[self.answer_of(completion_output(c, self.stop_ids)) for c in r.outputs]
                for r in self._run(prompts, params)]

    def answer_of(self, out: GenOutput) -> GenOutput:
        """A reasoning model's output split at its thinking markers, as the hf backend splits its own."""
        if self.markers is None:
            return out
        return split_output(self, self.markers, out.token_ids, out.token_logprobs, out.finish_reason)

    def candidate_logprobs(self, prompts: list[str], candidates: Sequence[int], *, max_new_tokens: int,
                           batch_size: int, progress: Any = None) -> list[GenOutput]:
        return self.generate(prompts, max_new_tokens=max_new_tokens, batch_size=batch_size, candidates=candidates)

    def _next_token_logprobs(self, prompts: list[str], candidates: Sequence[int]) -> list[list[float]]:
        """log p(candidate | prompt) for every candidate: the prompt log-prob of the candidate appended."""
        from vllm import SamplingParams

        params = SamplingParams(max_tokens=1, prompt_logprobs=0, temperature=0.0)
        requests = [{"prompt_token_ids": [*self.encode_prompt(p), int(c)]} for p in prompts for c in candidates]
        results = list(self.llm.generate(requests, params, use_tqdm=False))
        out = []
        for i in range(len(prompts)):
            row = results[i * len(candidates):(i + 1) * len(candidates)]
            out.append([prompt_logprob_of_last(r) for r in row])
        return out

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise self.unavailable("teacher-forced hidden states (hidden-state features stay with the hf backend)")


def stop_ids(source: str, tokenizer: Any) -> set[int]:
    """EOS ids of the model's generation config and its tokenizer (where an answer ends), as the hf backend."""
    ids = {tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set()
    try:
        from transformers import GenerationConfig

        eos = GenerationConfig.from_pretrained(source).eos_token_id
    except OSError:  # no generation_config.json: the tokenizer's EOS
        eos = None
    ids.update(eos if isinstance(eos, list) else [eos] if eos is not None else [])
    return ids


def completion_output(completion: Any, stop_ids: set[int]) -> GenOutput:
    """A vLLM `CompletionOutput` as a `GenOutput`: ids without a trailing EOS, the sampled tokens' log-probs."""
    ids = list(completion.token_ids)
    steps = list(completion.logprobs or [])
    lps = [float(step[tid].logprob) for tid, step in zip(ids, steps, strict=False)]
    if len(lps) != len(ids):
        raise HaldetError(f"vLLM returned {len(lps)} log-probs for {len(ids)} tokens", where="vllm backend",
                          hint="report this with the vLLM version")
    while ids and ids[-1] in stop_ids:
        ids, lps = ids[:-1], lps[:-1]
    finish = "length" if completion.finish_reason == "length" else "stop"
    return GenOutput(text=completion.text, token_ids=ids, token_logprobs=lps, finish_reason=finish)


def prompt_logprob_of_last(result: Any) -> float:
    """The prompt log-prob vLLM reports for the last prompt token of a request."""
    last_id = result.prompt_token_ids[-1]
    return float(result.prompt_logprobs[-1][last_id].logprob)


def entropy_from_topk(logprobs: Sequence[float]) -> float:
    """Entropy (nats) of a distribution known by its top-k log-probs: their terms plus the remaining mass as one
    outcome. A lower bound of the full entropy, exact when the top k hold all the mass."""
    probs = [math.exp(x) for x in logprobs]
    rest = max(0.0, 1.0 - sum(probs))
    return -sum(p * math.log(p) for p in probs if p > 0) - (rest * math.log(rest) if rest > 0 else 0.0)


def token_output(key: str, prompt_logprobs: Sequence[Any], ids: Sequence[int], start: int, *, top_k: int,
                 entropies: bool, limit: int, window: dict[str, Any] | None = None) -> TokenOutput:
    """A `TokenOutput` from vLLM's `prompt_logprobs` of prompt + answer `ids` (position p: a dict of token id ->
    Logprob for p's top alternatives and p's own token; position 0 is None); the answer is ids[start:]. Top-k has
    the observed token first, then the others by log-prob; entropies are `entropy_from_topk` of the `limit`
    alternatives vLLM returned."""
    if len(prompt_logprobs) != len(ids):
        raise HaldetError(f"vLLM returned prompt log-probs for {len(prompt_logprobs)} of {len(ids)} tokens",
                          where="vllm backend", hint="report this with the vLLM version")
    lps, ents, k_ids, k_lps = [], [], [], []
    for pos in range(start, len(ids)):
        step, observed = prompt_logprobs[pos], int(ids[pos])
        if step is None or observed not in step:
            raise HaldetError(f"vLLM gave no log-prob for the prompt token at position {pos}", where="vllm backend",
                              hint="report this with the vLLM version")
        lps.append(float(step[observed].logprob))
        ranked = sorted(((float(v.logprob), int(t)) for t, v in step.items()), key=lambda x: (-x[0], x[1]))
        if entropies:
            ents.append(entropy_from_topk([lp for lp, _ in ranked[:limit]]))
        if top_k > 0:
            others = [(lp, t) for lp, t in ranked if t != observed][: top_k - 1]
            if len(others) < top_k - 1:
                raise HaldetError(f"vLLM returned {len(others) + 1} alternatives where tokens.top_k is {top_k}",
                                  where="tokens.top_k", hint=f"set tokens.top_k <= vllm.max_logprobs ({limit})")
            k_ids.append([observed] + [t for _, t in others])
            k_lps.append([lps[-1]] + [lp for lp, _ in others])
    return TokenOutput(key=key, token_logprobs=np.asarray(lps, dtype=np.float64),
                       entropies=np.asarray(ents, dtype=np.float64) if entropies else None,
                       topk_ids=np.asarray(k_ids, dtype=np.int64).reshape(-1, top_k) if top_k > 0 else None,
                       topk_logprobs=np.asarray(k_lps, dtype=np.float32).reshape(-1, top_k) if top_k > 0 else None,
                       window=window)
