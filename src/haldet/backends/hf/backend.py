"""`HFBackend`: transformers, white-box, batched (`haldet.backends.hf` holds its parts, one concept each).

Generation is greedy, left-padded and length-bucketed: prompts are sorted by token length and batched, so a
batch wastes little compute on padding; outputs are returned in input order. Decoding runs haldet's own loop
(`lean`, over `haldet.backends.hf.decode`, docs/speed.md) or, with `decoder="transformers"`, `model.generate`
(`reference`).
Sampling draws K answers per prompt over K rows per prompt, each row with its own seeded generator
(`haldet.backends.hf.sampling`), so samples are reproducible whatever the batch composition; the prompt is read once
and its KV cache repeated for the K rows (not read at all when the greedy decoding kept its state: `keeping_prompts`,
`prompt_states`). Where the weights come from is `loading`; the teacher-forced passes are
`forward` (hidden states, ICR) and `tokens` (token-level evidence); evidence read while decoding is
`answer_reader`. Those modules take this backend as an argument and never import this one.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from haldet.backends.base import (
    AnswerEvidence,
    Backend,
    Capability,
    EvidenceRequest,
    ForwardOutput,
    ForwardRequest,
    GenOutput,
    Reply,
    TokenOutput,
    TokenRequest,
    role_based_chat,
)
from haldet.backends.hf import lean, reference, thinking, tokens
from haldet.backends.hf.forward import forward as forward_pass
from haldet.backends.hf.given import read_given
from haldet.backends.hf.loading import (
    check_attention,
    check_quantization,
    converted_gguf_dir,
    int8_dynamic,
    load_error,
    load_kwargs,
    load_tokenizer,
    placement,
    resolve_dtype,
    resolve_model_path,
)
from haldet.backends.hf.pool_budget import rows_within_budget
from haldet.backends.hf.prompt_states import PromptStates
from haldet.backends.hf.redeep import redeep_features
from haldet.config import HFModelConfig
from haldet.errors import HaldetError
from haldet.util.assets import file_sha256
from haldet.util.threads import thread_count

# how the hf backend decodes: its own lean loop (haldet.backends.hf.decode) or transformers' `generate` (reference)
DECODERS = ("haldet", "transformers")
# faster numerics on CPU, never the default (they change answers): bfloat16 weights, int8 dynamic quantisation
FAST_NUMERICS = ("none", "bf16", "int8")


class HFBackend(Backend):
    kind = "hf"
    # white-box: everything a stage may ask; True/False P(True) is read by token id (`candidate_logprobs`), never
    # from a reply's spellings (`self_eval_logprobs`, an endpoint's way)
    capabilities = frozenset(Capability) - {Capability.SELF_EVAL_LOGPROBS}
    sampler = "seeded-nucleus-inverse-cdf-v2"  # SeededSampler.draw: per-row generator, one uniform per token

    def __init__(self, name: str, *, device: str = "auto", decoder: str = "haldet",
                 fast_numerics: str = "none", decode_rows: int = 96, settings: HFModelConfig | None = None,
                 chat_template_kwargs: dict[str, Any] | None = None, reasoning: dict[str, Any] | None = None
                 ) -> None:
        super().__init__(name)
        # extra arguments of the chat template (e.g. enable_thinking=False for Qwen3); in the fingerprint when set
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        if decoder not in DECODERS:
            raise HaldetError(f"unknown decoder {decoder!r}", where="decoder", hint=f"choose {' or '.join(DECODERS)}")
        if fast_numerics not in FAST_NUMERICS:
            raise HaldetError(f"unknown fast_numerics {fast_numerics!r}", where="fast_numerics",
                              hint=f"choose {', '.join(FAST_NUMERICS)}")
        self.decoder = decoder
        self.fast_numerics = fast_numerics
        self.decode_rows = decode_rows  # rows the lean loop decodes together (continuous batching)
        import torch

        torch.set_num_threads(thread_count())
        source, gguf = resolve_model_path(name)
        self.gguf = gguf
        load_from = str(converted_gguf_dir(gguf)) if gguf is not None else source
        self.settings = settings = settings or HFModelConfig()
        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        # where inputs go: `device`, or under a device map the device of the embeddings
        self.device = placement(settings.device_map, torch.device(device))
        self.dtype = resolve_dtype(settings.dtype, self.device, fast_numerics)
        check_quantization(settings.quantization, self.device, fast_numerics)
        check_attention(settings.attn_implementation, self.device)
        if gguf is not None and settings.quantization is not None:
            raise HaldetError("a GGUF model is dequantised on loading; hf.quantization applies to safetensors weights",
                              where="hf.quantization", hint="use the model's safetensors release, or no quantization")
        self._source = load_from
        self._model: Any = None
        self._config: Any = None
        self._mergeable: bool | None = None  # `shares_heads`: the config's layers all full attention
        self.stop_ids: set[int] = set()
        self.load_seconds = 0.0
        self.prompt_states = PromptStates()  # greedy prompts' read states, for their samples (`keeping_prompts`)
        self.keeping = False
        self.tokenizer = load_tokenizer(name, load_from=load_from)
        # a reasoning model's thinking markers (haldet.backends.hf.thinking); None: whole outputs are answers
        self.markers = thinking.resolve_markers(self, reasoning)

    @property
    def model(self) -> Any:
        """The weights, loaded on first use: a fully cached rerun only needs the tokenizer."""
        if self._model is None:
            from transformers import AutoModelForCausalLM
            from transformers.utils import logging as hf_logging

            start = time.perf_counter()
            cfg = self.settings
            kwargs = load_kwargs(self.dtype, cfg.device_map, cfg.quantization, cfg.attn_implementation, self.device)
            bar = hf_logging.is_progress_bar_enabled()
            hf_logging.disable_progress_bar()  # a local load takes a second; its bar is a stray line in a run's log
            try:
                self._model = AutoModelForCausalLM.from_pretrained(self._source, **kwargs)
            except OSError as exc:
                raise load_error(self.name, exc) from None
            finally:
                if bar:
                    hf_logging.enable_progress_bar()
            if "device_map" not in kwargs:
                self._model.to(self.device)
            self._model.eval()
            self.device = self._model.get_input_embeddings().weight.device  # the placed embeddings: inputs go there
            if self.fast_numerics == "int8":
                self._model = int8_dynamic(self._model, self.device)
            self.load_seconds = time.perf_counter() - start
            self.stop_ids = self._stop_ids()
        return self._model

    def _stop_ids(self) -> set[int]:
        """EOS ids of the generation config and the tokenizer: where an answer ends."""
        ids: set[int] = set()
        eos = self._model.generation_config.eos_token_id
        ids.update(eos if isinstance(eos, list) else [eos] if eos is not None else [])
        if self.tokenizer.eos_token_id is not None:
            ids.add(self.tokenizer.eos_token_id)
        return ids

    def fingerprint(self) -> dict[str, Any]:
        fp: dict[str, Any] = {"backend": self.kind, "model": self.name, "dtype": str(self.dtype),
                              "decoder": self.decoder}
        if self.fast_numerics != "none":
            fp["fast_numerics"] = self.fast_numerics
        if self.chat_template_kwargs:
            fp["chat_template_kwargs"] = self.chat_template_kwargs
        if self.markers is not None:  # the reasoning/answer split: part of every stage key
            fp["reasoning_split"] = self.markers.spec()
        cfg = self.settings
        if cfg.quantization is not None:
            fp["quantization"] = f"bitsandbytes-{cfg.quantization}"
        if cfg.attn_implementation != "sdpa":
            fp["attn_implementation"] = cfg.attn_implementation
        if cfg.device_map is not None:  # layers on several devices: same model, other float arithmetic order
            fp["device_map"] = cfg.device_map
        if self.gguf is not None:
            fp["gguf_sha256_head"] = file_sha256(self.gguf, limit=1 << 22)[:16]
        elif Path(self._source).exists():
            fp["config_sha256"] = file_sha256(Path(self._source) / "config.json")[:16]
        else:
            fp["revision"] = getattr(self.tokenizer, "init_kwargs", {}).get("_commit_hash")
        return fp

    def pool_rows(self, encoded: Sequence[Sequence[int]], max_new_tokens: int, *, states: bool = False) -> int:
        """Rows to decode together: `decode_rows`, fewer where the pool's memory budget holds fewer rows of the
        longest prompt plus the answer (`pool_budget.rows_within_budget`; `states`: with ICR's hidden states)."""
        return rows_within_budget(self._text_config(), self.model.dtype.itemsize,
                                  max((len(s) for s in encoded), default=1), max_new_tokens, states=states,
                                  most=self.decode_rows, device=self.model.device)

    @property
    def has_chat_template(self) -> bool:
        return bool(getattr(self.tokenizer, "chat_template", None))

    def render_chat(self, messages: list[dict[str, str]]) -> str:
        if self.has_chat_template:
            return str(self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True,
                                                          **self.chat_template_kwargs))
        return role_based_chat(messages)

    def encode_prompt(self, prompt: str) -> list[int]:
        """Token ids of a rendered prompt: the template already holds any special tokens, so none are added,
        except a BOS the tokenizer always wants and the text lacks (role-based fallback): never a double BOS."""
        ids: list[int] = self.tokenizer(prompt, add_special_tokens=False).input_ids
        bos = self.tokenizer.bos_token_id
        wants_bos = bos is not None and self.tokenizer("x").input_ids[:1] == [bos]
        if wants_bos and (not ids or ids[0] != bos):
            ids = [bos, *ids]
        return ids

    def encode_text(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False).input_ids)

    def start_ids(self) -> list[int]:
        """The BOS token, or the EOS token for a tokenizer without one (GPT-2-style document separator)."""
        for token in (self.tokenizer.bos_token_id, self.tokenizer.eos_token_id):
            if token is not None:
                return [int(token)]
        raise HaldetError(f"the tokenizer of {self.name} has neither a BOS nor an EOS token, so an answer cannot be "
                          "read without its prompt", where=f"model {self.name}",
                          hint="drop the pointwise mutual information detectors (pmi, cpmi) for this model")

    @contextlib.contextmanager
    def keeping_prompts(self, keep: bool = True) -> Iterator[None]:
        self.keeping = keep and self.decoder == "haldet"
        try:
            yield
        finally:
            self.keeping = False

    def forget_prompts(self) -> None:
        self.prompt_states.clear()

    def generate(self, prompts: list[str], *, max_new_tokens: int, batch_size: int,
                 progress: Any = None) -> list[GenOutput]:
        return self.generate_until(prompts, None, max_new_tokens=max_new_tokens, batch_size=batch_size,
                                   progress=progress)

    def generate_until(self, prompts: list[str], until: Callable[[str], bool] | None, *, max_new_tokens: int,
                       batch_size: int, progress: Any = None) -> list[GenOutput]:
        """Greedy answers, each row ending at a stop token or as soon as `until(text so far)` holds."""
        if self.decoder == "transformers":
            outs = reference.generate(self, prompts, max_new_tokens=max_new_tokens, batch_size=batch_size,
                                      progress=progress)
            return [reference.cut_until(self, o, until) for o in outs] if until is not None else outs
        return lean.generate_until(self, prompts, until, max_new_tokens=max_new_tokens, batch_size=batch_size,
                                   progress=progress)

    def sample(self, prompts: list[str], *, k: int, temperature: float, top_p: float, seeds: Sequence[int],
               max_new_tokens: int, batch_size: int, progress: Any = None,
               hidden: tuple[int, str] | None = None) -> list[list[GenOutput]]:
        """K answers per prompt; `batch_size` counts sequences (prompts per call = batch_size // k, at least 1).
        The lean loop pools `hidden` (layer, mean|last) over each sample's tokens as it decodes
        (`extra["hidden"]`); the reference decoder leaves it to the caller's forward pass."""
        if temperature <= 0 or not 0 < top_p <= 1:
            raise HaldetError(f"sampling needs temperature > 0 and 0 < top_p <= 1 (got {temperature}, {top_p})",
                              where="sample.temperature / sample.top_p")
        if self.decoder == "transformers":
            return reference.sample(self, prompts, k=k, temperature=temperature, top_p=top_p, seeds=seeds,
                                    max_new_tokens=max_new_tokens, batch_size=batch_size, progress=progress)
        return lean.sample(self, prompts, k=k, temperature=temperature, top_p=top_p, seeds=seeds,
                           max_new_tokens=max_new_tokens, batch_size=batch_size, progress=progress, hidden=hidden)

    def candidate_logprobs(self, prompts: list[str], candidates: Sequence[int], *, max_new_tokens: int,
                           batch_size: int, progress: Any = None) -> list[GenOutput]:
        """The first reply position's log-probs of `candidates` (`extra["candidate_logprobs"]`) from one pass over
        each prompt; the text is the greedy first token only (the verdict word): with the probabilities at hand
        nothing further is read. The `transformers` decoder decodes the whole greedy reply as before."""
        if self.decoder == "transformers":
            outs = reference.generate(self, prompts, max_new_tokens=max_new_tokens, batch_size=batch_size,
                                      progress=progress, candidates=candidates)
            return [replace(self.finish(o.token_ids[:1], o.token_logprobs[:1]), extra=o.extra) for o in outs]
        return lean.candidate_logprobs(self, prompts, candidates, max_new_tokens=max_new_tokens, batch_size=batch_size,
                                       progress=progress)

    def shares_heads(self) -> bool:
        """The lean loop on a full-attention model: `paired_replies` reads two prompts' common head once (padding
        between a head and its tails would shift a sliding window). Read from the config: no weights loaded."""
        if self._mergeable is None:  # builds a cache to ask: once, as stage keys ask for every item
            from haldet.backends.hf.kv_cache import mergeable  # lazy: torch

            self._mergeable = mergeable(self.model_config)
        return self.decoder == "haldet" and self._mergeable

    def thinks(self) -> bool:
        return self.markers is not None

    def fuses_evidence(self) -> bool:
        """Whether greedy decoding can also read each answer's white-box evidence and follow-up questions
        (`generate_with_evidence`): the lean loop on a full-attention model with SDPA attention, read from the
        settings (stage keys ask before and after loading, and during the reader's kernel swap: one answer)."""
        return (self.markers is None and self.shares_heads()  # a reasoning output's evidence is its answer's
                and self.settings.attn_implementation == "sdpa")

    def generate_with_evidence(self, prompts: list[str], request: EvidenceRequest, *, max_new_tokens: int,
                               batch_size: int, progress: Any = None
                               ) -> tuple[list[GenOutput], list[AnswerEvidence] | None]:
        """Greedy answers (as `generate`) and, read on the way, each answer's evidence (`answer_reader`): states
        and branches from the decoding's own cache instead of a second pass over prompt + answer. The evidence is
        None when a prompt, its answer and the branches would not fit in the model window (the caller then reads
        it the usual way)."""
        if not self.fuses_evidence():
            raise HaldetError("this model cannot read evidence while decoding (the reference decoder, sliding-window "
                              "layers, or a non-SDPA attention)", where=f"model {self.name}",
                              hint="compute the evidence with its own pass")
        return lean.generate_with_evidence(self, prompts, request, max_new_tokens=max_new_tokens, batch_size=batch_size,
                                           progress=progress)

    def reply_output(self, reply: Reply, until: Callable[[str], bool] | None = None) -> GenOutput:
        """A follow-up's reply as `generate_until` would return it, with its candidates' log-probs."""
        res = self.finish_until(reply.tokens, reply.logprobs, until)
        res.extra["candidate_logprobs"] = list(reply.candidate_logprobs)
        return res

    @property
    def model_config(self) -> Any:
        """The model's config; read from its files while the weights are not loaded (keys are computed first)."""
        if self._model is not None:
            return self._model.config
        if self._config is None:
            from transformers import AutoConfig

            self._config = AutoConfig.from_pretrained(self._source)
        return self._config

    def paired_replies(self, first: list[str], second: list[str], until: Callable[[str], bool], *,
                       candidates: Sequence[int], max_new_tokens: int,
                       batch_size: int) -> tuple[list[GenOutput], list[GenOutput]]:
        """Two questions per item about the same text, their shared head (the token prefix the two prompts have in
        common) read once: `first[i]` answered greedily until `until` holds (as `generate_until`), `second[i]` read
        for its first reply position's log-probs of `candidates` (as `candidate_logprobs`, the verdict word only).
        Only where `shares_heads()`."""
        if not self.shares_heads():
            raise HaldetError("this model cannot read a shared head once (the reference decoder, or sliding-window "
                              "layers)", where=f"model {self.name}", hint="ask the two prompts apart")
        return lean.paired_replies(self, first, second, until, candidates=candidates, max_new_tokens=max_new_tokens,
                                   batch_size=batch_size)

    def _text_config(self) -> Any:
        config = self.model.config
        return getattr(config, "get_text_config", lambda: config)()

    def window(self) -> int:
        value = getattr(self._text_config(), "max_position_embeddings", None) or getattr(
            self.tokenizer, "model_max_length", None)
        return int(value) if value and value < 10**8 else 2048

    def layer_count(self) -> int:
        """Transformer layers L (hidden-state axes have L + 1 entries, 0 = embedding output)."""
        return int(self._text_config().num_hidden_layers)

    def packs_branches(self) -> bool:
        """Whether branches can share their sequence's pass: a tree mask replaces the causal mask in every layer,
        so a model with sliding-window layers (or an attention kernel without custom masks) runs them apart."""
        text = self._text_config()
        if any("sliding" in str(kind) for kind in getattr(text, "layer_types", None) or []):
            return False
        if getattr(text, "sliding_window", None) and getattr(text, "use_sliding_window", True):
            return False
        return getattr(self.model.config, "_attn_implementation", "sdpa") in ("sdpa", "eager")

    def forward(self, requests: list[ForwardRequest], *, layers: Sequence[int] | None, poolings: Sequence[str],
                logprobs: bool, icr: bool, batch_size: int, progress: Any = None,
                branch_pooling: str = "last") -> list[ForwardOutput]:
        """The teacher-forced pass (`haldet.backends.hf.forward`)."""
        return forward_pass(self, requests, layers=layers, poolings=poolings, logprobs=logprobs, icr=icr,
                            batch_size=batch_size, progress=progress, branch_pooling=branch_pooling)

    def attention_modules(self) -> list[Any]:
        """The self-attention module of every decoder layer, in order."""
        mods = [m for name, m in self.model.named_modules() if name.endswith("self_attn")]
        if len(mods) != self.layer_count():
            raise HaldetError(f"found {len(mods)} attention modules for {self.layer_count()} layers",
                              where=f"model {self.name}", hint="drop the icr feature group (features.groups)")
        return mods

    def answer_log_softmax(self, last_hidden: Any, ids: list[int], start: int) -> Any:
        """[T, vocab] log-probabilities predicting each answer token ids[start:], from one row's final hidden states."""
        import torch

        return torch.log_softmax(self.head_logits(last_hidden[start - 1 : len(ids) - 1]), dim=-1)

    def head_logits(self, last_hidden: Any) -> Any:
        """Next-token logits (float32) from final hidden states, as the model computes them (output head, soft cap)."""
        import torch

        logits = self.model.get_output_embeddings()(last_hidden).float()
        cap = getattr(self._text_config(), "final_logit_softcapping", None)
        if cap:
            logits = torch.tanh(logits / cap) * cap
        return logits

    def encode_response(self, text: str) -> tuple[list[int], list[tuple[int, int]]]:
        return tokens.encode_response(self, text)

    def token_offsets(self, ids: Sequence[int], text: str) -> list[tuple[int, int]]:
        return tokens.token_offsets(self, ids, text)

    def redeep_features(self, prompt: str, answer_ids: list[int], context: str, *, top_ratio: float,
                        max_tokens: int) -> Any:
        return redeep_features(self, prompt, answer_ids, context, top_ratio=top_ratio, max_tokens=max_tokens)

    def token_pass(self, requests: list[TokenRequest], *, top_k: int, entropies: bool, attention: bool,
                   batch_size: int, progress: Any = None, layers: bool = False,
                   prev_attention: bool = False) -> list[TokenOutput]:
        """Token-level evidence from one teacher-forced pass (`haldet.backends.hf.tokens`)."""
        return tokens.token_pass(self, requests, top_k=top_k, entropies=entropies, attention=attention,
                                 batch_size=batch_size, progress=progress, layers=layers,
                                 prev_attention=prev_attention)

    def reads_given(self) -> bool:
        return True

    def read_given(self, requests: list[TokenRequest], evidence: EvidenceRequest | None, *, top_k: int,
                   entropies: bool, attention: bool, layers: bool, batch_size: int, token_budget: int,
                   progress: Any = None, prev_attention: bool = False
                   ) -> tuple[list[TokenOutput], list[ForwardOutput] | None]:
        """Token evidence and pooled states of given responses from one pass (`haldet.backends.hf.given`)."""
        return read_given(self, requests, evidence, top_k=top_k, entropies=entropies, attention=attention,
                          layers=layers, batch_size=batch_size, token_budget=token_budget, progress=progress,
                          prev_attention=prev_attention)

    def answer_text(self, ids: Sequence[int]) -> str:
        return str(self.tokenizer.decode(list(ids), skip_special_tokens=True)).strip()

    def until_done(self, until: Callable[[str], bool]) -> Callable[[int, list[int]], bool]:
        """A decoding row's stop test: `until` holds for its text so far."""
        return lambda row, tokens: until(self.answer_text(tokens))

    def finish_until(self, token_ids: list[int], logprobs: list[float],
                      until: Callable[[str], bool] | None) -> GenOutput:
        """`finish` for a reply that may have ended because `until` held: that is a stop, not the token limit."""
        res = self.finish(token_ids, logprobs)
        if until is not None and res.finish_reason == "length" and until(res.text):
            res.finish_reason = "stop"
        return res

    def finish(self, token_ids: list[int], logprobs: list[float]) -> GenOutput:
        """Cut at the first stop token (excluded); the remaining ids are exactly the answer's tokens."""
        cut = next((i for i, t in enumerate(token_ids) if t in self.stop_ids), None)
        finish = "length" if cut is None else "stop"
        ids = token_ids if cut is None else token_ids[:cut]
        lps = logprobs[: len(ids)]
        if self.markers is not None:
            return thinking.split_output(self, self.markers, ids, lps, finish)
        return GenOutput(text=self.answer_text(ids), token_ids=ids, token_logprobs=[float(x) for x in lps],
                         finish_reason=finish)
