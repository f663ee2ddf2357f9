"""Where the `hf` backend's weights come from, and what its passes need of a loaded model.

Loads a hub id, a local directory, a GGUF file, or an embedded alias. A GGUF model is dequantised once and
cached as safetensors under the user cache dir (a GGUF-loaded model refuses `save_pretrained`, so a fresh model
is built from the same config without its quantization config, given the state dict, and saved), so later loads
take well under a second. `LoadedModel` is what the teacher-forced passes (`forward`, `tokens`) read of the
backend: they sit below `backend` and take it as an argument, so no module here imports the backend class.
"""

from __future__ import annotations

import json
import os
import shutil
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

from haldet.backends.base import GenOutput
from haldet.backends.hf.prompt_states import PromptStates
from haldet.errors import HaldetError
from haldet.util.assets import MODEL_ALIASES, cache_dir, check_alias, file_sha256


class LoadedModel(Protocol):
    """What a teacher-forced pass reads of the `hf` backend (`HFBackend` is one)."""

    @property
    def name(self) -> str: ...

    @property
    def model(self) -> Any: ...

    @property
    def tokenizer(self) -> Any: ...

    @property
    def device(self) -> Any: ...

    @property
    def dtype(self) -> Any: ...

    def window(self) -> int: ...

    def layer_count(self) -> int: ...

    def packs_branches(self) -> bool: ...

    def attention_modules(self) -> list[Any]: ...

    def answer_log_softmax(self, last_hidden: Any, ids: list[int], start: int) -> Any: ...


class DecodingModel(LoadedModel, Protocol):
    """What the two decoders (`lean`, `reference`) read of the `hf` backend besides a teacher-forced pass's needs."""

    stop_ids: set[int]
    keeping: bool  # whether greedy decoding keeps each prompt's read state now (`keeping_prompts`)
    prompt_states: PromptStates

    def encode_prompt(self, prompt: str) -> list[int]: ...

    def pool_rows(self, encoded: Sequence[Sequence[int]], max_new_tokens: int, *, states: bool = False) -> int: ...

    def answer_text(self, ids: Sequence[int]) -> str: ...

    def finish(self, token_ids: list[int], logprobs: list[float]) -> GenOutput: ...

    def finish_until(self, token_ids: list[int], logprobs: list[float],
                     until: Callable[[str], bool] | None) -> GenOutput: ...

    def until_done(self, until: Callable[[str], bool]) -> Callable[[int, list[int]], bool]: ...

    def head_logits(self, last_hidden: Any) -> Any: ...

    def generate(self, prompts: list[str], *, max_new_tokens: int, batch_size: int,
                 progress: Any = None) -> list[GenOutput]: ...


@contextmanager
def attention_hooks(backend: LoadedModel, hook: Callable[[Any, Any, Any], Any] | None) -> Iterator[None]:
    """Within the block, eager attention with `hook` on every attention module (its output holds the weights);
    afterwards the hooks removed and the model's own attention implementation back. No-op when `hook` is None."""
    if hook is None:
        yield
        return
    model = backend.model
    original = getattr(model.config, "_attn_implementation", None) or "sdpa"
    model.set_attn_implementation("eager")
    hooks = [module.register_forward_hook(hook) for module in backend.attention_modules()]
    try:
        yield
    finally:
        for handle in hooks:
            handle.remove()
        if original != "eager":
            model.set_attn_implementation(original)


def resolve_model_path(name: str) -> tuple[str, Path | None]:
    """(what to load, gguf file or None). Aliases and `.gguf` paths give a GGUF file."""
    if name in MODEL_ALIASES:
        return name, MODEL_ALIASES[name]()
    path = Path(name).expanduser()
    if name.endswith(".gguf"):
        if not path.is_file():
            raise HaldetError(f"GGUF file not found: {name}", where="--model",
                              hint=f"give an existing .gguf file, a model directory, a hub id, or an alias "
                                   f"({', '.join(MODEL_ALIASES)})")
        return str(path), path
    if path.exists():
        if not (path / "config.json").exists():
            raise HaldetError(f"{name} is not a model directory (no config.json)", where="--model",
                              hint="point --model at a directory saved by transformers, a .gguf file, or a hub id")
        return str(path), None
    if name.startswith((".", "/", "~")) or name.count("/") > 1:
        raise HaldetError(f"model path does not exist: {name}", where="--model",
                          hint=f"known aliases: {', '.join(MODEL_ALIASES)}")
    check_alias(name)
    return name, None


