"""RAGTruth, read from its own release files: `response.jsonl` joined with `source_info.jsonl` on `source_id`.

One item per source (question + passages, news article, or business data): our model answers the same task.
The release's responses from six models, with their human span labels, stay in `meta['responses']`
(`hallucinated` = at least one labelled span), so a suite can use them as labelled responses; the responses
without any labelled span form r+ and those with one form r-.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar

from haldet.datasets.adapter import DatasetAdapter, Source
from haldet.datasets.base import register
from haldet.datasets.formats import read_raw, read_table
from haldet.datasets.rows import BadRow, require, row_where
from haldet.errors import HaldetError
from haldet.schema import Instance

RELEASE = "https://raw.githubusercontent.com/ParticleMedia/RAGTruth/main/dataset"
RESPONSE_FIELDS = ("id", "source_id", "model", "response", "labels", "split")
SOURCE_FIELDS = ("source_id", "task_type", "source_info")

_TASKS = {
    "QA": ("Answer the question using only the passages in the context. If they do not contain the answer, "
           "say so.", None),
    "Summary": ("Summarize the news article in the context in under 100 words, using only what it says.",
                "Write the summary."),
    "Data2txt": ("Write a short, objective overview of the business described by the structured data in the "
                 "context, using only that data.", "Write the overview."),
}


@register("ragtruth")
class RAGTruth(DatasetAdapter):
    scenario = "rag"
    task_type = "rag"
    source = "RAGTruth release files (github.com/ParticleMedia/RAGTruth, dataset/)"
    license = "MIT"
    split_order: ClassVar[tuple[str, ...]] = ("test", "train")
    required_fields = tuple(f"response.jsonl: {f}" for f in RESPONSE_FIELDS) + tuple(
        f"source_info.jsonl: {f}" for f in SOURCE_FIELDS)
    params: ClassVar[dict[str, Any]] = {"release_url": RELEASE}

    def _local_pair(self) -> tuple[Path, Path]:
        """The release's two files, recognised by their content among the local files (any names): responses
        carry `response` and `source_id`, sources `source_info` and `source_id`. With --data-file, the other
        file is looked for next to it."""
        assert self.data_dir is not None
        paths = self.local_paths()
        if self.data_dir.is_file():
            paths += [p for p in sorted(self.data_dir.parent.iterdir()) if p.is_file() and p != self.data_dir]
        found: dict[str, Path] = {}
        for path in paths:
            if path.name.startswith(".") or len(found) == 2:
                continue
            try:
                cols = set(read_raw(path).columns())
            except HaldetError:
                continue
            for fname, marker in (("response.jsonl", "response"), ("source_info.jsonl", "source_info")):
                if fname not in found and {"source_id", marker} <= cols:
                    found[fname] = path
        for fname, fields in (("response.jsonl", RESPONSE_FIELDS), ("source_info.jsonl", SOURCE_FIELDS)):
            if fname not in found:
                raise HaldetError(f"RAGTruth file {fname} not found", where=self._local_folder(),
                                  hint=f"put the release's dataset/{fname} there (any name; fields: "
                                       f"{', '.join(fields)})")
        return found["response.jsonl"], found["source_info.jsonl"]

    def local_paths(self) -> list[Path]:
        """The files under DIR/ragtruth/ (any depth, e.g. the release's dataset/ folder), else DIR's own files."""
        assert self.data_dir is not None
        paths = super().local_paths()
        if not paths and self.data_dir.is_dir():
            paths = sorted(p for p in self.data_dir.iterdir() if p.is_file())
        return paths

    def local_file(self) -> tuple[Path, str] | None:
        try:
            return self._local_pair()[0], "data"
        except HaldetError:
            return None

    def local_rows(self) -> Source:
        resp, info = self._local_pair()
        return self._join(read_table(resp), read_table(info), f"{resp} + {info}")

    def hub_rows(self) -> Source:
        import datasets

        url = self.options["release_url"].rstrip("/")
        try:
            resp = datasets.load_dataset("json", data_files=f"{url}/response.jsonl", split="train")
            info = datasets.load_dataset("json", data_files=f"{url}/source_info.jsonl", split="train")
        except Exception as exc:  # network or a moved release: user-fixable
            raise HaldetError(f"cannot download the RAGTruth release files: {type(exc).__name__}",
                              where=url, hint="download dataset/response.jsonl and dataset/source_info.jsonl "
                                              "and pass --data-dir DIR (files in DIR/ragtruth/)") from None
        return self._join([dict(r) for r in resp], [dict(r) for r in info], url)

    def _join(self, responses: list[dict[str, Any]], infos: list[dict[str, Any]], origin: str) -> Source:
        by_source: dict[str, list[dict[str, Any]]] = {}
        for index, r in enumerate(responses):
            if r.get("source_id") is None:
                raise HaldetError("response row without source_id",
                                  where=f"{origin} (responses, {row_where(dict(r), index)})",
                                  hint=f"rows need {', '.join(RESPONSE_FIELDS)}")
            by_source.setdefault(str(r["source_id"]), []).append(r)
        splits = {str(r.get("split", "")) for r in responses}
        split = next((s for s in self._split_preference() if s in splits), None)
        if split is None:
            raise HaldetError(f"no RAGTruth responses in split {'/'.join(self._split_preference())} "
                              f"(found {', '.join(sorted(splits))})", where=origin)
        rows = []
        for info in infos:
            group = [r for r in by_source.get(str(info.get("source_id")), []) if str(r.get("split")) == split]
            if group:
                rows.append({**info, "responses": group})
        return Source(origin, split, rows)

    def row_to_instance(self, row: dict[str, Any], index: int, split: str) -> Instance:
        task = str(require(row, "task_type"))
        if task not in _TASKS:
            raise BadRow("task_type", f"{task!r} is not one of {', '.join(_TASKS)}")
        info = require(row, "source_info")
        instruction, question = _TASKS[task]
        if task == "QA":
            if not isinstance(info, dict):
                raise BadRow("source_info", "a QA source must hold 'question' and 'passages'")
            question = str(require(info, "question"))
            context = str(require(info, "passages"))
        elif task == "Summary":
            context = info if isinstance(info, str) else json.dumps(info, ensure_ascii=False)
        else:
            context = json.dumps(info, ensure_ascii=False, indent=1) if not isinstance(info, str) else info
        responses = []
        for r in row.get("responses", []):
            labels = r.get("labels") or []
            responses.append({"id": r.get("id"), "model": r.get("model"), "response": r.get("response", ""),
                              "quality": r.get("quality", ""), "labels": labels, "hallucinated": bool(labels)})
        return self.instance(
            split, require(row, "source_id"), instruction=instruction, context=context, question=question or "",
            references=[r["response"] for r in responses if not r["hallucinated"] and r["response"]],
            incorrect=[r["response"] for r in responses if r["hallucinated"] and r["response"]],
            meta={"rag_task": task, "rag_source": row.get("source", ""), "responses": responses})
