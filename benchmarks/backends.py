"""Target-model backends on the same prompts and model: items/s of greedy answers and of K-sample sets, and how often
each backend's greedy answer equals the first backend's (hf by default).

Backends: `hf` (transformers), `vllm` (a GPU and the `vllm` extra), `openai` (any OpenAI-compatible server serving
the same model, e.g. the llama.cpp server of docs/backends.md: pass --base-url and --served-name).
Prints JSON. Usage:
  python benchmarks/backends.py --backends hf,vllm [--n 64] [--k 5] [--max-new-tokens 32] [--model smollm2-135m]
  python benchmarks/backends.py --backends hf,openai --base-url http://127.0.0.1:8080/v1 --served-name smollm2
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from haldet.backends.base import Backend
from haldet.config import EndpointConfig, PromptConfig
from haldet.datasets.base import get_adapter
from haldet.text.prompts import PromptBuilder


def make(kind: str, args: argparse.Namespace) -> Backend:
    if kind == "hf":
        from haldet.backends.hf.backend import HFBackend

        return HFBackend(args.model, device=args.device)
    if kind == "vllm":
        from haldet.backends.vllm import VLLMBackend

        return VLLMBackend(f"vllm:{args.model}")
    from haldet.backends.openai_backend import OpenAIBackend

    return OpenAIBackend(f"openai:{args.served_name}", EndpointConfig(base_url=args.base_url,
                                                                      concurrency=args.concurrency))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backends", default="hf,vllm")
    parser.add_argument("--n", type=int, default=64)
    parser.add_argument("--k", type=int, default=5)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--base-url", default=None)
    parser.add_argument("--served-name", default="smollm2")
    parser.add_argument("--concurrency", type=int, default=1)
    args = parser.parse_args()

    instances, _ = get_adapter("halueval_qa", None, None).load(limit=args.n, seed=42)
    builder = PromptBuilder(PromptConfig())
    result: dict[str, Any] = {"model": args.model, "n": args.n, "k": args.k, "max_new_tokens": args.max_new_tokens}
    reference: list[str] | None = None
    for kind in args.backends.split(","):
        backend = make(kind, args)
        prompts = [builder.render(backend, inst) for inst in instances]
        backend.generate(prompts[:2], max_new_tokens=4, batch_size=2)  # warm-up: weights loaded, kernels ready
        start = time.perf_counter()
        greedy = backend.generate(prompts, max_new_tokens=args.max_new_tokens, batch_size=args.batch)
        greedy_s = time.perf_counter() - start
        start = time.perf_counter()
        backend.sample(prompts, k=args.k, temperature=1.0, top_p=0.9, seeds=list(range(len(prompts))),
                       max_new_tokens=args.max_new_tokens, batch_size=args.batch * args.k)
        sample_s = time.perf_counter() - start
        texts = [g.text for g in greedy]
        entry = {"greedy_items_per_s": round(len(prompts) / greedy_s, 3),
                 "sample_items_per_s": round(len(prompts) / sample_s, 3),
                 "failed": sum(bool(g.error) for g in greedy)}
        if reference is None:
            reference = texts
        else:
            entry["greedy_same_as_first"] = sum(a == b for a, b in zip(reference, texts, strict=True))
        result[kind] = entry
    kinds = args.backends.split(",")
    for kind in kinds[1:]:
        for mode in ("greedy", "sample"):
            result[f"{kind}_vs_{kinds[0]}_{mode}_speedup"] = round(
                result[kind][f"{mode}_items_per_s"] / result[kinds[0]][f"{mode}_items_per_s"], 3)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
