"""The `hf` backend: transformers, white-box, batched.

Loads a hub id, a local directory, a GGUF file, or an embedded alias. A GGUF model is dequantised once and
cached as safetensors under the user cache dir (a GGUF-loaded model refuses `save_pretrained`, so a fresh model
is built from the same config without its quantization config, given the state dict, and saved), so later loads
take well under a second.
Generation is greedy, left-padded and length-bucketed: prompts are sorted by token length and batched, so a
batch wastes little compute on padding; outputs are returned in input order.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

from haldet.assets import MODEL_ALIASES, cache_dir, file_sha256
from haldet.backends.base import Backend, GenOutput, role_based_chat
from haldet.errors import HaldetError


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


def _load_error(name: str, exc: Exception) -> HaldetError:
    return HaldetError(f"cannot load model {name!r}: {str(exc).splitlines()[0]}", where="--model",
                       hint=f"offline? use a local path, a .gguf file, or an alias ({', '.join(MODEL_ALIASES)})")


class HFBackend(Backend):
    kind = "hf"

    def __init__(self, name: str, *, device: str = "auto") -> None:
        super().__init__(name)
        import torch
        from transformers import AutoTokenizer

        source, gguf = resolve_model_path(name)
        self.gguf = gguf
        load_from = str(converted_gguf_dir(gguf)) if gguf is not None else source
        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        self.device = torch.device(device)
        self.dtype = torch.bfloat16 if self.device.type == "cuda" else torch.float32
        self._source = load_from
        self._model: Any = None
        self.stop_ids: set[int] = set()
        self.load_seconds = 0.0
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(load_from)
        except OSError as exc:
            raise _load_error(name, exc) from None
        self.tokenizer.padding_side = "left"
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token

    @property
    def model(self) -> Any:
        """The weights, loaded on first use: a fully cached rerun only needs the tokenizer."""
        if self._model is None:
            from transformers import AutoModelForCausalLM

            start = time.perf_counter()
            try:
                self._model = AutoModelForCausalLM.from_pretrained(self._source, dtype=self.dtype)
            except OSError as exc:
                raise _load_error(self.name, exc) from None
            self._model.to(self.device).eval()
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
        fp: dict[str, Any] = {"backend": self.kind, "model": self.name, "dtype": str(self.dtype)}
        if self.gguf is not None:
            fp["gguf_sha256_head"] = file_sha256(self.gguf, limit=1 << 22)[:16]
        elif Path(self._source).exists():
            fp["config_sha256"] = file_sha256(Path(self._source) / "config.json")[:16]
        else:
            fp["revision"] = getattr(self.tokenizer, "init_kwargs", {}).get("_commit_hash")
        return fp

    @property
    def has_chat_template(self) -> bool:
        return bool(getattr(self.tokenizer, "chat_template", None))

    def render_chat(self, messages: list[dict[str, str]]) -> str:
        if self.has_chat_template:
            return str(self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True))
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

    def generate(self, prompts: list[str], *, max_new_tokens: int, batch_size: int,
                 progress: Any = None) -> list[GenOutput]:
        import torch
        from transformers import GenerationConfig

        model = self.model
        encoded = [self.encode_prompt(p) for p in prompts]
        order = sorted(range(len(prompts)), key=lambda i: len(encoded[i]))
        results: list[GenOutput | None] = [None] * len(prompts)
        config = GenerationConfig(do_sample=False, max_new_tokens=max_new_tokens, output_logits=True,
                                  return_dict_in_generate=True, pad_token_id=self.tokenizer.pad_token_id,
                                  eos_token_id=sorted(self.stop_ids))
        for start in range(0, len(order), batch_size):
            batch = order[start : start + batch_size]
            input_ids, attention = self._left_pad([encoded[i] for i in batch])
            with torch.inference_mode():
                out = model.generate(input_ids=input_ids, attention_mask=attention, generation_config=config)
            new_tokens = out.sequences[:, input_ids.shape[1]:]
            logits = torch.stack(out.logits, dim=1).float()  # [batch, steps, vocab]
            logprobs = torch.log_softmax(logits, dim=-1).gather(-1, new_tokens.unsqueeze(-1)).squeeze(-1)
            for row, item in enumerate(batch):
                results[item] = self._finish(new_tokens[row].tolist(), logprobs[row].tolist())
            if progress is not None:
                progress(len(batch))
        return [r for r in results if r is not None]

    def _left_pad(self, seqs: list[list[int]]) -> tuple[Any, Any]:
        import torch

        width = max(len(s) for s in seqs)
        pad = self.tokenizer.pad_token_id
        ids = torch.full((len(seqs), width), pad, dtype=torch.long)
        mask = torch.zeros((len(seqs), width), dtype=torch.long)
        for row, seq in enumerate(seqs):
            ids[row, width - len(seq):] = torch.tensor(seq, dtype=torch.long)
            mask[row, width - len(seq):] = 1
        return ids.to(self.device), mask.to(self.device)

    def _finish(self, token_ids: list[int], logprobs: list[float]) -> GenOutput:
        """Cut at the first stop token (excluded); the remaining ids are exactly the answer's tokens."""
        cut = next((i for i, t in enumerate(token_ids) if t in self.stop_ids), None)
        finish = "length" if cut is None else "stop"
        ids = token_ids if cut is None else token_ids[:cut]
        lps = logprobs[: len(ids)]
        text = self.tokenizer.decode(ids, skip_special_tokens=True).strip()
        return GenOutput(text=text, token_ids=ids, token_logprobs=[float(x) for x in lps], finish_reason=finish)
