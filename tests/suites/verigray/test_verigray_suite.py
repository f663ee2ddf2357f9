"""The VeriGray suite end to end on its fixture: the embedded model teacher-forces the summaries (likelihood), and
the 7-way classifier answers through a local OpenAI-compatible mock (one reply per sentence, one unparsable)."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from haldet.config_files import compose_config
from haldet.datasets.base import get_adapter
from haldet.suites.base import get_suite
from haldet.suites.verigray.classifier import OPTIONS
from haldet.suites.verigray.labels import CLASSES, CONTRADICTING, IMPLICIT, NO_FACT
from mock_openai import FakeOpenAI, text_content
from repo_paths import FIXTURES

FIX = FIXTURES / "datasets"
LETTER = {grade: letter for letter, grade in OPTIONS.items()}
GARBLED = "Would you like to know more?"  # its reply is unparsable


_ANAH_SENTENCE = re.compile(r"Read the part of the answer:\*\*\s*\n\n(.*?)\n\n###", re.S)
_LYNX_SENTENCE = re.compile(r"\n--\nANSWER:\n(.*?)\n\n--\n", re.S)


def sentence_of(body: dict[str, Any]) -> str:
    content = body["messages"][-1]["content"]
    for pattern in (_ANAH_SENTENCE, _LYNX_SENTENCE):
        if match := pattern.search(content):
            return match.group(1).strip()
    return str(content.rsplit("Sentence to judge:", 1)[1].strip())


def anah_turns(degree: int) -> int:
    """Requests ANAH-v2's dialogue makes for a sentence of `degree` under `reply_of`'s plan."""
    return 1 if degree == NO_FACT else 2 if degree < IMPLICIT and degree != CONTRADICTING else 3


def reply_of(arg: str, body: dict[str, Any], j: int) -> str:
    """The 7-way plan's reply, or, for the Lynx and ANAH-v2 prompts, their right verdict for the same class."""
    content = body["messages"][-1]["content"]
    letter = arg.rsplit("Option: ", 1)[1] if "Option: " in arg else None
    degree = OPTIONS[letter] if letter else None
    if _LYNX_SENTENCE.search(content) and degree is not None:  # Lynx: FAIL below Implicitly-Supported
        return '{"REASONING": ["checked"], "SCORE": "%s"}' % ("FAIL" if degree < IMPLICIT else "PASS")
    if _ANAH_SENTENCE.search(content) and degree is not None:  # ANAH-v2's turns (`anah_turns` of them)
        turn = sum(m["role"] == "user" for m in body["messages"])
        if turn == 1:
            return "<No Facts>" if degree == NO_FACT else "<Facts Present>"
        if turn == 2:
            return "<No Reference Information>" if anah_turns(degree) == 2 else "A passage.<SEP>Another one."
        return "<Contradictory>" if degree == CONTRADICTING else "<No Hallucination>"
    return text_content(arg, body, j)


def tiny_checker(path: Path) -> Path:
    """A MiniCheck-style checkpoint `minicheck` loads by path (tests/tiny_llama.py)."""
    from tiny_llama import build_tiny_checker

    return build_tiny_checker(path, seed=5)


@pytest.fixture(scope="module")
def suite_run(tmp_path_factory: pytest.TempPathFactory) -> Any:
    import haldet

    items, _ = get_adapter("verigray", FIX).load()
    checker = tiny_checker(tmp_path_factory.mktemp("suite-minicheck", numbered=False))  # one name, any test order
    with FakeOpenAI(content=reply_of, key_of=sentence_of, default="ok:no idea") as srv:
        for inst in items:
            for unit in inst.units:
                degree = 6 - unit.grade
                srv.plans[unit.text] = [f"ok:The facts check out as follows.\nOption: {LETTER[degree]}"]
        srv.plans[GARBLED] = ["ok:I would rather not say."]
        out = tmp_path_factory.mktemp("verigray")
        config = compose_config(None, base=get_suite("verigray").config_base(), data_dir=str(FIX),
                             detectors=["likelihood", "llmcheck_hidden", "llmcheck_attention", "verigray_llm", "lynx",
                                        "anah_v2", "minicheck"],
                             detector_params={"minicheck": {"checker": str(checker)}},
                             verdict__model="fake-7way", verdict__base_url=srv.base_url, verdict__retries=0,
                             evaluation__split=(0.34, 0.33, 0.33), evaluation__bootstrap=50)
        rows, cells = haldet.run(config, out)
        n_requests = len(srv.requests)
    return out, rows, cells, items, n_requests


def value(rows: list[dict], detector: str, metric: str) -> Any:
    (row,) = [r for r in rows if r["detector"] == detector and r["metric"] == metric]
    return row["value"]


