"""One resolved run configuration (YAML file + CLI flags) and the hashes that name caches.

Every section forbids unknown keys, so a typo in a config file is an error naming the field, not a silently
ignored setting. `RunConfig.hash()` covers everything that changes any output; stages derive narrower keys
from the sections they read (see `stage_key`).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from haldet.defaults import DEFAULT_DETECTORS
from haldet.endpoint_params import EndpointParams, fill_prices, reply_budget


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class GenerationConfig(Section):
    """Greedy primary answer. Token limit per item (haldet.util.limits): `max_new_tokens` for everything when set,
    else per dataset, else per task type (reasoning and code 512, short answers 64, ...)."""

    max_new_tokens: int | None = Field(None, ge=1)
    max_new_tokens_by_dataset: dict[str, int] = Field(default_factory=dict)
    max_new_tokens_by_task: dict[str, int] = Field(default_factory=dict)
    batch_size: int = Field(8, ge=1)


class SampleConfig(Section):
    """Stochastic samples (paper 4.1: K=5, temperature 1.0, top-p 0.9), seeded per item."""

    k: int = Field(5, ge=1)
    temperature: float = Field(1.0, gt=0)
    top_p: float = Field(0.9, gt=0, le=1)
    seed: int = 42
    max_new_tokens: int | None = Field(None, ge=1)  # None: the item's generation limit (haldet.util.limits)
    # sequences per generate call (prompts per call = batch_size // k); 40 was 20% faster than 16 on 2 CPU cores
    batch_size: int = Field(40, ge=1)
    # pooled hidden state per sample, computed when EigenScore is selected: hidden-state index (-1 = last layer),
    # None = never stored
    hidden_layer: int | None = -1
    hidden_pooling: Literal["mean", "last"] = "mean"
    # who draws the samples: None = the run's model; else another model spec (a local name/path, `openai:NAME` for an
    # OpenAI-compatible endpoint), as TRIVIA+ sampled SelfCheck from GPT-4-mini and Claude; recorded in the scores
    model: str | None = None
    base_url: str | None = None      # endpoint of an `openai:` sample model (None = the `endpoint` section's)
    api_key_env: str | None = None   # its API key variable (None = the `endpoint` section's)


class ReasoningConfig(Section):
    """Reasoning models (docs/backends.md): split outputs at open/close (auto: when the chat template emits them;
    markers: always; off: never; `by_model`: these fields per model spec); judges see the reasoning too when set."""
    split: Literal["auto", "markers", "off"] = "auto"
    open: str = Field("<think>", min_length=1)
    close: str = Field("</think>", min_length=1)
    by_model: dict[str, dict[str, str]] = Field(default_factory=dict)
    judges_see_reasoning: bool = False


AUX_REPLY_BUDGET = 24  # a follow-up reply of a model that answers directly: one number or verdict word
EVALUATOR_REPLY_BUDGET = 512


class AuxiliaryConfig(Section):
    """Verbalized confidence and self-evaluation P(True) (paper appendix E.1), greedy."""

    verbalized: bool = True
    self_eval: bool = True
    # follow_up: a next user turn of the answered chat; evaluator: a separate evaluator chat (OpenHalDet E.2/E.3)
    procedure: Literal["follow_up", "evaluator"] = "follow_up"
    max_new_tokens: int | None = Field(None, ge=1)  # follow-up reply budget; None: 24, 4096 for a thinking target
    evaluator_max_new_tokens: int | None = Field(None, ge=1)  # evaluator reply budget; None: 512, 4096 if it thinks
    batch_size: int = Field(8, ge=1)

    def reply_budget(self, target_thinks: bool) -> int:
        """The follow-up questions' reply budget (`reply_budget`): the one set, else 24 (a number, a verdict word),
        or `REASONING_REPLY_BUDGET` when the target thinks first (it writes its thinking block before the reply)."""
        return reply_budget(self.max_new_tokens, AUX_REPLY_BUDGET, reasons=target_thinks)

    def self_eval_refusal(self, target_thinks: bool, model: str) -> str | None:
        """Why self-evaluation cannot run on `model` as configured (None when it can): the follow-up procedure reads
        P(True) at the first reply token, which on a thinking target is its thinking block's, not a verdict."""
        if not (target_thinks and self.self_eval and self.procedure == "follow_up"):
            return None
        return (f"self-evaluation reads P(True) at the first reply token, but {model} thinks before it replies (its "
                "first token opens or continues a thinking block, not a True/False verdict)")

    def evaluator_budget(self, target_thinks: bool) -> int:
        """The evaluator chats' reply budget: the one set, else 512 (room to reason), 4096 on a thinking target."""
        return reply_budget(self.evaluator_max_new_tokens, EVALUATOR_REPLY_BUDGET, reasons=target_thinks)


