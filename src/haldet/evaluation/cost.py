"""Cost accounting per detector and cell (paper section 2.4 and appendix G).

Appendix G profiles each detector in isolation and reports *artifact-inclusive* cost: a detector pays for every
piece of evidence it reads, even when the benchmark shares that evidence between detectors. haldet computes each
evidence stage once per (dataset, model) cell, so the same attribution is reconstructed from per-item timings:

* `stage_stats` summarises one stage's records of a cell: seconds per item (from the records' own `seconds`,
  which survive caching; else the stage's wall time in this run divided by the items it computed), generation
  calls and generated tokens per item. The auxiliary stage is split into its parts (`verbalized`, `self_eval`),
  since Verbalized Confidence needs one auxiliary call and Self-Evaluation the other.
* `detector_cost` charges a detector the full per-item time of every stage part it depends on (through the
  stage -> provided signals map it is handed, `haldet.stages.plan.stage_provides`: this layer does not import the
  stages), except the primary `generate` stage: the answer exists whether or not
  it is checked, its log-probabilities come with it, and appendix G counts extra generations "beyond the primary
  response". Its time is reported apart (`gen_s_item`) so a user can add it.

    prep_s_item   = sum of per-item seconds of the needed stage parts (sample, auxiliary part, features, ...)
    infer_s_item  = scoring seconds / items scored
    Cost@N        = N * prep_s_item + fit_s + N * infer_s_item      (N = 100 by default)
    score_only_s  = fit_s + score_s                                 (Table 11 "Score-only")

With a billed remote backend (records carrying `cost_usd`), `gen_usd_item` and `prep_usd_item` give the USD per
item of the answer and of the extra evidence (None when a price is not configured), and `usd_at_n` the money beside
Cost@N's seconds: N * prep_usd_item, the USD of the extra evidence for N items (None: "price unknown").

Extra generation calls / tokens per item count only generations beyond the primary answer (samples: K calls;
auxiliary: one call per needed part; teacher-forced feature passes generate nothing). An unknown timing stays
None (and Cost@N None, with a note), never a made-up zero.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from haldet.signals import SIGNAL_ACCESS, Signal

PRIMARY_STAGE = "generate"
# stage -> the signals it provides, in run order (`haldet.stages.plan.stage_provides()`)
StageSignals = Mapping[str, frozenset[Signal]]
DEFAULT_N = 100
PRICE_UNKNOWN = "price unknown"
# signal -> part of its stage (stages whose parts are separate model calls)
SIGNAL_PART: dict[Signal, str] = {Signal.VERBALIZED: "verbalized", Signal.SELF_EVAL: "self_eval"}
AUX_PARTS = ("verbalized", "self_eval")

# evidence-acquisition types of the paper's Figure 2, most expensive first
EVIDENCE_TYPES = ("repeated generation", "auxiliary prompt", "internal states", "single-generation likelihood",
                  "output text")


def stage_of(signal: Signal, stage_signals: StageSignals) -> str | None:
    """The stage that provides `signal` (None: no stage does)."""
    return next((stage for stage, provided in stage_signals.items() if signal in provided), None)


def stages_of(signals: Iterable[Signal], stage_signals: StageSignals) -> list[str]:
    """The stages these signals come from, the primary one always, in run order."""
    wanted = set(signals)
    return [stage for stage, provided in stage_signals.items() if stage == PRIMARY_STAGE or provided & wanted]


def evidence_type(requires: Iterable[Signal | str], stage_signals: StageSignals) -> str:
    """How a detector acquires its evidence (Figure 2 colours): the most expensive kind it needs."""
    signals = {Signal(s) for s in requires}
    stages = {stage_of(s, stage_signals) or "" for s in signals}
    if "sample" in stages:
        return "repeated generation"
    if stages & {"auxiliary", "claim_p_true"}:  # follow-up questions after the answer
        return "auxiliary prompt"
    if any(s not in SIGNAL_ACCESS for s in signals):  # white-box signals are the ones without a black/gray access
        return "internal states"
    if signals - {Signal.RESPONSE}:
        return "single-generation likelihood"
    return "output text"


def _n_tokens(value: Any) -> int | None:
    """Token count of a token-id list or a list of them."""
    if isinstance(value, list):
        if value and isinstance(value[0], list):
            return sum(len(v) for v in value)
        return len(value)
    return None


def _record_calls_tokens(stage: str, rec: Mapping[str, Any]) -> dict[str, tuple[float, float | None]]:
    """Generation calls and generated tokens of one record, per part ('' = the whole stage); tokens None when
    the record does not say (counted as unknown, never as zero)."""
    if stage == PRIMARY_STAGE:
        n = rec.get("n_tokens")
        return {"": (1.0, float(n if n is not None else _n_tokens(rec.get("token_ids")) or 0))}
    if stage == "sample":
        samples = rec.get("samples") or []
        if "n_tokens" in rec:  # what the backend counted (a remote one sends no ids; None = it did not say)
            n = rec["n_tokens"]
            return {"": (float(len(samples)), None if n is None else float(n))}
        tokens = _n_tokens(rec.get("token_ids"))
        if tokens is None and rec.get("logliks"):
            tokens = int(sum(pair[1] for pair in rec["logliks"]))
        return {"": (float(len(samples)), float(tokens or 0))}
    if stage == "auxiliary":
        parts: dict[str, tuple[float, float | None]] = {}
        for part in AUX_PARTS:
            text = rec.get(part if part == "verbalized" else "self_eval_text")
            if text is None and rec.get(f"{part}_seconds") is None:
                continue
            n = rec.get(f"{part}_n_tokens")
            if n is None:
                n = _n_tokens(rec.get(f"{part}_token_ids"))
            parts[part] = (1.0, None if n is None else float(n))
        aux_calls = float(sum(c for c, _ in parts.values()))
        counts = [t for _, t in parts.values()]
        aux_tokens = None if any(t is None for t in counts) else float(sum(t for t in counts if t is not None))
        return {"": (aux_calls, aux_tokens), **parts}
    if stage == "features":
        return {"": (0.0, 0.0)}
    # a stage this module does not know yet: trust what its records say, count nothing otherwise
    return {"": (float(rec.get("n_calls", 0) or 0), float(rec.get("n_tokens", 0) or 0))}


def stage_stats(stage: str, records: Mapping[str, Mapping[str, Any]], *, wall_seconds: float | None = None,
                computed: int | None = None, previous: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Per-item cost of one stage over a cell's records (JSON-able; stored in the manifest as `evidence`).

    Seconds per item: mean of the records' `seconds`; else `wall_seconds / computed` of this run; else the
    previous manifest's value (a fully cached rerun); else None.
    """
    recs = list(records.values())
    n = len(recs)
    calls: dict[str, float] = {}
    tokens: dict[str, float | None] = {}
    part_seconds: dict[str, list[float]] = {}
    seconds: list[float] = []
    for rec in recs:
        for part, (c, t) in _record_calls_tokens(stage, rec).items():
            calls[part] = calls.get(part, 0.0) + c
            before = tokens.get(part, 0.0)
            tokens[part] = None if before is None or t is None else before + t
            sec = rec.get(f"{part}_seconds") if part else None
            if isinstance(sec, int | float) and math.isfinite(sec):
                part_seconds.setdefault(part, []).append(float(sec))
        sec = rec.get("seconds")
        if isinstance(sec, int | float) and math.isfinite(sec):
            seconds.append(float(sec))
    per_item: float | None
    source = "records"
    if seconds and len(seconds) == n:
        per_item = sum(seconds) / n
    elif wall_seconds is not None and computed:
        per_item, source = wall_seconds / computed, "stage wall time"
    elif previous and previous.get("seconds_per_item") is not None:
        per_item, source = float(previous["seconds_per_item"]), "previous run"
    else:
        per_item, source = None, "unknown"
    usd = [rec.get("cost_usd") for rec in recs if "cost_usd" in rec]
    out: dict[str, Any] = {
        "items": n, "seconds_per_item": per_item, "seconds_source": source,
        "calls_per_item": calls.get("", 0.0) / n if n else 0.0,
        "tokens_per_item": _per(tokens.get("", 0.0), n),
    }
    parts = {}
    total_calls = calls.get("", 0.0)
    for part in sorted(p for p in calls if p):
        if part in part_seconds and len(part_seconds[part]) == n:
            part_per_item: float | None = sum(part_seconds[part]) / n
        elif per_item is not None and total_calls:
            part_per_item = per_item * calls[part] / total_calls  # stage time split by call share
        else:
            part_per_item = None
        parts[part] = {"seconds_per_item": part_per_item, "calls_per_item": calls[part] / n,
                       "tokens_per_item": _per(tokens[part], n)}
        part_usd = [rec.get(f"{part}_cost_usd") for rec in recs if f"{part}_cost_usd" in rec]
        if part_usd:  # a billed part (`<part>_cost_usd`): its own USD per item
            parts[part]["usd_per_item"] = _usd_per_item(part_usd, n)
    if parts:
        out["parts"] = parts
    if usd:  # a billed remote backend: USD per item (None when a price is unknown or a record lacks it)
        out["usd_per_item"] = _usd_per_item(usd, n)
    elif any("usd_per_item" in p for p in parts.values()):  # billed by parts only: the stage is their sum
        part_usds = [p.get("usd_per_item") for p in parts.values()]
        out["usd_per_item"] = None if any(u is None for u in part_usds) else sum(u for u in part_usds if u)
    return out


