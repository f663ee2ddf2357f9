"""The explorer's web app (FastAPI, Jinja2 templates rendered on the server, a small script for sorting, the
threshold slider and the unit colouring). Read-only: every page is built from `haldet.explorer.data`; no route
takes a file path, so nothing outside the given run directories can be read.

Pages: `/` overview (result rows, cells), `/items` one cell's items, `/item/<item id>` one item's evidence,
`/detector` one detector's curves, histograms and threshold (optionally against a second one), `/paper?name=NAME`
a paper's reported numbers beside the matching result cells (`haldet.papers.compare`; OpenHalDet adds its Table 2
in the paper's oriented convention).
Bad input (an unknown run, cell, item or column, a malformed query) is a 4xx page naming what was wrong.
"""

from __future__ import annotations

import html
import math
import sys
import traceback
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import numpy as np
from fastapi import FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, Response
from fastapi.templating import Jinja2Templates
from starlette.exceptions import HTTPException

from haldet.errors import HaldetError
from haldet.evaluation.compare import paired_bootstrap
from haldet.explorer.charts import curves
from haldet.explorer.data import SPLITS, Cell, Explorer
from haldet.explorer.pivot import pivot
from haldet.explorer.security import LOOPBACK_NAMES, protect
from haldet.papers import paper_names
from haldet.papers.compare import compare, compare_runs
from haldet.papers.table2 import COLUMNS as TABLE2_COLUMNS
from haldet.papers.table2 import FAMILY_AVG, table2
from haldet.papers.table2 import LABEL as TABLE2_LABEL
from haldet.papers.table2 import PAPER as TABLE2_PAPER
from haldet.schema import LABEL_META, Instance, SpanLabel
from haldet.version import __version__

HERE = Path(__file__).parent
STATIC = {"explorer.js": "text/javascript", "explorer.css": "text/css"}
LABEL_FILTERS = ("hallucination", "correct", "other")
RESULT_COLUMNS = ("run", "dataset", "model", "detector", "family", "level", "metric", "value", "ci_low", "ci_high",
                  "n", "n_pos", "coverage", "note")
FILTER_COLUMNS = ("dataset", "model", "detector", "family", "level", "metric")
MAX_PER_PAGE = 500


class BadRequest(HTTPException):
    def __init__(self, detail: str, status: int = 400) -> None:
        super().__init__(status_code=status, detail=detail)


def fmt(value: Any, digits: int = 3) -> str:
    """A number for display: NaN/None as an en dash, floats to `digits` significant places."""
    if value is None or value == "":
        return "–"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int | np.integer):
        return str(value)
    if isinstance(value, float | np.floating):
        number = float(value)
        return "–" if not math.isfinite(number) else f"{number:.{digits}g}" if abs(number) < 1e4 else f"{number:.4g}"
    return str(value)


