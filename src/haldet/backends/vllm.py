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
Hidden states, attentions and the teacher-forced feature pass stay with the hf backend: they are not among its
declared `capabilities`, `forward` refuses, and `haldet.backends.select.check_signals` refuses such detectors
before any work.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from haldet.backends.base import Capability, GenOutput
from haldet.backends.hf.backend import HFBackend
from haldet.errors import HaldetError

PREFIX = "vllm:"


def vllm_model_name(spec: str) -> str:
    return spec[len(PREFIX):] if spec.startswith(PREFIX) else spec


class VLLMBackend(HFBackend):
    kind = "vllm"
    # gray-box: no transformers weights here, so no hidden states, attentions or teacher-forced pass
    capabilities = frozenset({Capability.TEXT, Capability.N_SAMPLES, Capability.LOGPROBS, Capability.ENTROPIES,
                              Capability.CANDIDATE_LOGPROBS})

    def __init__(self, name: str, *, device: str = "auto", gpu_memory_utilization: float = 0.85,
                 chat_template_kwargs: dict[str, Any] | None = None) -> None:
        try:
            import vllm
        except ImportError:
            raise HaldetError("the vllm backend needs vLLM, which is not installed", where=f"--model {name}",
                              hint="pip install 'haldet[vllm]' on a machine with a GPU, or use the hf backend "
                                   "(the model name without the vllm: prefix)") from None
        # tokenizer only; vLLM places the weights itself
        super().__init__(vllm_model_name(name), device="cpu", chat_template_kwargs=chat_template_kwargs)
        self.name = name
        self.vllm_version = vllm.__version__
        self.gpu_memory_utilization = gpu_memory_utilization
        self._llm: Any = None

    @property
    def llm(self) -> Any:
        """The vLLM engine, started on first use (a fully cached rerun never starts it)."""
        if self._llm is None:
            from vllm import LLM

            self._llm = LLM(model=self._source, tokenizer=self._source, enable_prefix_caching=True, seed=0,
                            gpu_memory_utilization=self.gpu_memory_utilization)
            self.stop_ids = stop_ids(self._source, self.tokenizer)
        return self._llm

    @property
    def model(self) -> Any:
        raise self.unavailable("transformers weights (the vllm backend serves the model through vLLM)")

    def fingerprint(self) -> dict[str, Any]:
        fp = super().fingerprint()
        fp.update(backend=self.kind, model=self.name, vllm=self.vllm_version)
        return fp

    def _run(self, prompts: list[str], params: list[Any]) -> list[Any]:
        ids = [{"prompt_token_ids": self.encode_prompt(p)} for p in prompts]
        return list(self.llm.generate(ids, params, use_tqdm=False))

    def generate(self, prompts: list[str], *, max_new_tokens: int, batch_size: int, progress: Any = None,
                 candidates: Sequence[int] | None = None) -> list[GenOutput]:
        from vllm import SamplingParams

        params = SamplingParams(temperature=0.0, max_tokens=max_new_tokens, logprobs=0, seed=0)
        outs = [completion_output(r.outputs[0], self.stop_ids) for r in self._run(prompts, [params] * len(prompts))]
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
        return [[completion_output(c, self.stop_ids) for c in r.outputs] for r in self._run(prompts, params)]

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