def test_suite_runs_with_document_grouped_split(suite_run) -> None:
    out, rows, cells, items, n_requests = suite_run
    assert not cells[0].error and {r["level"] for r in rows} == {"sentence"}
    # one 7-way verdict and one Lynx verdict per sentence, ANAH-v2's dialogue of one to three turns (three for
    # the garbled sentence, whose replies never end it early)
    assert n_requests == sum(2 + (3 if u.text == GARBLED else anah_turns(6 - u.grade)) for i in items
                             for u in i.units)
    split = json.loads((out / "verigray" / "smollm2-135m" / "split.json").read_text())
    doc = {i.id: i.meta["document_id"] for i in items}
    assert [len({doc[i] for i in split[p]}) for p in ("train", "val", "test")] == [2, 2, 2]
    assert {r["detector"] for r in rows} == {"likelihood", "llmcheck_hidden", "llmcheck_attention", "verigray_llm",
                                             "lynx", "anah_v2", "minicheck", "(data)"}
    from haldet.suites.report import suite_markdown

    table = suite_markdown(get_suite("verigray"), rows)  # suite_tables.md of a run
    assert "Table 4: verigray | smollm2-135m (sentence level)" in table and "| BAcc | Rec | Prec | F1 |" in table
    for name in ("minicheck", "lynx", "anah_v2"):  # the fine-tuned verifiers' Table 4 rows
        assert re.search(rf"^\| {name} \| [0-9.]+ \|", table, re.M), name
    for fig in ("Fig. 2 (class share", "Fig. 3 (transition", "Fig. 6 (transition"):
        assert fig in table


def test_minicheck_scores_every_test_sentence_with_the_named_checker(suite_run) -> None:
    """MiniCheck through the whole suite run on a local checkpoint: every protocol-1 test sentence scored (the
    same sentences as the white-box rows), its verdict at P(supported) < 0.5 needs no fitted threshold, and the
    checker that made the numbers is the one named."""
    _, rows, cells, _, _ = suite_run
    (mc,) = [r for r in rows if r["detector"] == "minicheck" and r["metric"] == "bacc"]
    (ref,) = [r for r in rows if r["detector"] == "likelihood" and r["metric"] == "bacc"]
    assert mc["coverage"] == 1.0 and mc["n"] == ref["n"] > 0 and not mc["note"].startswith("threshold ")
    (det,) = [d for d in cells[0].detectors if d.name == "minicheck"]
    checker = det.meta["checker"]
    assert checker["loaded"] == checker["requested"] and checker["requested"].endswith("suite-minicheck")


def test_classifier_rows_match_its_known_answers(suite_run) -> None:
    out, rows, _, items, _ = suite_run
    split = json.loads((out / "verigray" / "smollm2-135m" / "split.json").read_text())
    test_units = [u for i in items if i.id in split["test"] for u in i.units]
    parsed = [u for u in test_units if u.text != GARBLED]
    # right on every parsed sentence: protocol 1 and the continuous ranking are perfect
    assert value(rows, "verigray_llm", "bacc") == 1.0 and value(rows, "verigray_llm", "f1") == 1.0
    assert value(rows, "verigray_llm", "rank_loss_continuous") == 0.0
    assert value(rows, "verigray_llm", "parsed") == pytest.approx(len(parsed) / len(test_units))
    present = {CLASSES[6 - u.grade] for u in parsed}
    for name in present:
        assert value(rows, "verigray_llm", f"class_f1[class={name}]") == 1.0
    assert value(rows, "verigray_llm", "selective_risk[threshold=Implicitly-Supported]") == 0.0
    # the binary verdicts' ranking loss is at least the floor of a perfect binary predictor, which is above 0
    floor = value(rows, "verigray_llm", "rank_loss_best_binary")
    assert 0 < floor <= value(rows, "verigray_llm", "rank_loss")
    generators = {i.meta["generator"] for i in items if i.id in split["test"]}
    assert {r["metric"] for r in rows if r["metric"].startswith("bacc[")} == {f"bacc[generator={g}]"
                                                                            for g in generators}


def test_white_box_scores_are_thresholded_and_layered_on_validation(suite_run) -> None:
    _, rows, cells, _, _ = suite_run
    for name in ("likelihood", "llmcheck_hidden", "llmcheck_attention"):
        (bacc,) = [r for r in rows if r["detector"] == name and r["metric"] == "bacc"]
        assert bacc["note"].startswith("threshold ") and bacc["note"].endswith("from validation")
        assert value(rows, name, "rank_loss_continuous") is not None
    meta = {d.name: d.meta for d in cells[0].detectors}
    for name in ("llmcheck_hidden", "llmcheck_attention"):
        assert meta[name]["layer_choice"].startswith("layer ") and "from validation units" in meta[name]["layer_choice"]


def test_html_report_has_table4_and_selective_risk_curve(suite_run) -> None:
    from haldet.report.build import write_reports
    from haldet.report.rundata import load_run

    out, _, _, _, _ = suite_run
    html = write_reports(out, [load_run(out)], write_results=False)["report.html"].read_text()
    section = html[html.index("<h2 id=verigray>"):]
    assert "L_rank (binary)" in section and "verigray_llm" in section and "likelihood" in section
    assert "Selective risk vs coverage" in section and '<figure id="fig-verigray-selective"><svg ' in section
    assert (out / "figures" / "verigray-selective.pdf").read_bytes().startswith(b"%PDF-")
    assert "Per-class F1 of the 7-way classifiers" in section and "Balanced accuracy by generator" in section
    assert "Fig. 3 (transition probabilities" in section and "Data analyses" in section
    assert "Fig. 2 (class share per generator" in section and "Fig. 6 (transition probabilities" in section
    for name in ("minicheck", "lynx", "anah_v2"):
        assert f"<td>{name}</td>" in section or f">{name}<" in section, name