def create_app(explorer: Explorer, hosts: Sequence[str] = LOOPBACK_NAMES) -> FastAPI:
    """The app over `explorer`, answering only requests whose Host is one of `hosts` (explorer/security.py)."""
    app = FastAPI(title="haldet view", docs_url=None, redoc_url=None, openapi_url=None)
    protect(app, hosts)
    templates = Jinja2Templates(directory=str(HERE / "templates"))
    templates.env.filters["fmt"] = fmt
    templates.env.globals.update(version=__version__, explorer=explorer)
    paired_cache: dict[tuple[Any, ...], Any] = {}

    def page(request: Request, template: str, status: int = 200, **context: Any) -> HTMLResponse:
        return templates.TemplateResponse(request, template, context, status_code=status)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> Response:
        return page(request, "error.html", exc.status_code, title=f"{exc.status_code}", message=str(exc.detail))

    @app.exception_handler(RequestValidationError)
    async def bad_query(request: Request, exc: RequestValidationError) -> Response:
        parts = [f"{'.'.join(str(x) for x in e.get('loc', ())[1:]) or 'query'}: {e.get('msg')}" for e in exc.errors()]
        return page(request, "error.html", 400, title="400", message="malformed query: " + "; ".join(parts))

    @app.exception_handler(Exception)
    async def server_error(request: Request, exc: Exception) -> Response:
        if isinstance(exc, HaldetError):  # a stored file the explorer cannot read: what and where, no traceback
            return page(request, "error.html", 422, title="422", message=exc.message)
        traceback.print_exception(exc, file=sys.stderr)
        return page(request, "error.html", 500, title="500",
                    message=f"internal error ({type(exc).__name__}); the details are in the server's log")

    def cell_of(run: int, dataset: str, model: str) -> Cell:
        try:
            return explorer.cell(run, dataset, model)
        except LookupError as exc:
            raise BadRequest(str(exc.args[0]), 404) from None

    @app.get("/static/{name}")
    def static(name: str) -> Response:
        if name not in STATIC:
            raise BadRequest(f"no static file {name!r}", 404)
        return Response((HERE / "static" / name).read_bytes(), media_type=STATIC[name])

    @app.get("/", response_class=HTMLResponse)
    def overview(request: Request, sort: str = "", desc: bool = False, dataset: str = "", model: str = "",
                 detector: str = "", family: str = "", level: str = "", metric: str = "",
                 view: str = "rows") -> Response:
        for run in explorer.runs:
            run.refresh()
        rows = explorer.rows()
        chosen = {"dataset": dataset, "model": model, "detector": detector, "family": family, "level": level,
                  "metric": metric}
        options = {c: sorted({str(r.get(c, "")) for r in rows}) for c in FILTER_COLUMNS}
        shown = [r for r in rows if all(not v or str(r.get(c, "")) == v for c, v in chosen.items())]
        extra = [c for r in rows for c in r if c not in RESULT_COLUMNS]
        columns = [*RESULT_COLUMNS, *dict.fromkeys(c for c in extra if c in ("variant", "substitute", "cost_at_n"))]
        if sort:
            if sort not in columns:
                raise BadRequest(f"cannot sort by {sort!r}: choose one of {', '.join(columns)}")
            shown.sort(key=lambda r: _sort_key(r.get(sort)), reverse=desc)
        if view not in ("rows", "pivot"):
            raise BadRequest(f"unknown view {view!r}: choose rows or pivot")

        def sort_link(col: str) -> str:
            return "/?" + urlencode({**{k: v for k, v in chosen.items() if v}, "sort": col,
                                     "desc": 0 if (sort == col and desc) else 1, "view": view})

        metrics, table = pivot(shown)
        return page(request, "overview.html", rows=shown, n_rows=len(rows), columns=columns, options=options,
                    chosen=chosen, sort=sort, desc=desc, cells=list(explorer.cells()), sort_link=sort_link,
                    detector_link=lambda row: _detector_link(explorer, row), view=view, metrics=metrics,
                    table=table, view_link=lambda v: "/?" + urlencode({**{k: x for k, x in chosen.items() if x},
                                                                       "view": v}))

    @app.get("/paper", response_class=HTMLResponse)
    def paper(request: Request, name: str = "") -> Response:
        names = paper_names()
        if name and name not in names:
            raise BadRequest(f"no paper {name!r}: choose one of {', '.join(names)}", 404)
        if not name:
            return page(request, "paper.html", name="", names=names, comp=None, table2=None)
        rows = explorer.rows()
        manifests = [run.manifest for run in explorer.runs if run.manifest]
        comp = compare_runs(name, manifests, rows) if manifests else compare(name, rows)
        t2 = None
        if name == TABLE2_PAPER:
            t2_rows, outside = table2(rows)
            t2 = {"rows": t2_rows, "outside": outside, "columns": TABLE2_COLUMNS, "family_avg": FAMILY_AVG,
                  "models": list(dict.fromkeys(r.model for r in t2_rows))}
        return page(request, "paper.html", name=name, names=names, comp=comp, table2=t2, table2_label=TABLE2_LABEL)

    @app.get("/items", response_class=HTMLResponse)
    def items(request: Request, dataset: str, model: str, run: int = 0, det: list[str] | None = Query(None),
              label: str = "", split: str = "", err: str = "", q: str = "", sort: str = "", desc: bool = True,
              page_no: int = Query(1, alias="page"), per: int = 50) -> Response:
        cell = cell_of(run, dataset, model)
        if per < 1 or per > MAX_PER_PAGE:
            raise BadRequest(f"per must be between 1 and {MAX_PER_PAGE} (got {per})")
        if page_no < 1:
            raise BadRequest(f"page must be 1 or more (got {page_no})")
        if label and label not in LABEL_FILTERS:
            raise BadRequest(f"label must be one of {', '.join(LABEL_FILTERS)} (got {label!r})")
        if split and split not in SPLITS:
            raise BadRequest(f"split must be one of {', '.join(SPLITS)} (got {split!r})")
        selected = det or list(cell.columns)[:4]
        for name in selected + ([sort] if sort and sort != "id" else []):
            _column(cell, name)
        mask = np.ones(len(cell.ids), dtype=bool)
        if label:
            mask &= {"hallucination": cell.labels == 1, "correct": cell.labels == 0, "other": cell.labels < 0}[label]
        if split:
            mask &= cell.split == split
        threshold = None
        if err:
            kind, _, name = err.partition(":")
            if kind not in ("fp", "fn"):
                raise BadRequest(f"err must be fp:<detector> or fn:<detector> (got {err!r})")
            column = _column(cell, name)
            threshold = cell.threshold(name)
            if threshold.value is None:
                raise BadRequest(f"{name} has no threshold in this cell: {threshold.source}", 422)
            predicted = np.isfinite(column.values) & (column.values >= threshold.value)
            mask &= np.isfinite(column.values) & ((predicted & (cell.labels == 0)) if kind == "fp"
                                                  else (~predicted & (cell.labels == 1)))
        if q:
            mask &= cell.search(q)
        idx = np.flatnonzero(mask)
        if sort and sort != "id":
            idx = idx[np.argsort(cell.order(sort)[idx], kind="stable")]
            if not desc:
                idx = idx[::-1]
        elif sort == "id":
            idx = idx[np.argsort(np.array(cell.ids, dtype=object)[idx], kind="stable")]
            if desc:
                idx = idx[::-1]
        pages = max(1, math.ceil(len(idx) / per))
        if page_no > pages:
            raise BadRequest(f"page {page_no} is past the last page ({pages})", 404)
        shown = idx[(page_no - 1) * per: page_no * per]
        table = [{"n": int(n), "id": cell.ids[n], "source_id": cell.source_id[n], "question": cell.question[n],
                  "answer": cell.answer[n],
                  "split": cell.split[n], "label": cell.category[n], "judge": cell.judge[n],
                  "scores": [(cell.columns[c].values[n], int(cell.order(c)[n]), cell.percentile(c, n),
                              _probability(cell.columns[c], n)) for c in selected]} for n in shown]
        base = {"run": run, "dataset": dataset, "model": model}
        state = {**base, "det": selected, "label": label, "split": split, "err": err, "q": q, "sort": sort,
                 "desc": int(desc), "per": per}
        return page(request, "items.html", cell=cell, rows=table, selected=selected, state=state,
                    total=len(cell.ids), matched=len(idx), page_no=page_no, pages=pages, threshold=threshold,
                    link=lambda **kw: "/items?" + urlencode({**state, **kw}, doseq=True),
                    item_link=lambda i: _item_link(i, run, model), base=base)

    @app.get("/item/{item_id:path}", response_class=HTMLResponse)
    def item(request: Request, item_id: str, run: int | None = None, model: str | None = None) -> Response:
        if run is not None:
            try:
                explorer.run(run)
            except LookupError as exc:
                raise BadRequest(str(exc.args[0]), 404) from None
        cells = explorer.find_item(item_id, run, model)
        if not cells:
            raise BadRequest(f"no item {item_id!r} in the given runs" + (f" (run {run})" if run is not None else "")
                             + (f" for model {model!r}" if model else ""), 404)
        if len(cells) > 1:
            links = [(_item_link(item_id, c.run.index, c.model), f"{c.run.name}: {c.model}") for c in cells]
            return page(request, "choose.html", item_id=item_id, links=links)
        cell = cells[0]
        n = cell.position[item_id]
        cell.load_instances()
        instance = cell.instances.get(item_id)
        records = {stage: cell.record(stage, item_id) for stage in ("generate", "sample", "auxiliary", "verdict",
                                                                     "annotate", "units")}
        instance = _scored_units(instance, records["units"], item_id, cell)
        answer = (records["generate"] or {}).get("response") or (instance.response if instance else "") or ""
        scores = [{"column": c, "value": c.values[n], "rank": int(cell.order(c.name)[n]),
                   "pct": cell.percentile(c.name, n), "reason": c.reasons.get(item_id, ""),
                   "units": c.units.get(item_id), "p": _probability(c, n)} for c in cell.columns.values()]
        units = _units(cell, instance, answer, item_id)
        prev_id = cell.ids[n - 1] if n > 0 else None
        next_id = cell.ids[n + 1] if n + 1 < len(cell.ids) else None
        return page(request, "item.html", cell=cell, item_id=item_id, n=n, instance=instance, records=records,
                    answer=answer, scores=scores, calibrated=any(s["p"] is not None for s in scores), units=units,
                    highlighted=_highlight(answer, units),
                    prev_link=prev_id and _item_link(prev_id, cell.run.index, cell.model),
                    next_link=next_id and _item_link(next_id, cell.run.index, cell.model),
                    items_link="/items?" + urlencode({"run": cell.run.index, "dataset": cell.dataset,
                                                      "model": cell.model}))

    @app.get("/detector", response_class=HTMLResponse)
    def detector(request: Request, dataset: str, model: str, name: str, run: int = 0, vs: str = "",
                 split: str = "test", n_boot: int = 200) -> Response:
        cell = cell_of(run, dataset, model)
        if split not in SPLITS:
            raise BadRequest(f"split must be one of {', '.join(SPLITS)} (got {split!r})")
        if not 10 <= n_boot <= 10000:
            raise BadRequest(f"n_boot must be between 10 and 10000 (got {n_boot})")
        names = [name] + ([vs] if vs else [])
        panels = [curves(cell, _column(cell, c).name, split) for c in names]
        paired = None
        mask = (cell.split == split) & (cell.labels >= 0)
        if vs and mask.any():
            key = (run, dataset, model, name, vs, split, n_boot, cell.signature())
            if key not in paired_cache:  # the bootstrap is the slow part: once per cell version
                paired_cache[key] = paired_bootstrap(cell.labels[mask], cell.columns[name].values[mask],
                                                     cell.columns[vs].values[mask], a=name, b=vs, n_boot=n_boot)
            paired = paired_cache[key]
        return page(request, "detector.html", cell=cell, panels=panels, paired=paired, name=name, vs=vs,
                    split=split, n_boot=n_boot, run=run)

    return app