FeatureGroup = Literal["hidden", "sep", "ccs", "prism", "icr"]
FEATURE_GROUPS: tuple[FeatureGroup, ...] = ("hidden", "sep", "ccs", "prism", "icr")
Pooling = Literal["mean", "last", "first_n", "last_n"]
POOLINGS: tuple[Pooling, ...] = ("mean", "last", "first_n", "last_n")


class VerdictConfig(Section):
    """Who answers the prompted-verdict detectors (LLM-as-a-judge, zero-shot classifiers; `haldet.stages.verdict`):
    the run's own model when `model` is None, else an OpenAI-compatible endpoint."""

    model: str | None = None                     # endpoint model name; None = the run's model (local backend)
    base_url: str | None = None                  # OpenAI-compatible endpoint (None = the openai default)
    api_key_env: str = "OPENAI_API_KEY"
    temperature: float = Field(0.0, ge=0)
    max_new_tokens: int | None = Field(None, ge=1)  # reply budget; None = the prompt's own (reasoning first)
    # the judge's own window, where a suite fits long articles (TRIVIA+): None = the judge reads the article as fitted
    # for the detectors' model; else the article is fitted anew into this many `context_unit`s, less the reply
    # budget, the question, the answer and the prompt's wording (CONTEXT_MARGIN)
    context_window: int | None = Field(None, ge=256)
    context_unit: Literal["tokens", "chars"] = "tokens"  # tokens: the run's model's tokenizer; chars: characters
    batch_size: int = Field(4, ge=1)             # local backend: prompts per generate call (long contexts)
    concurrency: int = Field(8, ge=1)            # endpoint: requests in flight at once
    retries: int = Field(4, ge=0)
    backoff: float = Field(1.0, ge=0)
    timeout: float = Field(60.0, gt=0)
    params: EndpointParams = Field(default_factory=EndpointParams)  # request parameters by model (also the optimiser)


CLAIMS_REPLY_BUDGET = 512  # the claim extractor's default reply budget (a model that does not reason)
JUDGE_REPLY_BUDGET = 256  # the LLM judge's default reply budget (a judge that does not reason)


class ClaimsConfig(Section):
    """How the `claims` stage splits each answer (`haldet.stages.claims`): `extractor` "llm" asks a model for atomic
    claims (the run's own model when `model` is None, else an OpenAI-compatible endpoint) and maps each back to a
    span of the answer; "sentence" / "clause" are the offline rule-based units (no model, not called claims)."""

    extractor: Literal["llm", "sentence", "clause"] = "llm"
    model: str | None = None                     # endpoint model name; None = the run's model (local backend)
    base_url: str | None = None
    api_key_env: str = "OPENAI_API_KEY"
    max_new_tokens: int | None = Field(None, ge=16)  # reply budget; None: 512, 4096 for a reasoning model
    min_coverage: float = Field(0.6, gt=0, le=1)  # share of a claim's content words a span must hold
    batch_size: int = Field(4, ge=1)
    concurrency: int = Field(8, ge=1)
    retries: int = Field(4, ge=0)
    backoff: float = Field(1.0, ge=0)
    timeout: float = Field(60.0, gt=0)
    params: EndpointParams = Field(default_factory=EndpointParams)  # request parameters by model

    def reply_budget(self, own_model_thinks: bool) -> int:
        """`max_new_tokens`, else 512, or `REASONING_REPLY_BUDGET` when the extractor reasons (an endpoint whose
        `params` declare it, or the run's own model when it thinks: `own_model_thinks`)."""
        reasons = self.params.reasons() if self.model is not None else own_model_thinks
        return reply_budget(self.max_new_tokens, CLAIMS_REPLY_BUDGET, reasons=reasons)


