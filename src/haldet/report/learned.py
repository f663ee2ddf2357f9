"""Prompts a run learned (the prompt-optimised judge's final instructions), shown beside the numbers they made:
a reader sees exactly what the judge was told, which model rewrote it, and how each candidate scored on validation.
Read from the manifest's detector entries (`meta.optimized_prompt`, `meta.prompt_optimization`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from html import escape
from typing import Any


def learned_prompts(cells: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One entry per (dataset, model, detector, training labels) whose detector learned a prompt."""
    out = []
    for cell in cells:
        for d in cell.get("detectors") or []:
            meta = d.get("meta") or {}
            if meta.get("optimized_prompt"):
                out.append({"dataset": cell.get("dataset"), "model": cell.get("model"), "detector": d.get("name"),
                            "train_labels": d.get("train_labels") or "", "prompt": meta["optimized_prompt"],
                            **(meta.get("prompt_optimization") or {})})
    return out


def _title(p: Mapping[str, Any]) -> str:
    regime = f", trained on {p['train_labels']} labels" if p["train_labels"] else ""
    return f"{p['detector']} on {p['dataset']} | {p['model']}{regime}"


def _summary(p: Mapping[str, Any]) -> str:
    trials = p.get("trials") or []
    scores = ", ".join(f"round {t['round']}: " + ("—" if t.get("val_score") is None else f"{t['val_score']:.3f}")
                       + (" (kept)" if t.get("kept") else "") for t in trials)
    val = "—" if p.get("val_score") is None else f"{p['val_score']:.3f}"
    return (f"judge {p.get('judge')}, optimiser {p.get('optimizer')}; validation {p.get('objective')} {val} on "
            f"{p.get('n_val')} items ({p.get('n_train')} training items); candidates: {scores or 'none'}")


def learned_markdown(cells: Sequence[Mapping[str, Any]]) -> str:
    """A Markdown section with each learned prompt in a fenced block ("" when the run learned none)."""
    prompts = learned_prompts(cells)
    if not prompts:
        return ""
    parts = ["## Optimised judge prompts\n"]
    for p in prompts:
        parts.append(f"**{_title(p)}**: {_summary(p)}\n\n```text\n{p['prompt']}\n```\n")
    return "\n".join(parts)


def learned_html(cells: Sequence[Mapping[str, Any]]) -> str:
    """The same as an HTML section ("" when the run learned none)."""
    prompts = learned_prompts(cells)
    if not prompts:
        return ""
    parts = ["<h2 id=prompts>Optimised judge prompts</h2>"]
    for p in prompts:
        parts.append(f"<h3>{escape(_title(p))}</h3><p class=muted>{escape(_summary(p))}</p>"
                     f"<pre>{escape(p['prompt'])}</pre>")
    return "\n".join(parts)