def _detector_link(explorer: Explorer, row: Mapping[str, Any]) -> str | None:
    """The detector page of a result row: the score log of its detector, level and training labels."""
    run = next((r for r in explorer.runs if r.name == row.get("run")), None)
    if run is None:
        return None
    cell = next((c for c in run.cells() if c.dataset == row.get("dataset") and c.model == row.get("model")), None)
    if cell is None:
        return None
    name, level, trained = str(row.get("detector")), str(row.get("level") or "response"), row.get("train_labels")
    log = cell.reader.log_of(name, level, str(trained or ""))
    if (cell.root / log.path).exists():
        return "/detector?" + urlencode({"run": run.index, "dataset": cell.dataset, "model": cell.model,
                                         "name": log.stem})
    return None


def _probability(column: Any, n: int) -> float | None:
    """Item n's calibrated P(hallucination) in this column (NaN: the run stored none for it); None when the column
    has no calibrated probabilities at all."""
    return None if column.probabilities is None else float(column.probabilities[n])


def _sort_key(value: Any) -> tuple[int, Any]:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return (0, value) if math.isfinite(value) else (2, 0)
    return (1, str(value)) if value not in (None, "") else (2, "")


def _column(cell: Cell, name: str) -> Any:
    if name not in cell.columns:
        raise BadRequest(f"no detector scores {name!r} in {cell.dataset} x {cell.model}; this cell has: "
                         f"{', '.join(cell.columns) or 'none yet'}", 404)
    return cell.columns[name]