class RedeepConfig(Section):
    """ReDeEP's evidence (`haldet.stages.redeep`): one eager-attention pass over prompt + answer per item."""

    top_ratio: float = Field(0.1, gt=0, le=1)  # share of the context tokens a head attends most, per answer token
    # longest prompt + answer it processes: the pass holds every layer's full attention matrix (quadratic in length);
    # a longer item is NaN with the reason, as the TRIVIA+ paper's 14-22% of long-context items
    max_tokens: int = Field(4096, ge=16)


class FeatureConfig(Section):
    """One teacher-forced pass over prompt + generated ids (statement groups ride along as branches). Of `groups`
    and `pooling`, only what the selected detectors read is computed."""

    layers: Literal["all"] | list[int] = "all"  # hidden-state indices (0 = embeddings, -1 = last layer)
    # poolings of the `hidden` group: mean / last answer token, and the mean over the first / last N answer tokens
    # (`select_tokens` = N; computed only when a selected detector reads them, e.g. saplma pooling: last_n)
    pooling: list[Pooling] = Field(default_factory=lambda: list(POOLINGS))
    select_tokens: int = Field(4, ge=1)
    dtype: Literal["float16", "float32"] = "float16"
    groups: list[FeatureGroup] = Field(default_factory=lambda: list(FEATURE_GROUPS))
    batch_size: int = Field(8, ge=1)


class TokensConfig(Section):
    """Token-level evidence (the generate stage's one teacher-forced token pass, computed when a selected detector
    reads a token-level signal) and how a response that ships with the data is fed to the proxy model."""

    top_k: int = Field(10, ge=1)                            # alternatives per token, the observed one first
    input_format: Literal["raw", "chat"] = "raw"            # given responses: raw prompt text, or the chat template
    separator: str = "\n"                                  # raw format: between the prompt text and the response
    batch_size: int = Field(4, ge=1)
    # given responses: rows x padded width of one teacher-forced batch at most (a longer row runs alone); bounds
    # the pass's memory by tokens instead of items x length (changes no value)
    token_budget: int = Field(4096, ge=1)


class HFModelConfig(Section):
    """How the `hf` backend loads a local model (docs/backends.md). Every setting that changes numbers is part of the
    model fingerprint, so of every stage key."""

    # weights and activations: auto = bfloat16 on a GPU, float32 on CPU (`fast_numerics: bf16` asks bfloat16 there)
    dtype: Literal["auto", "bf16", "fp16", "fp32"] = "auto"
    # None: the whole model on `device`; "auto": spread over the visible GPUs (then CPU) by accelerate; or an explicit
    # map of module name -> device ({"": "cuda:0"}, {"model.layers.0": 0, ..., "lm_head": 1})
    device_map: Literal["auto"] | dict[str, int | str] | None = None
    # bitsandbytes quantised loading (the `quant` extra, a CUDA GPU); None = full weights
    quantization: Literal["4bit", "8bit"] | None = None
    # attention kernel of every pass; the passes that read attention weights switch to eager for themselves
    attn_implementation: Literal["sdpa", "flash_attention_2", "eager"] = "sdpa"


class VLLMConfig(Section):
    """How the `vllm` backend starts its engine (docs/backends.md)."""

    tensor_parallel_size: int = Field(1, ge=1)                   # GPUs one model is split over
    gpu_memory_utilization: float = Field(0.85, gt=0, le=1)      # share of each GPU's memory vLLM may take
    max_model_len: int | None = Field(None, ge=1)                # longest sequence (None: the model's own window)
    # alternatives per position vLLM returns (its `max_logprobs`): the top-k of the token pass and the entropies of
    # given responses are read from at most this many (recorded in the fingerprint)
    max_logprobs: int = Field(20, ge=1)


class PromptConfig(Section):
    system_prompt: str = "You are a helpful, accurate, and honest AI assistant."
    n_shots: int = Field(0, ge=0)
    shot_seed: int = 42
    template_dir: str | None = None