def _usd_per_item(usd: list[Any], n: int) -> float | None:
    """Mean USD per item; None when a record lacks it or a price is unknown."""
    known = [float(u) for u in usd if u is not None]
    return None if len(usd) < n or len(known) < len(usd) else sum(known) / n


def _per(total: float | None, n: int) -> float | None:
    return None if total is None else (total / n if n else 0.0)


def _stage_needs(requires: Iterable[Signal], stage_signals: StageSignals) -> dict[str, set[str]]:
    """Stage -> needed parts ('' = the whole stage)."""
    needs: dict[str, set[str]] = {}
    for signal in requires:
        stage = stage_of(signal, stage_signals)
        if stage is None:
            continue
        needs.setdefault(stage, set()).add(SIGNAL_PART.get(signal, ""))
    return needs


def _stage_usd(stats: Mapping[str, Any], parts: set[str]) -> list[float | None]:
    """The USD per item a detector pays of one stage (its needed parts where the stage bills by part); [] when the
    stage is not billed."""
    chosen = [stats.get("parts", {}).get(p, {}) for p in sorted(parts)] if "" not in parts else []
    if chosen and all("usd_per_item" in p for p in chosen):
        return [p["usd_per_item"] for p in chosen]
    return [stats["usd_per_item"]] if "usd_per_item" in stats else []