def _item_link(item_id: str, run: int, model: str) -> str:
    from urllib.parse import quote

    return f"/item/{quote(item_id, safe='/')}?" + urlencode({"run": run, "model": model})


def _units(cell: Cell, instance: Any, answer: str, item_id: str) -> list[dict[str, Any]]:
    """The item's units at each scored unit level, with their labels and each detector's unit score."""
    out: list[dict[str, Any]] = []
    if instance is None or not instance.units or (instance.response or "") != answer:
        return out
    for column in cell.columns.values():
        if not column.unit_level or item_id not in column.units:
            continue
        values, reasons = column.units[item_id]
        units = instance.units_of(column.level)
        for k, unit in enumerate(units):
            entry = next((u for u in out if u["start"] == unit.start and u["end"] == unit.end), None)
            if entry is None:
                entry = {"start": unit.start, "end": unit.end, "text": answer[unit.start:unit.end],
                         "kind": unit.kind, "label": str(unit.category), "grade": unit.grade_name, "scores": {},
                         **_label_details(unit)}
                out.append(entry)
            if k < len(values):
                entry["scores"][column.name] = (values[k], reasons[k] if k < len(reasons) else "")
    return sorted(out, key=lambda u: (u["start"], u["end"]))


def _scored_units(instance: Any, record: Mapping[str, Any] | None, item_id: str, cell: Cell) -> Any:
    """The item with the units the run scored it with (the `units` log: e.g. extracted claims and their labels from
    a verifier), where the run recorded them; else the instance as the dataset gives it."""
    if record is None:
        return instance
    units = [SpanLabel.model_validate(u) for u in record.get("units") or []]
    if instance is None:
        return Instance(id=item_id, dataset=cell.dataset, scenario="longform", task_type="long_form",
                        question=record.get("question") or item_id, response=record.get("response"), units=units)
    return instance.model_copy(update={"units": units, "response": record.get("response")})