class JudgeConfig(Section):
    """How answers are labelled (docs/judges.md). `kind`: rule (deterministic rules only), exec (code execution
    only), llm (the LLM judge for everything), cascade (rule + exec where they apply, the LLM judge for the rest
    when `model` is set; `invalid` otherwise)."""

    kind: Literal["rule", "exec", "llm", "cascade"] = "cascade"
    backend: Literal["openai", "hf"] = "openai"  # LLM judge: OpenAI-compatible endpoint, or a local hf model
    base_url: str | None = None                  # OpenAI-compatible endpoint (None = the openai default)
    model: str | None = None                     # LLM judge model (endpoint model name, or hf id/alias/path)
    api_key_env: str = "OPENAI_API_KEY"          # environment variable holding the API key
    concurrency: int = Field(8, ge=1)            # requests in flight at once
    retries: int = Field(4, ge=0)                # extra attempts after the first (429/5xx/timeout/malformed)
    backoff: float = Field(1.0, ge=0)            # first retry wait in seconds, doubled each retry
    timeout: float = Field(60.0, gt=0)           # seconds per request
    breaker_after: int = Field(5, ge=1)          # consecutive timeouts/connection failures that stop all calls
    max_tokens: int | None = Field(None, ge=16)  # reply budget; None: 256, 4096 for a reasoning judge
    seed: int = 0                                # sent with every request (deterministic decoding)
    json_mode: bool = True                       # ask the endpoint for a JSON object (response_format)
    params: EndpointParams = Field(default_factory=EndpointParams)  # request parameters by model (reasoning)
    few_shot: bool = True                        # include the calibration examples
    prompt: Literal["haldet", "paper"] = "haldet"  # haldet: its rules and fields; paper: appendix D's structure only
    template_dir: str | None = None              # judge_*.txt / judge_examples.json overriding the packaged ones
    price_in: float | None = Field(None, ge=0)   # USD per 1M prompt tokens (cost accounting; None = unknown)
    price_out: float | None = Field(None, ge=0)  # USD per 1M completion tokens
    f1_threshold: float = Field(0.5, gt=0, le=1)  # short answers: token F1 that counts as a match
    math_rel_tol: float = Field(1e-4, ge=0)      # math: relative tolerance of the final-number match
    exec_timeout: float = Field(10.0, gt=0)      # code: seconds per program
    exec_memory_mb: int = Field(1024, ge=64)     # code: address-space limit per program
    exec_workers: int = Field(2, ge=1)           # code: programs run in parallel
    extra: list[str] = Field(default_factory=list)  # registered plugin judges (@register), tried first

    def reply_budget(self) -> int:
        """`max_tokens`, else 256 (a direct verdict), or `REASONING_REPLY_BUDGET` when the judge is declared to reason
        (`params.reasoning`, a reasoning effort)."""
        return reply_budget(self.max_tokens, JUDGE_REPLY_BUDGET, reasons=self.params.reasons())


# The backend of every LLM haldet asks (a run's LLM judge, a suite's generator and judge): one default, the judge
# config's, so every command's `--*-backend` flag agrees.
DEFAULT_LLM_BACKEND: str = JudgeConfig.model_fields["backend"].default
LLM_BACKEND_HELP = "openai (any OpenAI-compatible endpoint) or hf (a local model: alias, hub id or path)."


class EndpointConfig(Section):
    """Target models behind an OpenAI-compatible endpoint (model spec `openai:NAME`; docs/backends.md)."""

    base_url: str | None = None                  # e.g. http://127.0.0.1:8080/v1 (None = the openai default)
    api_key_env: str = "OPENAI_API_KEY"          # environment variable holding the API key (local servers: none)
    concurrency: int = Field(8, ge=1)            # requests in flight at once
    retries: int = Field(4, ge=0)                # extra attempts after the first (429/5xx/timeout/bad body)
    backoff: float = Field(1.0, ge=0)            # first retry wait in seconds, doubled each retry
    timeout: float = Field(120.0, gt=0)          # seconds per request
    breaker_after: int = Field(5, ge=1)          # consecutive timeouts/connection failures that stop all calls
    logprobs: bool = True                        # ask for token log-probs (gray-box detectors need them)
    top_logprobs: int = Field(20, ge=1, le=20)   # alternatives per position (self-evaluation P(True))
    n_samples: Literal["auto", "n", "calls"] = "auto"  # K samples: one request with n=K, K requests, or try n
    seed: int = 0                                # sent with greedy requests (servers that honour it repeat)
    price_in: float | None = Field(None, ge=0)   # USD per 1M prompt tokens (cost columns; None = unknown)
    price_out: float | None = Field(None, ge=0)  # USD per 1M completion tokens
    params: EndpointParams = Field(default_factory=EndpointParams)  # request parameters by model (reasoning)