def converted_gguf_dir(gguf: Path) -> Path:
    """Directory of the safetensors conversion of a GGUF file, created once (atomically) if missing."""
    digest = file_sha256(gguf, limit=1 << 22)[:12]
    target = cache_dir() / "models" / f"{gguf.stem}-{digest}"
    if (target / "haldet-converted.json").exists():
        return target
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    tmp = target.with_name(target.name + f".tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    gguf_model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    config = AutoConfig.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    fresh = AutoModelForCausalLM.from_config(config)
    fresh.load_state_dict(gguf_model.state_dict())
    fresh.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    (tmp / "haldet-converted.json").write_text(json.dumps({"gguf": str(gguf), "sha256_head": digest}))
    if target.exists():
        shutil.rmtree(target)
    os.replace(tmp, target)
    return target



# `hf.dtype` -> torch dtype name (`auto`: bfloat16 on a GPU or with `fast_numerics: bf16`, else float32)
DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
QUANT_HINT = "pip install 'haldet[quant]' (bitsandbytes) on a machine with a CUDA GPU, or set hf.quantization: null"


def resolve_dtype(setting: str, device: Any, fast_numerics: str) -> Any:
    """The torch dtype of the weights for `hf.dtype` on `device`; a dtype that contradicts `fast_numerics` is an
    error, not a silent choice."""
    import torch

    if fast_numerics == "bf16" and setting not in ("auto", "bf16"):
        raise HaldetError(f"fast_numerics: bf16 contradicts hf.dtype: {setting}", where="hf.dtype",
                          hint="drop one of the two (hf.dtype: bf16 is the same as fast_numerics: bf16)")
    if setting == "auto":
        return torch.bfloat16 if device.type == "cuda" or fast_numerics == "bf16" else torch.float32
    return getattr(torch, DTYPES[setting])


def check_quantization(quantization: str | None, device: Any, fast_numerics: str) -> None:
    """Refuse quantised loading up front, with what is missing: bitsandbytes, a CUDA GPU, or a compatible setting."""
    import importlib.util

    if quantization is None:
        return
    if fast_numerics != "none":
        raise HaldetError(f"hf.quantization: {quantization} and fast_numerics: {fast_numerics} are two quantisations",
                          where="hf.quantization", hint="keep one of them")
    if importlib.util.find_spec("bitsandbytes") is None:
        raise HaldetError(f"hf.quantization: {quantization} needs bitsandbytes, which is not installed",
                          where="hf.quantization", hint=QUANT_HINT)
    if device.type != "cuda":
        raise HaldetError(f"hf.quantization: {quantization} needs a CUDA GPU (the model would run on {device})",
                          where="hf.quantization", hint=QUANT_HINT)


def check_attention(attn_implementation: str, device: Any) -> None:
    """FlashAttention 2 needs its package and a CUDA GPU: say so before loading."""
    import importlib.util

    if attn_implementation != "flash_attention_2":
        return
    if importlib.util.find_spec("flash_attn") is None or device.type != "cuda":
        raise HaldetError("hf.attn_implementation: flash_attention_2 needs the flash-attn package and a CUDA GPU",
                          where="hf.attn_implementation", hint="use sdpa (the default), or pip install flash-attn "
                                                               "on a GPU machine")


def placement(device_map: str | dict[str, Any] | None, device: Any) -> Any:
    """The device the inputs go to: `device`, or under a device map the one holding the embeddings (the first GPU
    for `auto` when there is one)."""
    import torch

    if device_map is None:
        return device
    if device_map == "auto":
        return torch.device("cuda:0") if torch.cuda.is_available() else torch.device("cpu")
    assert isinstance(device_map, dict)
    first = next((v for k, v in device_map.items() if "embed" in k), None)
    if first is None:
        first = device_map.get("", next(iter(device_map.values()), "cpu"))
    return torch.device(f"cuda:{first}" if isinstance(first, int) else first)


def load_kwargs(dtype: Any, device_map: str | dict[str, Any] | None, quantization: str | None,
                attn_implementation: str, device: Any) -> dict[str, Any]:
    """`from_pretrained` keyword arguments for these settings (a quantised model is placed at load time)."""
    kwargs: dict[str, Any] = {"dtype": dtype, "attn_implementation": attn_implementation}
    if quantization is not None:
        from transformers import BitsAndBytesConfig

        kwargs["quantization_config"] = (
            BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_compute_dtype=dtype, bnb_4bit_quant_type="nf4")
            if quantization == "4bit" else BitsAndBytesConfig(load_in_8bit=True))
        kwargs["device_map"] = device_map if device_map is not None else {"": str(device)}
    elif device_map is not None:
        kwargs["device_map"] = device_map
    return kwargs


def load_error(name: str, exc: Exception) -> HaldetError:
    return HaldetError(f"cannot load model {name!r}: {str(exc).splitlines()[0]}", where="--model",
                       hint=f"offline? use a local path, a .gguf file, or an alias ({', '.join(MODEL_ALIASES)})")


def int8_dynamic(model: Any, device: Any) -> Any:
    """Linear layers as int8 dynamic quantisation (`fast_numerics="int8"`, CPU only): faster, other answers."""
    import torch

    if device.type != "cpu":
        raise HaldetError("int8 dynamic quantisation runs on CPU only", where="fast_numerics",
                          hint="use fast_numerics: none or bf16 on GPUs")
    with warnings.catch_warnings():  # torch marks its quantized tensor constructors deprecated; they still work
        warnings.filterwarnings("ignore", category=UserWarning, message=".*quantiz.*deprecated")
        return torch.ao.quantization.quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8)


def load_tokenizer(name: str, *, load_from: str | None = None) -> Any:
    """The tokenizer of model `name` (alias, hub id, local folder or GGUF file) as `HFBackend` sets it up: left
    padding, and the EOS token as padding where the model names none. Loads no weights: for a detector or an
    auxiliary model that only counts or splits tokens. `load_from`: the folder `name` resolves to, when known."""
    from transformers import AutoTokenizer

    if load_from is None:
        source, gguf = resolve_model_path(name)
        load_from = str(converted_gguf_dir(gguf)) if gguf is not None else source
    try:
        tokenizer = AutoTokenizer.from_pretrained(load_from)
    except OSError as exc:
        raise load_error(name, exc) from None
    tokenizer.padding_side = "left"
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer
