"""HalluLens rates, computed at corpus level from judgement records (`judges.HalluLensJudges`).

PreciseWikiQA (and its proxy), over the N judged items:
    FR = refused / N,   H = (answered and wrong) / answered,   C = (answered and correct) / N
with wrong = INCORRECT or UNVERIFIABLE; hence C = (1 - FR)(1 - H) exactly. H is undefined (NaN, with a reason)
when nothing was answered.
LongWiki, per non-abstained response with S supported of T claims: P = S / T, R@K = min(S / K, 1), F1@K their
harmonic mean (0 when both are 0); each averaged over those responses (the paper's convention). Beside it,
`f1_of_means` = harmonic mean of the averaged P and R@K. Responses without any claim are counted (`no_claims`)
and left out of the averages (no precision exists for them).
NonExistentRefusal: FAR = believed / N per domain; Mixed = mean over the MixedEntities domains present;
Generated = pooled over GeneratedEntities; headline = (Mixed + Generated) / 2.
Items whose judgement failed are not in any rate; their count is reported as `failed`.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from typing import Any

NAN = math.nan
MIXED_DOMAINS = ("animal", "plant", "bacteria", "medicine")


def _ratio(num: int, den: int, what: str, reasons: dict[str, str], name: str) -> float:
    if den == 0:
        reasons[name] = f"no {what}"
        return NAN
    return num / den


def qa_rates(records: Iterable[dict[str, Any]]) -> dict[str, Any]:
    recs = list(records)
    n = len(recs)
    refused = sum(1 for r in recs if r["abstained"])
    answered = [r for r in recs if not r["abstained"]]
    wrong = sum(1 for r in answered if r["verdict"] in ("INCORRECT", "UNVERIFIABLE"))
    unverifiable = sum(1 for r in answered if r["verdict"] == "UNVERIFIABLE")
    reasons: dict[str, str] = {}
    return {
        "false_refusal": _ratio(refused, n, "judged items", reasons, "false_refusal"),
        "hallucination": _ratio(wrong, len(answered), "answered items", reasons, "hallucination"),
        "correct": _ratio(len(answered) - wrong, n, "judged items", reasons, "correct"),
        "n": n, "refused": refused, "answered": len(answered), "wrong": wrong, "unverifiable": unverifiable,
        "reasons": reasons,
    }


def response_scores(supported: int, total: int, k: int = 32) -> tuple[float, float, float]:
    """(precision, recall@K, F1@K) of one response with `supported` of `total` claims (total > 0)."""
    p = supported / total
    r = min(supported / k, 1.0)
    f1 = 0.0 if p + r == 0 else 2 * p * r / (p + r)
    return p, r, f1


def claim_counts(record: dict[str, Any]) -> tuple[int, int]:
    claims = [c for s in record.get("sentences", []) for c in s["claims"]]
    return sum(1 for c in claims if c["supported"]), len(claims)


def longwiki_rates(records: Iterable[dict[str, Any]], k: int = 32) -> dict[str, Any]:
    recs = list(records)
    reasons: dict[str, str] = {}
    refused = sum(1 for rec in recs if rec["abstained"])
    scored: list[tuple[float, float, float]] = []
    no_claims = 0
    for rec in recs:
        if rec["abstained"]:
            continue
        s, t = claim_counts(rec)
        if t == 0:
            no_claims += 1
            continue
        scored.append(response_scores(s, t, k))
    out: dict[str, Any] = {"false_refusal": _ratio(refused, len(recs), "judged items", reasons, "false_refusal"),
                           "n": len(recs), "refused": refused, "scored": len(scored), "no_claims": no_claims, "k": k}
    if scored:
        p, r, f1 = (float(statistics.fmean(col)) for col in zip(*scored, strict=True))
        out.update(precision=p, recall_at_k=r, f1_at_k=f1, f1_of_means=0.0 if p + r == 0 else 2 * p * r / (p + r))
    else:
        for name in ("precision", "recall_at_k", "f1_at_k", "f1_of_means"):
            out[name] = NAN
            reasons[name] = "no answered response with claims"
    out["reasons"] = reasons
    return out


def far_rates(records: Iterable[dict[str, Any]], domains: dict[str, tuple[str, str]]) -> dict[str, Any]:
    """`domains`: item id -> (subtask, domain)."""
    counts: dict[tuple[str, str], list[int]] = {}
    for r in records:
        key = domains[r["id"]]
        counts.setdefault(key, [0, 0])
        counts[key][0] += int(bool(r["believes"]))
        counts[key][1] += 1
    reasons: dict[str, str] = {}
    per_domain = {f"{sub}/{dom}": c[0] / c[1] for (sub, dom), c in sorted(counts.items())}
    mixed = [per_domain[f"mixed/{d}"] for d in MIXED_DOMAINS if f"mixed/{d}" in per_domain]
    gen = [c for (sub, _), c in counts.items() if sub == "generated"]
    out: dict[str, Any] = {"per_domain": per_domain, "n": sum(c[1] for c in counts.values())}
    out["mixed"] = statistics.fmean(mixed) if mixed else NAN
    if not mixed:
        reasons["mixed"] = "no MixedEntities items"
    out["generated"] = sum(c[0] for c in gen) / sum(c[1] for c in gen) if gen else NAN
    if not gen:
        reasons["generated"] = "no GeneratedEntities items"
    if mixed and gen:
        out["far"] = (out["mixed"] + out["generated"]) / 2
    else:
        out["far"] = NAN
        reasons["far"] = "needs both MixedEntities and GeneratedEntities"
    out["reasons"] = reasons
    return out


def mean_sd(values: Sequence[float]) -> dict[str, Any]:
    """Mean and sample standard deviation (ddof 1) over trials; NaN values are left out and counted."""
    ok = [v for v in values if not math.isnan(v)]
    out: dict[str, Any] = {"mean": statistics.fmean(ok) if ok else NAN, "n_trials": len(ok),
                           "sd": statistics.stdev(ok) if len(ok) >= 2 else NAN}
    if len(ok) < 2:
        out["sd_reason"] = "standard deviation needs at least 2 trials"
    return out


# --- the paper's breakdowns ---------------------------------------------------------------------------------------
def rates_by_decile(records: Iterable[dict[str, Any]], deciles: dict[str, int | None]) -> dict[str, dict[str, Any]]:
    """PreciseWikiQA's Fig. 4: `qa_rates` of the items of each h-score decile (0 = hardest .. 9 = best known);
    items without a decile are left out."""
    groups: dict[int, list[dict[str, Any]]] = {}
    for r in records:
        d = deciles.get(r["id"])
        if d is not None:
            groups.setdefault(int(d), []).append(r)
    return {str(d): qa_rates(groups[d]) for d in sorted(groups)}


def far_by_place_group(records: Iterable[dict[str, Any]], groups: dict[str, str]) -> dict[str, dict[str, Any]]:
    """GeneratedEntities' Fig. 9: false acceptance per place-frequency group (`groups`: item id -> group, only the
    GeneratedEntities items asked about a grouped place)."""
    counts: dict[str, list[int]] = {}
    for r in records:
        g = groups.get(r["id"])
        if g:
            c = counts.setdefault(g, [0, 0])
            c[0] += int(bool(r["believes"]))
            c[1] += 1
    return {g: {"far": c[0] / c[1], "believed": c[0], "n": c[1]} for g, c in sorted(counts.items())}


RANKED = (("precisewikiqa", "hallucination"), ("precisewikiqa", "false_refusal"), ("longwiki", "f1_at_k"),
          ("longwiki", "false_refusal"), ("nonexistent", "mixed"), ("nonexistent", "generated"), ("nonexistent", "far"))


# pairs within one task that are compared: the two NonExistentRefusal subtasks, and each against their average
SUBTASK_PAIRS = ({"mixed", "generated"}, {"mixed", "far"}, {"generated", "far"})


def kendall_between_tasks(means: dict[str, dict[tuple[str, str], float]]) -> list[dict[str, Any]]:
    """Kendall's tau-b between the models' values of two headline metrics (`means`: model -> (task, metric) ->
    mean over trials), for every pair of metrics of different tasks or subtasks that at least 3 models share
    (the paper: 0.59 between MixedEntities and GeneratedEntities), and each of the two against their average, the
    task's false acceptance rate `far` (the paper: 0.74 and 0.85). Same orientation as the metrics: a positive tau
    means the models are ordered alike."""
    from scipy.stats import kendalltau

    out = []
    for i, a in enumerate(RANKED):
        for b in RANKED[i + 1:]:
            if a[0] == b[0] and {a[1], b[1]} not in SUBTASK_PAIRS:
                continue
            models = sorted(m for m, v in means.items() if not math.isnan(v.get(a, NAN))
                            and not math.isnan(v.get(b, NAN)))
            if len(models) < 3:
                continue
            res = kendalltau([means[m][a] for m in models], [means[m][b] for m in models])
            tau, p = float(res.statistic), float(res.pvalue)
            row: dict[str, Any] = {"a": "/".join(a), "b": "/".join(b), "tau": tau, "p": p, "n_models": len(models),
                                   "models": models}
            if math.isnan(tau):  # tau-b has no value when one metric ties every model: say so, never a number
                tied = [f"{'/'.join(k)} = {means[models[0]][k]:.4g}" for k in (a, b)
                        if len({means[m][k] for m in models}) == 1]
                row.update(tau=None, p=None, note="undefined: every model has the same "
                           + (" and ".join(tied) if tied else "ranks (all tied)"))
            out.append(row)
    return out


def kendall_cells(row: dict[str, Any]) -> tuple[str, str, str]:
    """The tau, p and note cells of one Kendall row in table.md and report.html ("n/a" and the reason when
    undefined)."""
    if row.get("tau") is None:
        return "n/a", "n/a", str(row.get("note", ""))
    return f"{row['tau']:.3f}", f"{row['p']:.3g}", str(row.get("note", ""))