class TemplateFile(Section):
    """A prompt template read from a file (`templates: {NAME: {path: FILE}}`)."""

    path: str


class EvaluationConfig(Section):
    split: tuple[float, float, float] = (0.6, 0.2, 0.2)
    split_seed: int = 42
    bootstrap: int = Field(1000, ge=0)
    ci: float = Field(0.95, gt=0, lt=1)
    bootstrap_seed: int = 42
    # a monotone map score -> P(hallucination) fitted on validation, applied to test (ECE, Brier; AUROC unchanged)
    calibration: Literal["none", "platt", "isotonic"] = "none"
    # suites: `test` scores the test items; `all` scores training-free detectors on every item (as HalluEntity and
    # VeriGray report), trained detectors still fit on train and report on test; each row says its `scope`
    evaluate_on: Literal["test", "all"] = "test"
    # a cell whose test split holds fewer labelled items of either class is thin: its numbers are shown, marked,
    # never ranked, and the run exits 1 unless --allow-failures
    min_per_class: int = Field(5, ge=0)  # 0: no minimum

    @field_validator("split")
    @classmethod
    def _sums_to_one(cls, value: tuple[float, float, float]) -> tuple[float, float, float]:
        if abs(sum(value) - 1.0) > 1e-6 or min(value) <= 0:
            raise ValueError(f"split fractions {value} must be positive and sum to 1")
        return value


class ReportConfig(Section):
    """What the reports add beyond the honest metrics."""

    # a separate `auroc_max_orientation` row per AUROC: max(AUROC, 1 - AUROC), i.e. the score oriented on the test
    # labels as the OpenHalDet paper's tables are; not a valid detector score, never ranked or aggregated
    max_orientation: bool = False