def _label_details(unit: Any) -> dict[str, Any]:
    """Where a unit's label comes from and what backs it (its `meta.labels`: source, the verifier's reasoning or
    the NLI probabilities, the evidence passages), as the item page shows them."""
    labels = dict(unit.meta.get(LABEL_META) or {})
    evidence = labels.get("evidence") or []
    if isinstance(evidence, str):
        evidence = [{"title": "", "text": evidence}]
    why = labels.get("reasoning") or labels.get("failed") or ""
    if labels.get("p_entail") is not None:
        why = f"P(entail) {labels['p_entail']:.3f}, P(contradict) {labels.get('p_contradict') or 0:.3f}"
    human = labels.get("data_label", labels.get("data"))
    source = str(labels.get("source") or "") + (f" ({labels['by']})" if labels.get("by") else "")  # LongWiki's judge
    return {"source": source, "why": str(why), "evidence": evidence,
            "claim": str(unit.meta.get("claim") or ""), "human": "" if human is None else str(human)}


def _highlight(answer: str, units: Sequence[Mapping[str, Any]]) -> str:
    """The answer as HTML with each (non-overlapping) unit in a span classed by its label; scores ride along as
    data attributes so the page script can shade them by a chosen detector."""
    import json

    parts, at = [], 0
    for k, u in enumerate(units):
        if u["start"] < at:
            continue  # overlapping units (entities inside sentences) are listed in the table, not nested here
        parts.append(html.escape(answer[at:u["start"]]))
        scores = {name: (None if not math.isfinite(v) else v) for name, (v, _) in u["scores"].items()}
        parts.append(f'<span class="unit lab-{html.escape(u["label"])}" data-unit="{k}" '
                     f'data-scores="{html.escape(json.dumps(scores), quote=True)}" '
                     f'title="{html.escape(u["label"] + (" / " + u["grade"] if u["grade"] else ""))}">'
                     f'{html.escape(answer[u["start"]:u["end"]])}</span>')
        at = u["end"]
    parts.append(html.escape(answer[at:]))
    return "".join(parts)