def detector_cost(requires: Iterable[Signal | str], evidence: Mapping[str, Mapping[str, Any]], *,
                  stage_signals: StageSignals, fit_s: float | None, score_s: float | None, n_scored: int,
                  n: int = DEFAULT_N) -> dict[str, Any]:
    """Cost columns of one detector on one cell (see the module docstring for the formulas); `stage_signals`:
    stage -> provided signals in run order (`haldet.stages.plan.stage_provides()`)."""
    signals = [Signal(s) for s in requires]
    needs = _stage_needs(signals, stage_signals)
    stages = stages_of(signals, stage_signals)
    out: dict[str, Any] = {"evidence": evidence_type(signals, stage_signals), "stages": "+".join(stages)}
    gen = evidence.get(PRIMARY_STAGE, {})
    out["gen_s_item"] = gen.get("seconds_per_item")
    prep: float | None = 0.0
    calls = 0.0
    tokens: float | None = 0.0
    notes = []
    for stage in stages:
        if stage == PRIMARY_STAGE:
            continue
        stats = evidence.get(stage)
        if stats is None:
            out[f"prep_{stage}_s_item"] = None
            prep = None
            notes.append(f"no {stage} timing")
            continue
        parts = needs.get(stage, {""})
        if "" in parts or not stats.get("parts"):
            sec = stats.get("seconds_per_item")
            c, t = stats.get("calls_per_item", 0.0), stats.get("tokens_per_item", 0.0)
        else:
            chosen = [stats["parts"].get(p, {}) for p in sorted(parts)]
            secs = [p.get("seconds_per_item") for p in chosen]
            sec = None if any(s is None for s in secs) or not chosen else sum(secs)
            c = sum(p.get("calls_per_item", 0.0) for p in chosen)
            part_tokens = [p.get("tokens_per_item", 0.0) for p in chosen]
            t = None if any(x is None for x in part_tokens) else sum(part_tokens)
        out[f"prep_{stage}_s_item"] = sec
        calls += c
        tokens = None if tokens is None or t is None else tokens + t
        if t is None:
            notes.append(f"{stage} records no generated-token counts")
        if sec is None:
            prep = None
            notes.append(f"no {stage} timing")
        elif prep is not None:
            prep += sec
    extra = [u for s in stages if s != PRIMARY_STAGE and s in evidence
             for u in _stage_usd(evidence[s], needs.get(s, {""}))]
    if "usd_per_item" in gen or extra:  # API targets: what the answer and the extra evidence cost in USD
        out["gen_usd_item"] = gen.get("usd_per_item")
        out["prep_usd_item"] = None if any(u is None for u in extra) else float(sum(u for u in extra if u is not None))
        out["usd_at_n"] = None if out["prep_usd_item"] is None else n * out["prep_usd_item"]
        if out["prep_usd_item"] is None or out["gen_usd_item"] is None:
            notes.append(f"{PRICE_UNKNOWN}: not declared and not listed by genai-prices (each usage report's "
                         "price_source says why); declare it (endpoint.price_in/price_out, judge.price_*, or prices)")
    infer = score_s / n_scored if score_s is not None and n_scored else None
    out.update({
        "prep_s_item": prep, "fit_s": fit_s, "score_s": score_s, "infer_s_item": infer,
        "score_only_s": None if fit_s is None or score_s is None else fit_s + score_s,
        "extra_calls_item": calls, "extra_tokens_item": tokens, "cost_n": n,
        "cost_at_n": (None if prep is None or infer is None or fit_s is None else n * prep + fit_s + n * infer),
    })
    if notes:
        out["cost_note"] = "; ".join(notes)
    return out


def usd_text(value: float | None) -> str:
    """A money cell: USD, or "price unknown" (never a guessed zero)."""
    return PRICE_UNKNOWN if value is None else f"${value:.4g}"


COST_COLUMNS = ("evidence", "stages", "gen_s_item", "prep_s_item", "fit_s", "score_s", "infer_s_item",
                "score_only_s", "extra_calls_item", "extra_tokens_item", "cost_n", "cost_at_n")
