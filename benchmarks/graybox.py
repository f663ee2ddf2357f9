"""What the gray-box baselines of issue 43 add to a run's evidence: the decoding loop with and without the log Chernoff
coefficients and KL columns (TOKEN_CHERNOFF, for renyi_divergence, fisher_rao, rauq's entropy variant) read beside the
entropies, alternated in one process on the same prompts (CPU seconds of the process, and the seconds spent inside the
coefficients' computation itself), and the `unconditional` stage's one extra teacher-forced pass (pmi, cpmi) against the
greedy generation of the same answers, and RAUQ's `prev_attention` part of the token pass (eager attention) beside the
top-k part a default run already computes.

The reader asks for nothing but what the coefficients ride with (no hidden states, no statements), so the ratio is
the worst case: a default run's decoding also reads hidden states and statements, which the coefficients do not
touch. Prints JSON.
Usage: python benchmarks/graybox.py [--n 8] [--max-new-tokens 48] [--rounds 3] [--model smollm2-135m]
"""

from __future__ import annotations

import argparse
import json
import os
import time

import torch

from haldet.backends.base import EvidenceRequest, TokenRequest
from haldet.backends.hf import answer_reader
from haldet.backends.hf.backend import HFBackend
from haldet.datasets.base import get_adapter
from haldet.signals import CHERNOFF_WIDTH


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--model", default="smollm2-135m")
    args = parser.parse_args()
    torch.set_num_threads(1)
    backend = HFBackend(args.model, device="cpu")
    instances = get_adapter("halueval_qa").load(limit=args.n)[0]
    prompts = [backend.render_chat([{"role": "user", "content": i.question or ""}]) for i in instances]
    request = EvidenceRequest(layers=[], poolings=[])
    with_terms = answer_reader.chernoff_terms

    def without_terms(logp: torch.Tensor) -> torch.Tensor:
        return torch.zeros((logp.shape[0], CHERNOFF_WIDTH), dtype=torch.float64)

    inside = [0.0]  # CPU seconds spent computing the coefficients themselves

    def timed_terms(logp: torch.Tensor) -> torch.Tensor:
        start = time.process_time()
        try:
            return with_terms(logp)
        finally:
            inside[0] += time.process_time() - start

    # CPU seconds of this process (one torch thread): less disturbed by other processes than wall time
    times: dict[str, list[float]] = {"with": [], "without": [], "unconditional": [], "inside_chernoff": [],
                                     "token_pass_topk": [], "token_pass_topk_prev_attention": []}
    answers = None
    for _ in range(args.rounds):
        for name, fn in (("without", without_terms), ("with", timed_terms)):
            answer_reader.chernoff_terms = fn
            inside[0] = 0.0
            start = time.process_time()
            answers, _ = backend.generate_with_evidence(prompts, request, max_new_tokens=args.max_new_tokens,
                                                        batch_size=8)
            times[name].append(time.process_time() - start)
        times["inside_chernoff"].append(inside[0])
        answer_reader.chernoff_terms = with_terms
        start = time.process_time()
        backend.token_pass([TokenRequest(backend.start_ids(), a.token_ids, str(k)) for k, a in enumerate(answers)
                            if a.token_ids], top_k=0, entropies=False, attention=False, batch_size=8)
        times["unconditional"].append(time.process_time() - start)
        # RAUQ's part of the generate stage's token pass beside the top-k part a default run already computes
        forced = [TokenRequest(backend.encode_prompt(p), a.token_ids, str(k))
                  for k, (p, a) in enumerate(zip(prompts, answers, strict=True)) if a.token_ids]
        for name, prev in (("token_pass_topk", False), ("token_pass_topk_prev_attention", True)):
            start = time.process_time()
            backend.token_pass(forced, top_k=5, entropies=True, attention=False, batch_size=8, prev_attention=prev)
            times[name].append(time.process_time() - start)
    best = {k: min(v) for k, v in times.items()}
    share = sum(times["inside_chernoff"]) / sum(times["with"])
    print(json.dumps({"model": args.model, "n": args.n, "max_new_tokens": args.max_new_tokens,
                      "answer_tokens": sum(len(a.token_ids) for a in answers or []), "rounds": args.rounds,
                      "cpu_seconds": times, "decode_ratio_with_vs_without_chernoff": best["with"] / best["without"],
                      "chernoff_share_of_decoding": share,
                      "unconditional_vs_decoding": best["unconditional"] / best["with"],
                      "token_pass_ratio_with_vs_without_prev_attention":
                          best["token_pass_topk_prev_attention"] / best["token_pass_topk"],
                      "prev_attention_extra_vs_decoding":
                          (best["token_pass_topk_prev_attention"] - best["token_pass_topk"]) / best["with"],
                      "load_average": os.getloadavg()[0]}, indent=1))


if __name__ == "__main__":
    main()
