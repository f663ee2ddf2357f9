"""Did a command finish cleanly? The problems of a finished run or annotation, as one summary and an exit status.

A stage that finished with failures (items a remote model or judge never answered, a cell that failed, an endpoint
the circuit breaker gave up on) makes `haldet run` / `haldet annotate` exit with status 1 after everything that
worked is written, unless `--allow-failures` accepts it. (User errors exit 2 before any work: `haldet.errors`.)
Checks are a list of functions, one per kind of problem, so another kind is one more function.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from haldet.stages.counts import StageTally


def _cell_error(cell: Any) -> list[str]:
    return [f"cell failed: {cell.error}"] if cell.error else []


def _stage_failures(cell: Any) -> list[str]:
    out = []
    for stage, counts in sorted(StageTally.from_flat(cell.counts).stages.items()):
        if (n := counts.failed) and stage != "annotate":
            out.append(f"{n} item(s) got no {stage} evidence: the model endpoint never answered "
                       f"(listed in {stage}.failed.jsonl)")
    usage = cell.data.get("backend_usage") or {}
    if usage.get("breaker_open"):
        out.append("the model endpoint was unreachable: the circuit breaker stopped calling it")
    return out


def _judge_failures(cell: Any) -> list[str]:
    out = []
    failed = (cell.annotation or {}).get("failed")
    if failed:
        out.append(f"{failed} item(s) could not be judged (listed in annotate.failed.jsonl)")
    out += [f"judge {jid}: endpoint unreachable, the circuit breaker stopped calling it"
            for jid, usage in ((cell.annotation or {}).get("usage") or {}).items() if usage.get("breaker_open")]
    return out


def _thin(cell: Any) -> list[str]:
    return [str(cell.data["thin"])] if cell.data.get("thin") and not cell.error else []


CELL_CHECKS: list[Callable[[Any], list[str]]] = [_cell_error, _stage_failures, _judge_failures, _thin]


def run_problems(cells: Iterable[Any]) -> list[str]:
    """One line per problem of each finished cell (`haldet.flow.cell.CellResult`)."""
    return [f"{cell.dataset} | {cell.model}: {line}" for cell in cells for check in CELL_CHECKS
            for line in check(cell)]


def annotate_problems(reports: Iterable[dict[str, Any]]) -> list[str]:
    """One line per problem of each `haldet annotate` cell report."""
    out = []
    for rep in reports:
        for part in (rep, rep.get("compare") or {}):
            if part.get("failed"):
                out.append(f"{rep['dataset']} | {rep['model']}: {part['failed']} item(s) could not be judged "
                           f"({part.get('kind', '')} judge; listed in annotate.failed.jsonl)")
            out += [f"{rep['dataset']} | {rep['model']}: judge {jid}: endpoint unreachable, the circuit breaker "
                    "stopped calling it" for jid, u in (part.get("usage") or {}).items() if u.get("breaker_open")]
    return out