def test_prompted_verifiers_read_their_replies_through_the_endpoint(suite_run) -> None:
    _, rows, _, _, _ = suite_run
    for name in ("lynx", "anah_v2"):  # right on every parsed sentence; the garbled one stays NaN with its reason
        assert value(rows, name, "bacc") == 1.0 and value(rows, name, "f1") == 1.0
        (bacc,) = [r for r in rows if r["detector"] == name and r["metric"] == "bacc"]
        (ref,) = [r for r in rows if r["detector"] == "verigray_llm" and r["metric"] == "bacc"]
        assert bacc["coverage"] == ref["coverage"] and bacc["n"] == ref["n"] > 0


def test_data_analyses_count_classes_and_transitions(suite_run) -> None:
    from collections import Counter

    from haldet.suites.report import suite_markdown

    _, rows, _, items, _ = suite_run
    fig2 = {(r["generator"], r["metric"]): r for r in rows if r.get("table") == "Fig. 2"}
    counts = Counter((i.meta["generator"], u.grade_name) for i in items for u in i.units)
    for (gen, name), n in counts.items():
        total = sum(v for (g, _), v in counts.items() if g == gen)
        assert fig2[(gen, name)]["n_pos"] == n and fig2[(gen, name)]["value"] == pytest.approx(n / total)
    pairs = Counter((a.grade_name, b.grade_name) for i in items
                    for a, b in zip(sorted(i.units, key=lambda u: u.start), sorted(i.units, key=lambda u: u.start)[1:],
                                    strict=False))
    fig6 = {(r["from"], r["metric"]): r for r in rows if r.get("table") == "7-class transitions"}
    for (a, b), n in pairs.items():
        out_of_a = sum(v for (x, _), v in pairs.items() if x == a)
        assert fig6[(a, b)]["value"] == pytest.approx(n / out_of_a)
        assert fig6[(a, b)]["ci_low"] <= fig6[(a, b)]["value"] <= fig6[(a, b)]["ci_high"]
    fig3 = [r for r in rows if r.get("table") == "Fig. 3" and r["value"] is not None]
    for origin in {r["from"] for r in fig3}:
        assert sum(r["value"] for r in fig3 if r["from"] == origin) == pytest.approx(1.0)
    table = suite_markdown(get_suite("verigray"), rows)
    assert "Fig. 2 (class share per generator" in table and "Fig. 6 (transition" in table


def test_preset_fixed_thresholds_on_a_copy_of_the_run(suite_run, tmp_path: Path) -> None:
    """`--preset verigray` end to end offline (embedded model as the substitute for the paper's Llama-2-7B): LLM-Check
    at the paper's layers 20/21 with its fixed thresholds 6.3 / -174.0; the binary verdicts are exactly the signed
    scores against sign * threshold, with no validation threshold."""
    import shutil

    import haldet

    out = tmp_path / "run"
    shutil.copytree(suite_run[0], out)
    config = haldet.load_config(None, preset="verigray", data_dir=str(FIX), evaluation__split=(0.34, 0.33, 0.33),
                                  detectors=["llmcheck_hidden", "llmcheck_attention"], evaluation__bootstrap=0)
    rows, cells = haldet.run(config, out, update=True)
    assert json.loads((out / "manifest.json").read_text())["preset"]["name"] == "verigray"
    detectors = {d.name: d for d in cells[0].detectors}
    # the preset's direction: above the threshold is Unfaithful (appendix D's stated mapping), nothing learned
    assert detectors["llmcheck_hidden"].meta["layer_choice"].startswith("layer 20, sign +1 fixed")
    assert detectors["llmcheck_attention"].meta["layer_choice"].startswith("layer 21, sign +1 fixed")
    units = [r for r in csv.DictReader((out / "unit_scores.csv").open()) if r["part"] == "test" and r["score"]]
    for name, threshold in (("llmcheck_hidden", 6.3), ("llmcheck_attention", -174.0)):
        (bacc,) = [r for r in rows if r["detector"] == name and r["metric"] == "bacc"]
        assert bacc["note"] == f"fixed threshold {threshold:.6g} (configured; no validation threshold)"
        sign = float(re.search(r"sign ([+-]1)", detectors[name].meta["layer_choice"]).group(1))  # type: ignore[union-attr]
        mine = [(6 - int(u["grade"]), float(u["score"]) > sign * threshold) for u in units if u["detector"] == name]
        flagged_unfaithful = [f for d, f in mine if d <= 1]  # Contradicting / Fabricated: gold Unfaithful
        recall = value(rows, name, "recall")
        assert recall == pytest.approx(np.mean(flagged_unfaithful)) if flagged_unfaithful else recall is None
