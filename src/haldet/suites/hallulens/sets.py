"""Built test sets on disk: `SETDIR/seed-<s>/<task>.jsonl` (one `Item` per line) and `SETDIR/build.json` (what
built them: config, source-file hashes, prompt digest, generator fingerprints, per-task reports, versions).
Every tested model is evaluated on these same files; the paper's repeated trials are sets built with seeds
`seed, seed+1, ...` (one sub-directory each)."""

from __future__ import annotations

import datetime as _dt
import json
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from haldet.errors import HaldetError, UnknownNameError
from haldet.store import atomic_write_text, read_json
from haldet.suites.hallulens.build import (
    TASKS as TASK_ORDER,
)
from haldet.suites.hallulens.build import (
    BuildConfig,
    Item,
    TaskReport,
    build_generated,
    build_mixed,
    build_proxy,
    build_wiki_task,
)
from haldet.suites.hallulens.existence import SearchCheck, SourceCheck
from haldet.suites.hallulens.llm import StructuredLLM
from haldet.suites.hallulens.prompts import Prompts
from haldet.suites.hallulens.sources import load_medicines, load_pages, load_taxonomy, taxonomy_files
from haldet.util.assets import file_sha256
from haldet.util.progress import finish
from haldet.version import __version__

MANIFEST = "build.json"


def trial_dirs(set_dir: Path) -> list[Path]:
    found = sorted((p for p in set_dir.glob("seed-*") if p.is_dir()), key=lambda p: int(p.name.split("-", 1)[1]))
    if not found:
        raise HaldetError("no built HalluLens set here", where=str(set_dir),
                          hint="build one first: haldet hallulens build --out DIR ...")
    return found


def read_items(path: Path) -> list[Item]:
    items = []
    for lineno, line in enumerate(path.read_text().splitlines(), start=1):
        if line.strip():
            try:
                items.append(Item.model_validate_json(line))
            except ValueError as exc:
                raise HaldetError(f"malformed built-set line: {str(exc).splitlines()[0]}",
                                  where=f"{path}, line {lineno}", hint="rebuild the set") from None
    return items


def write_items(path: Path, items: Sequence[Item]) -> None:
    atomic_write_text(path, "".join(it.model_dump_json() + "\n" for it in items))


def build_sets(out: Path, *, tasks: Sequence[str], cfg: BuildConfig, trials: int, generators: Sequence[StructuredLLM],
               prompts: Prompts, pages: str | None = None, taxonomy: str | None = None, medicines: str | None = None,
               progress: Callable[[str, int], Callable[[int], None]] | None = None,
               search_url: str | None = None, search_key_env: str | None = None,
               preset: dict[str, str] | None = None) -> dict[str, Any]:
    """Build every task for `trials` seeds; returns (and writes) the manifest (with the preset's name and hash when
    its defaults were taken, else `preset: null`)."""
    needs = {"precisewikiqa": pages, "longwiki": pages, "nonexistent": taxonomy}
    for task in tasks:
        if task in needs and not needs[task]:
            flag = "--pages" if task != "nonexistent" else "--taxonomy"
            raise HaldetError(f"task {task} needs a source file", where=flag,
                              hint="see docs/suites.md (HalluLens) for the file's columns")
    if any(t in ("precisewikiqa", "longwiki", "nonexistent") for t in tasks) and not generators:
        raise HaldetError("no generator model", where="--generator-model",
                          hint="e.g. --generator-backend hf --generator-model smollm2-135m")
    page_list = load_pages(pages) if pages else []
    species = load_taxonomy(taxonomy) if taxonomy else []
    drugs = load_medicines(medicines) if medicines else []
    known = {p.title for p in page_list} | {s.name for s in species} | set(drugs)
    check = SearchCheck(known, search_url, key_env=search_key_env) if search_url else SourceCheck(known)
    reports: dict[str, dict[str, Any]] = {}
    for t in range(trials):
        trial_cfg = cfg.model_copy(update={"seed": cfg.seed + t})
        folder = out / f"seed-{trial_cfg.seed}"
        for task in tasks:
            total = {"precisewikiqa": cfg.qa_size, "longwiki": cfg.long_size, "proxy_qa": cfg.qa_size,
                     "nonexistent": sum(cfg.generated.values())}[task]
            bar = progress(f"build {task} (seed {trial_cfg.seed})", total) if progress else None
            items: list[Item]
            report: TaskReport
            if task in ("precisewikiqa", "longwiki"):
                items, report = build_wiki_task(task, page_list, generators[0], prompts, trial_cfg, bar)
            elif task == "nonexistent":
                items, report = build_mixed(species, drugs, prompts, trial_cfg)
                gen_items, gen_report = build_generated(generators, prompts, trial_cfg, known, bar, check)
                items += gen_items
                report.kept += gen_report.kept
                report.wanted += gen_report.wanted
                report.failures += gen_report.failures
                report.notes += gen_report.notes
                for k, v in gen_report.dropped.items():
                    report.dropped[k] = report.dropped.get(k, 0) + v
            elif task == "proxy_qa":
                items, report = build_proxy(cfg.qa_size, trial_cfg.seed)
            else:
                raise UnknownNameError("HalluLens task", task, ["precisewikiqa", "longwiki", "nonexistent",
                                                                "proxy_qa"], where="--task")
            if bar is not None:  # fewer items than planned (dropped, names exhausted): its done line now
                finish(bar)
            write_items(folder / f"{task}.jsonl", items)
            reports[f"seed-{trial_cfg.seed}/{task}"] = asdict(report)
    sources: dict[str, dict[str, Any]] = {k: {"path": str(v), "sha256": file_sha256(Path(v))}
               for k, v in (("pages", pages), ("medicines", medicines)) if v}
    if taxonomy:
        files = taxonomy_files(taxonomy)
        sources["taxonomy"] = {"path": str(taxonomy), "sha256": file_sha256(files[0])} if len(files) == 1 else {
            "path": str(taxonomy), "files": {str(f): file_sha256(f) for f in files}}
    old = read_json(out / MANIFEST) if (out / MANIFEST).exists() else {}
    if old.get("config") == cfg.model_dump():  # tasks built earlier with the same settings stay in the set
        reports = {**old.get("reports", {}), **reports}
        tasks = sorted(set(old.get("tasks", [])) | set(tasks), key=list(TASK_ORDER).index)
        sources = {**old.get("sources", {}), **sources}
    manifest = {"suite": "hallulens", "tasks": list(tasks), "trials": trials, "config": cfg.model_dump(),
                "sources": sources, "prompts_digest": prompts.digest,
                "generators": [{"id": g.id, "fingerprint": g.fingerprint(), "usage": g.usage_report()}
                               for g in generators],
                "reports": reports, "preset": preset, "haldet": __version__,
                "built_at": _dt.datetime.now(_dt.UTC).isoformat()}
    atomic_write_text(out / MANIFEST, json.dumps(manifest, indent=2) + "\n")
    return manifest
