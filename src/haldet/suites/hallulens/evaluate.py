"""Evaluate target models on a built HalluLens set: answer, judge, rates per trial, mean/sd over trials, detection
sets from the judged answers.

Layout of the output directory:
    OUT/results.json                            per model: per task, per trial rates + mean/sd over trials
    OUT/table.md                                Table 2-shaped summary
    OUT/judge_cache.jsonl                       every judge reply (keyed by request; reruns are free)
    OUT/<model>/seed-<s>/<task>.answers.jsonl   the model's answers (keyed by model, prompt, decoding)
    OUT/<model>/seed-<s>/<task>.judged.jsonl    one judgement record per judged item
    OUT/<model>/seed-<s>/<task>.failed.jsonl    judge steps that failed after retries (rerun retries them)
    OUT/<model>/detection/<task>.jsonl          detection set: prompt, response, label (+ claim units for LongWiki)
Target answers come from greedy decoding with the model's chat template and no system prompt (paper appendix C:
temperature 0, top-p 1), through the backend `haldet.backends.select` picks for the model (`target.Target`): the
local transformers backend, vLLM, or for `openai:<model>` any OpenAI-compatible endpoint.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from haldet.backends.structured import CallFailure
from haldet.config import digest
from haldet.errors import HaldetError
from haldet.models.passages import PassageIndex
from haldet.store import StageLog, atomic_path, atomic_write_text, read_json
from haldet.suites.hallulens.build import Item
from haldet.suites.hallulens.judges import HalluLensJudges, Judgement
from haldet.suites.hallulens.llm import StructuredLLM
from haldet.suites.hallulens.rates import (
    far_by_place_group,
    far_rates,
    kendall_between_tasks,
    kendall_cells,
    longwiki_rates,
    mean_sd,
    qa_rates,
    rates_by_decile,
)
from haldet.suites.hallulens.sets import MANIFEST, read_items, trial_dirs
from haldet.suites.hallulens.sources import load_pages
from haldet.suites.hallulens.target import Target
from haldet.util.assets import file_sha256
from haldet.util.versions import library_versions

MAX_NEW_TOKENS = {"precisewikiqa": 128, "proxy_qa": 128, "longwiki": 1024, "nonexistent": 256}
ProgressFactory = Callable[[str, int], Callable[[int], None]]


def slug(model: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", model).strip("_") or "model"


def answer_items(target: Target, items: Sequence[Item], path: Path, max_new_tokens: int,
                 progress: ProgressFactory | None, label: str) -> tuple[dict[str, str], list[dict[str, Any]]]:
    """Answers by item id (cached in `path`, keyed by model, prompt and decoding) and the calls that failed."""
    log = StageLog(path)
    fp = target.fingerprint()
    keys = {it.id: digest(["answer", fp, it.prompt, max_new_tokens]) for it in items}
    done = {i: r["response"] for i, r in log.read(keys).items()}
    todo = [it for it in items if it.id not in done]
    failures: list[dict[str, Any]] = []
    if todo:
        bar = progress(label, len(todo)) if progress else None
        outs = target.answer([it.prompt for it in todo], max_new_tokens, bar)
        recs = []
        for it, out in zip(todo, outs, strict=True):
            if isinstance(out, CallFailure):
                failures.append({"id": it.id, "step": "answer", "error": out.error, "attempts": out.attempts})
                continue
            done[it.id] = out
            recs.append({"id": it.id, "key": keys[it.id], "response": out, "model": target.spec})
        log.append(recs)
    return done, failures


def task_rates(task: str, items: Sequence[Item], judgement: Judgement, k: int) -> dict[str, Any]:
    records = list(judgement.records.values())
    if task in ("precisewikiqa", "proxy_qa"):
        rates = qa_rates(records)
        if task == "precisewikiqa":
            rates["by_decile"] = rates_by_decile(records, {it.id: it.decile for it in items})
    elif task == "longwiki":
        rates = longwiki_rates(records, k)
    else:
        domains = {it.id: (it.subtask, it.domain) for it in items}
        rates = far_rates(records, domains)
        rates["by_place_group"] = far_by_place_group(records, {it.id: str(it.meta.get("place_group") or "")
                                                               for it in items if it.subtask == "generated"})
    rates["failed"] = len({f["id"] for f in judgement.failures})
    return rates


def detection_rows(task: str, items: Sequence[Item], responses: dict[str, str], judgement: Judgement
                   ) -> list[dict[str, Any]]:
    """Judged answers as a detection set: response label hallucination / correct / abstention (excluded by the
    evaluation). NonExistentRefusal: acceptance = hallucination, refusal = correct (never an abstention).
    LongWiki: claim units (offsets of the sentence each claim came from) labelled by verification, with who
    decided each (`by`), and the page title (the longform suite's `hallulens_longwiki` reads both)."""
    by_id = {it.id: it for it in items}
    rows = []
    for item_id, rec in judgement.records.items():
        it = by_id[item_id]
        units: list[dict[str, Any]] = []
        if task == "nonexistent":
            label = "hallucination" if rec["believes"] else "correct"
        elif rec["abstained"]:
            label = "abstention"
        elif task == "longwiki":
            for sent in rec.get("sentences", []):
                for claim in sent["claims"]:
                    units.append({"kind": "claim", "start": sent["start"], "end": sent["end"], "text": claim["text"],
                                  "label": "correct" if claim["supported"] else "hallucination",
                                  "by": claim.get("supported_by")})
            if not units:
                continue
            label = "hallucination" if any(u["label"] == "hallucination" for u in units) else "correct"
        else:
            label = "correct" if rec["verdict"] == "CORRECT" else "hallucination"
        rows.append({"id": item_id, "task": task, "prompt": it.prompt, "response": responses[item_id],
                     "label": label, "units": units, "gold": it.answer, "name": it.name, "domain": it.domain,
                     **({"title": it.title} if task == "longwiki" else {})})
    return rows


def breakdown_summaries(trial_rates: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Mean/sd over trials of the per-decile rates (Fig. 4) and per-place-group FAR (Fig. 9) when present."""
    out: dict[str, Any] = {}
    for field, metrics in (("by_decile", ("false_refusal", "hallucination", "correct")), ("by_place_group", ("far",))):
        groups = sorted({g for r in trial_rates.values() for g in r.get(field, {})},
                        key=lambda g: (not g.isdigit(), int(g) if g.isdigit() else 0, g))
        if groups:
            out[field] = {g: {m: mean_sd([float(r[field][g][m]) for r in trial_rates.values() if g in r.get(field, {})])
                              for m in metrics} | {"n": sum(int(r[field][g]["n"]) for r in trial_rates.values()
                                                           if g in r.get(field, {}))}
                          for g in groups}
    return out


def _jsonl(path: Path, rows: Sequence[dict[str, Any]]) -> None:
    atomic_write_text(path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))


def evaluate(set_dir: Path, out: Path, *, targets: Sequence[Target], judge: StructuredLLM | None,
             tasks: Sequence[str] | None = None, prompts: Any, pages: str | None = None, k: int = 32,
             max_new_tokens: dict[str, int] | None = None, limit: int | None = None,
             progress: ProgressFactory | None = None, preset: dict[str, str] | None = None,
             task_judges: dict[str, StructuredLLM] | None = None, judges_mode: str = "cascade") -> dict[str, Any]:
    """Answer, judge and rate every task of the set per target. `task_judges` replaces `judge` for the tasks it
    names (the paper's judges differ per task); `judges_mode`: `cascade` (rule judges first) or `llm` (the LLM
    decides everything, the paper's protocol); `preset` (name, hash, file) is recorded in results.json when the
    command took a preset's defaults."""
    manifest = read_json(set_dir / MANIFEST) if (set_dir / MANIFEST).exists() else {}
    trials = trial_dirs(set_dir)
    wanted = list(tasks or manifest.get("tasks") or [])
    budgets = {**MAX_NEW_TOKENS, **(max_new_tokens or {})}
    index = None
    if "longwiki" in wanted:
        page_file = pages or manifest.get("sources", {}).get("pages", {}).get("path")
        if not page_file or not Path(page_file).is_file():
            raise HaldetError("LongWiki verification needs the page file the set was built from",
                              where=str(page_file or set_dir / MANIFEST), hint="pass --pages FILE")
        recorded = manifest.get("sources", {}).get("pages", {}).get("sha256")
        if recorded and file_sha256(Path(page_file)) != recorded:
            raise HaldetError("the page file differs from the one the set was built from", where=str(page_file),
                              hint="pass the original file with --pages, or rebuild the set")
        index = PassageIndex(load_pages(page_file))
    task_judges = dict(task_judges or {})
    judges = HalluLensJudges(judge, prompts, index, progress, judges_mode)
    per_task_judges = {t: HalluLensJudges(llm, prompts, index, progress, judges_mode)
                       for t, llm in task_judges.items()}
    results: dict[str, Any] = {"set": str(set_dir), "set_manifest": {k_: manifest.get(k_) for k_ in
                                                                       ("config", "sources", "generators",
                                                                        "prompts_digest", "preset", "built_at")},
                               "preset": preset, "judges": judges_mode,
                               "judge": judge.usage_report() if judge else None, "judge_fingerprint":
                               judges.fingerprint(), "task_judges": {t: {"judge": llm.usage_report(),
                               "judge_fingerprint": per_task_judges[t].fingerprint()} for t, llm in
                               task_judges.items()}, "k": k, "versions": library_versions(), "models": {}}
    for target in targets:
        per_task: dict[str, Any] = {}
        for task in wanted:
            trial_rates: dict[str, Any] = {}
            detection: list[dict[str, Any]] = []
            for folder in trials:
                path = folder / f"{task}.jsonl"
                if not path.exists():
                    continue
                items = read_items(path)[:limit] if limit else read_items(path)
                cell = out / slug(target.spec) / folder.name
                responses, answer_failures = answer_items(target, items, cell / f"{task}.answers.jsonl",
                                                          budgets[task], progress,
                                                          f"answer {task} [{target.spec} | {folder.name}]")
                judgement = per_task_judges.get(task, judges).judge(items, responses)
                judgement.failures = answer_failures + judgement.failures
                _jsonl(cell / f"{task}.judged.jsonl", list(judgement.records.values()))
                _jsonl(cell / f"{task}.failed.jsonl", judgement.failures)
                trial_rates[folder.name] = task_rates(task, items, judgement, k)
                detection += detection_rows(task, items, responses, judgement)
            if not trial_rates:
                continue
            _jsonl(out / slug(target.spec) / "detection" / f"{task}.jsonl", detection)
            metrics = _metric_names(task)
            summary = {m: mean_sd([float(r[m]) for r in trial_rates.values()]) for m in metrics}
            per_task[task] = {"trials": trial_rates, "summary": summary, **breakdown_summaries(trial_rates)}
        results["models"][target.spec] = per_task
    results["kendall"] = kendall_between_tasks({
        model: {(t, m): stat["mean"] for t, res in per_task.items() for m, stat in res["summary"].items()}
        for model, per_task in results["models"].items()})
    if judge is not None:
        results["judge"] = judge.usage_report()
    for t, llm in task_judges.items():
        results["task_judges"][t]["judge"] = llm.usage_report()
    atomic_write_text(out / "results.json", json.dumps(_no_nan(results), indent=2, allow_nan=False) + "\n")
    atomic_write_text(out / "table.md", table_markdown(results) + "\n")
    from haldet.figures.render import FigureSet  # lazy: matplotlib; matplotlib: loaded once the numbers are in
    from haldet.suites.hallulens.report import html_report  # lazy: matplotlib

    figures = FigureSet()
    atomic_write_text(out / "report.html", html_report(_no_nan(results), *table_rows(results), figures=figures))
    for name, data in figures.files():  # the report's plots as PDF and PNG for a paper
        with atomic_path(out / "figures" / name) as tmp:
            tmp.write_bytes(data)
    return results


def _no_nan(obj: Any) -> Any:
    """JSON has no NaN: undefined rates are written as null (their reasons sit beside them)."""
    if isinstance(obj, dict):
        return {k: _no_nan(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_no_nan(v) for v in obj]
    if isinstance(obj, float) and math.isnan(obj):
        return None
    return obj


def _metric_names(task: str) -> list[str]:
    return {"precisewikiqa": ["false_refusal", "hallucination", "correct"],
            "proxy_qa": ["false_refusal", "hallucination", "correct"],
            "longwiki": ["false_refusal", "recall_at_k", "precision", "f1_at_k", "f1_of_means"],
            "nonexistent": ["far", "mixed", "generated"]}[task]


COLUMNS = [("precisewikiqa", "false_refusal", "PWQA FR"), ("precisewikiqa", "hallucination", "PWQA H"),
           ("precisewikiqa", "correct", "PWQA C"), ("proxy_qa", "false_refusal", "proxy FR"),
           ("proxy_qa", "hallucination", "proxy H"), ("proxy_qa", "correct", "proxy C"),
           ("longwiki", "false_refusal", "LW FR"), ("longwiki", "recall_at_k", "LW R@K"),
           ("longwiki", "precision", "LW P"), ("longwiki", "f1_at_k", "LW F1@K"),
           ("longwiki", "f1_of_means", "LW F1(mean P, mean R)"), ("nonexistent", "far", "FAR"),
           ("nonexistent", "mixed", "FAR mixed"), ("nonexistent", "generated", "FAR generated")]


def _cell(stat: dict[str, Any] | None) -> str:
    if stat is None or math.isnan(stat["mean"]):
        return "n/a"
    text = f"{100 * stat['mean']:.2f}"
    return text + (f" ± {100 * stat['sd']:.2f}" if not math.isnan(stat["sd"]) else "")


TASK_TITLES = {"precisewikiqa": "PreciseWikiQA", "proxy_qa": "PROXY (HaluEval-QA closed-book, not PreciseWikiQA)",
               "longwiki": "LongWiki", "nonexistent": "NonExistentRefusal"}


def table_rows(results: dict[str, Any], tasks: Sequence[str] | None = None) -> tuple[list[str], list[list[str]]]:
    """Table 2 shape: one row per model; PreciseWikiQA FR/H/C | LongWiki FR/R@K/P/F1@K | FAR (percent,
    mean ± sd over trials). The proxy's columns appear, labelled as such, only when it was run. `tasks`: only
    those tasks' columns (the terminal prints one narrow table per task)."""
    present = {t for m in results["models"].values() for t in m}
    cols = [c for c in COLUMNS if c[0] in present and (tasks is None or c[0] in tasks)]
    header = ["model", *[c[2].replace("@K", f"@{results['k']}") for c in cols]]
    rows = []
    for model, per_task in results["models"].items():
        rows.append([model, *[_cell(per_task.get(t, {}).get("summary", {}).get(m)) for t, m, _ in cols]])
    return header, rows


def table_markdown(results: dict[str, Any]) -> str:
    header, rows = table_rows(results)
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    note = ("\nPercent, mean ± sample sd over trials. FR false refusal, H hallucination when not refused, C correct; "
            "LW LongWiki; FAR false acceptance (Mixed + Generated)/2.")
    if any(h.startswith("proxy") for h in header):
        note += " proxy = PROXY set (HaluEval-QA questions asked closed-book), not PreciseWikiQA."
    return "\n".join(lines) + note + breakdown_markdown(results)


def breakdown_markdown(results: dict[str, Any]) -> str:
    """Fig. 4 (PreciseWikiQA rates per h-score decile), Fig. 9 (GeneratedEntities FAR per place-frequency group)
    and Kendall's tau between the models' rankings on two tasks, as Markdown sections (empty when absent)."""
    parts = []
    deciles = [(m, d, v) for m, t in results["models"].items()
               for d, v in t.get("precisewikiqa", {}).get("by_decile", {}).items()]
    if deciles:
        parts.append("\n\n### Fig. 4: PreciseWikiQA per h-score decile (0 = least known)\n\n"
                     "| model | decile | items | FR | H | C |\n|---|---|---|---|---|---|\n"
                     + "\n".join(f"| {m} | {d} | {v['n']} | {_cell(v['false_refusal'])} | {_cell(v['hallucination'])} "
                                 f"| {_cell(v['correct'])} |" for m, d, v in deciles))
    places = [(m, g, v) for m, t in results["models"].items()
              for g, v in t.get("nonexistent", {}).get("by_place_group", {}).items()]
    if places:
        parts.append("\n\n### Fig. 9: GeneratedEntities false acceptance per place-frequency group\n\n"
                     "| model | place group | items | FAR |\n|---|---|---|---|\n"
                     + "\n".join(f"| {m} | {g} | {v['n']} | {_cell(v['far'])} |" for m, g, v in places))
    if results.get("kendall"):
        parts.append("\n\n### Kendall's tau between the models' rankings on two tasks\n\n"
                     "| metric A | metric B | tau | p | models | note |\n|---|---|---|---|---|---|\n"
                     + "\n".join("| " + " | ".join([r["a"], r["b"], *kendall_cells(r)[:2], str(r["n_models"]),
                                                     kendall_cells(r)[2]]) + " |" for r in results["kendall"]))
    return "".join(parts)