class RunConfig(Section):
    preset: str | None = None  # a packaged preset (haldet/presets/<name>.yaml) lying under the file and the flags
    datasets: list[str] = Field(default_factory=lambda: ["halueval_qa"])
    models: list[str] = Field(default_factory=lambda: ["smollm2-135m"])
    detectors: list[str] = Field(default_factory=lambda: list(DEFAULT_DETECTORS))
    limit: int | None = Field(200, ge=1)
    # a cap per dataset under `limit` (None: that dataset's whole split); `limit_for` gives an item count
    limit_by_dataset: dict[str, int | None] = Field(default_factory=dict)
    data_seed: int = 42
    data_dir: str | None = None
    on_bad_row: Literal["skip", "fail"] = "fail"
    device: str = "auto"
    # speed options (docs/speed.md): the hf backend's decoding loop (same answers); faster numerics on CPU
    # (bfloat16 weights, or int8 dynamic quantisation of linear layers) change answers and are never the default
    decoder: Literal["haldet", "transformers"] = "haldet"
    fast_numerics: Literal["none", "bf16", "int8"] = "none"
    # rows the lean loop decodes together (continuous batching; prompts join as rows end): decoding steps of many
    # rows cost far less per token on CPU; memory grows with it (the rows' KV cache, capped at 1.5 GiB)
    decode_rows: int = Field(96, ge=1)
    # the lean loop reads the features and auxiliary stages' evidence while it decodes the greedy answers (states
    # as computed, statements and follow-up questions as branches of each answer's cache) instead of reading
    # prompt + answer again; equal within float tolerance, records say `source`
    evidence_in_decoding: bool = True
    hf: HFModelConfig = Field(default_factory=HFModelConfig)
    vllm: VLLMConfig = Field(default_factory=VLLMConfig)
    generation: GenerationConfig = Field(default_factory=GenerationConfig)
    reasoning: ReasoningConfig = Field(default_factory=ReasoningConfig)
    sample: SampleConfig = Field(default_factory=SampleConfig)
    auxiliary: AuxiliaryConfig = Field(default_factory=AuxiliaryConfig)
    features: FeatureConfig = Field(default_factory=FeatureConfig)
    redeep: RedeepConfig = Field(default_factory=RedeepConfig)
    prompt: PromptConfig = Field(default_factory=PromptConfig)
    tokens: TokensConfig = Field(default_factory=TokensConfig)
    suite: str | None = None  # a registered suite (haldet/suites/): its protocol, levels, metrics and tables
    suite_params: dict[str, dict[str, Any]] = Field(default_factory=dict)  # per suite, e.g. {"triviaplus": {...}}
    judge: JudgeConfig = Field(default_factory=JudgeConfig)
    verdict: VerdictConfig = Field(default_factory=VerdictConfig)
    claims: ClaimsConfig = Field(default_factory=ClaimsConfig)
    endpoint: EndpointConfig = Field(default_factory=EndpointConfig)
    evaluation: EvaluationConfig = Field(default_factory=EvaluationConfig)
    report: ReportConfig = Field(default_factory=ReportConfig)
    detector_params: dict[str, dict[str, Any]] = Field(default_factory=dict)
    # extra arguments of every target model's chat template: hf/vllm pass them to the tokenizer's
    # apply_chat_template, openai endpoints get them as `chat_template_kwargs` in the request body (vLLM, SGLang);
    # e.g. {"enable_thinking": false} for Qwen3. Part of the model fingerprint (every stage key) when set
    chat_template_kwargs: dict[str, Any] = Field(default_factory=dict)
    # prompt templates by name (haldet.text.templates.PROMPT_TEMPLATES): inline text or {path: FILE}; the texts
    # key every record they produce
    templates: dict[str, str | TemplateFile] = Field(default_factory=dict)
    # adapter options per dataset, e.g. {"belebele": {"languages": ["eng_Latn", "fra_Latn"]}}
    dataset_params: dict[str, dict[str, Any]] = Field(default_factory=dict)
    # USD per 1M prompt / completion tokens by model, for every role that names it (a section's price_in/out wins)
    prices: dict[str, tuple[float, float]] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _prices(self) -> RunConfig:  # the judge's price from `prices` when its section declares none
        return fill_prices(self)

    def canonical(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    def limit_for(self, dataset: str) -> int | None:
        """The items a run evaluates of `dataset`: the smaller of `limit` and the dataset's own cap in
        `limit_by_dataset` (None where neither caps it: the whole split)."""
        caps = [c for c in (self.limit, self.limit_by_dataset.get(dataset)) if c is not None]
        return min(caps) if caps else None

    def hash(self) -> str:
        return digest(self.canonical())

    def diff(self, other: RunConfig) -> list[str]:
        """Top-level and section fields that differ, as dotted names (for 'config changed' messages)."""
        mine, theirs = self.canonical(), other.canonical()
        changed: list[str] = []
        for key in sorted(set(mine) | set(theirs)):
            a, b = mine.get(key), theirs.get(key)
            if isinstance(a, dict) and isinstance(b, dict) and key not in ("detector_params", "dataset_params"):
                changed += [f"{key}.{k}" for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
            elif a != b:
                changed.append(key)
        return changed


def digest(obj: Any, length: int = 16) -> str:
    """Stable short hash of a JSON-able object (sorted keys, no whitespace)."""
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:length]


def stage_key(stage: str, *parts: Any) -> str:
    """Cache key of one stage's output for one item: the stage name plus every input that changes it."""
    return digest([stage, *parts])


def split_names(values: list[str] | None) -> list[str]:
    """Multi-valued CLI options accept repeats and comma lists: `--detector a,b --detector c`."""
    out: list[str] = []
    for value in values or []:
        out += [v.strip() for v in value.split(",") if v.strip()]
    return out
