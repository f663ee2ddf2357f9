"""The HalluEntity suite end to end on its fixture with the embedded model, and its adapter's data handling."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from haldet.config_files import compose_config
from haldet.datasets.base import get_adapter
from haldet.detectors.unit import unit_token_index
from haldet.errors import HaldetError
from haldet.schema import Category, Generation, Instance, SpanLabel
from haldet.signals import SignalView
from haldet.suites.base import get_suite
from haldet.text.units import align_sequential
from repo_paths import FIXTURES

FIX = FIXTURES / "datasets"


def test_sequential_alignment_finds_repeats_in_order_and_reports_misses() -> None:
    text = "born in Paris; moved to Paris in 1990"
    assert align_sequential(text, ["Paris", "Paris", "1990"]) == [(8, 13), (24, 29), (33, 37)]
    assert align_sequential(text, ["Paris", "Berlin", "1990"]) == [(8, 13), None, (33, 37)]


def test_fixture_maps_entities_to_offsets_with_labels() -> None:
    instances, report = get_adapter("halluentity", FIX).load()
    assert len(instances) == 6 and report.n_skipped == 0
    lanny = next(i for i in instances if "Lanny" in i.question)
    assert lanny.response is not None
    for unit in lanny.units:
        assert unit.kind == "entity" and lanny.response[unit.start : unit.end] == unit.text
    labels = {u.text: u.category for u in lanny.units}
    assert labels["December 18, 1949"] is Category.HALLUCINATION and labels["American"] is Category.CORRECT
    hopper = next(i for i in instances if "Hopper" in i.question)
    assert hopper.meta["unaligned"] == [{"index": 11, "entity": "Harvard Mark I", "not_hallucinated": True}]


@pytest.mark.parametrize(("row", "field"), [
    ({"prompt": "p", "response": "a b", "entity": ["a", "b"], "entity_label": [True]}, "entity_label"),
    ({"prompt": "p", "response": "a b", "entity": ["a"], "entity_label": ["maybe"]}, "entity_label[0]"),
    ({"prompt": "p", "response": "a b", "entity": "a", "entity_label": [True]}, "entity"),
    ({"prompt": "p", "entity": ["a"], "entity_label": [True]}, "response"),
])
def test_malformed_row_names_row_and_field(tmp_path: Path, row: dict, field: str) -> None:
    good = {"prompt": "Tell me a bio of X.", "response": "X is a poet.", "entity": ["X", "poet"],
            "entity_label": [True, False]}
    path = tmp_path / "halluentity" / "train.jsonl"
    path.parent.mkdir()
    path.write_text(json.dumps(good) + "\n" + json.dumps(row) + "\n")
    with pytest.raises(HaldetError) as err:
        get_adapter("halluentity", tmp_path).load(seed=0)
    assert "line 2" in err.value.message and repr(field) in err.value.message  # the file line of the bad row
    instances, report = get_adapter("halluentity", tmp_path).load(on_bad_row="skip")
    assert len(instances) == 1 and report.n_skipped == 1


def test_tokens_map_to_units_by_offset_overlap() -> None:
    offsets = np.array([[0, 3], [3, 9], [9, 9], [9, 15], [15, 16]])  # "Ada| Byron|<empty>| wrote|."
    units = [SpanLabel(start=0, end=9, category=Category.CORRECT, kind="entity"),
             SpanLabel(start=10, end=15, category=Category.HALLUCINATION, kind="entity"),
             SpanLabel(start=16, end=16, category=Category.CORRECT, kind="entity")]
    index = unit_token_index(offsets, units)
    assert [list(i) for i in index] == [[0, 1], [3], []]


def test_scoring_views_never_show_unit_labels() -> None:
    inst = Instance(id="d/test/1", dataset="d", scenario="s", task_type="t", question="q", response="abc",
                    units=[SpanLabel(start=0, end=1, category=Category.HALLUCINATION, kind="entity", grade=3)],
                    response_label=Category.HALLUCINATION)
    gen = Generation(id=inst.id, prompt="q", response="abc", token_ids=[1], token_logprobs=[-0.1],
                     finish_reason="provided", n_tokens=1, model="m", provided=True)
    view = SignalView(ids=[inst.id], instances=[inst], generations=[gen], loader=lambda s, ids: [],
                      labels=np.array([1]))
    hidden = view.subset([0], with_labels=False).instances[0]
    assert hidden.units[0].category is Category.INVALID and hidden.units[0].grade is None
    assert hidden.response_label is None and hidden.units[0].start == 0
    assert view.subset([0], with_labels=True).instances[0].units[0].category is Category.HALLUCINATION


@pytest.fixture(scope="module")
def suite_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict], list]:
    import haldet

    out = tmp_path_factory.mktemp("halluentity")
    config = compose_config(None, base=get_suite("halluentity").config_base(), data_dir=str(FIX))
    rows, cells = haldet.run(config, out)
    return out, rows, cells


def test_unit_level_risk_coverage_curve_ends_at_the_hallucination_rate(suite_run) -> None:
    """Every suite detector's risk-coverage curve (manifest) is over its pooled test units: at full coverage the risk
    is the share of hallucinated units among those with a score, and with one unit kept it is that unit's label."""
    out, _, cells = suite_run
    manifest = json.loads((out / "manifest.json").read_text())
    drawn = 0
    for cell, entry in zip(cells, manifest["cells"], strict=True):
        for run, saved in zip(cell.detectors, entry["detectors"], strict=True):
            test = run.unit_scores["test"]
            kept = (test.y >= 0) & np.isfinite(test.s)
            curve = saved["curves"]["risk_coverage"]
            if not kept.any():  # no scored binary unit: an empty curve, not a made-up one
                assert curve == {"coverage": [], "risk": []}
                continue
            drawn += 1
            assert curve["coverage"][0] == pytest.approx(1 / kept.sum()) and curve["coverage"][-1] == 1.0
            assert curve["risk"][-1] == pytest.approx(round(float(test.y[kept].mean()), 6))
            # one unit kept: the least suspicious (ties averaged), so the order of the scores is what it follows
            y, s = test.y[kept], test.s[kept]
            assert curve["risk"][0] == pytest.approx(round(float(y[s == s.min()].mean()), 6))
    assert drawn >= 4  # the fixture's detectors score its test entities


def test_suite_runs_end_to_end_on_the_fixture(suite_run) -> None:
    out, rows, cells = suite_run
    cell = cells[0]
    assert not cell.error and {r["level"] for r in rows} == {"entity"}
    assert {r["detector"] for r in rows} == {"likelihood", "entropy", "ccp", "unit_sar", "focus", "(data)"}
    assert cell.data["protocol"] == "provided" and cell.data["units"]["entity"]["units"] == 64
    assert cell.data["units"]["entity"]["unaligned"] == 1  # "Harvard Mark I" is not in its response
    # grouped: every item in exactly one part
    split = json.loads((out / "halluentity" / "smollm2-135m" / "split.json").read_text())
    ids = split["train"] + split["val"] + split["test"]
    assert len(ids) == len(set(ids)) == 6
    # metrics pool the entities of the test items (all valid here: every entity has tokens)
    instances = {i.id: i for i in get_adapter("halluentity", FIX).load()[0]}
    n_test = sum(len(instances[i].units) for i in split["test"])
    for r in rows:
        if r["metric"] == "auroc" and r["detector"] not in ("ccp", "(data)"):
            assert r["n"] == n_test and r["coverage"] == 1.0, r["detector"]
    # CCP needs an NLI model; offline there is none: NaN with that reason, never a number
    ccp = [json.loads(x) for x in (out / "halluentity" / "smollm2-135m" / "scores").glob("ccp@entity.jsonl")
           .__next__().read_text().splitlines()]
    assert all(v is None for rec in ccp for v in rec["values"])
    assert all("no NLI model could run" in why for rec in ccp for why in rec["reasons"])


def test_unit_scores_file_recomputes_every_unit_auroc_without_haldet(suite_run) -> None:
    """`unit_scores.csv` holds every pooled unit (labels, offsets, score): the AUROC recomputed from the file alone
    equals haldet's for every detector, and the test rows are exactly the test items' units."""
    import csv

    from sklearn.metrics import roc_auc_score

    out, rows, _ = suite_run
    with open(out / "unit_scores.csv", newline="") as fh:
        units = list(csv.DictReader(fh))
    split = json.loads((out / "halluentity" / "smollm2-135m" / "split.json").read_text())
    instances = {i.id: i for i in get_adapter("halluentity", FIX).load()[0]}
    compared = 0
    for r in rows:
        if r["metric"] != "auroc":
            continue
        test = [u for u in units if u["detector"] == r["detector"] and u["part"] == "test"]
        assert len(test) == sum(len(instances[i].units) for i in split["test"])
        assert {(u["item_id"], int(u["start"]), int(u["end"])) for u in test} == {
            (i, x.start, x.end) for i in split["test"] for x in instances[i].units}
        usable = [u for u in test if u["label"] in ("0", "1") and u["score"] != ""]
        assert all(u["reason"] for u in test if u["score"] == "")  # an invalid unit says why
        if r["value"] is None:
            continue
        y = [int(u["label"]) for u in usable]
        s = [float(u["score"]) for u in usable]
        assert len(y) == r["n"] and roc_auc_score(y, s) == pytest.approx(r["value"], abs=1e-12), r["detector"]
        compared += 1
    assert compared >= 3


def test_given_responses_are_teacher_forced_with_offsets(suite_run) -> None:
    from haldet.backends.hf.backend import HFBackend

    out, _, _ = suite_run
    recs = [json.loads(line) for line in (out / "halluentity" / "smollm2-135m" / "generate.jsonl").open()]
    backend = HFBackend("smollm2-135m")
    for rec in recs:
        assert rec["provided"] and rec["finish_reason"] == "provided"
        ids, offsets = backend.encode_response(rec["response"])
        assert rec["token_ids"] == ids and rec["tokens"]["offsets"] == [list(o) for o in offsets]
        assert len(rec["token_logprobs"]) == len(ids) == len(rec["tokens"]["entropies"])
        assert all(lp <= 0 for lp in rec["token_logprobs"])
        assert rec["prompt"].endswith("\n") and "<|im_start|>" not in rec["prompt"]  # raw input format


def test_rerun_reads_every_score_from_the_cache(suite_run) -> None:
    import haldet

    out, rows, _ = suite_run
    config = compose_config(None, base=get_suite("halluentity").config_base(), data_dir=str(FIX))
    rows2, cells2 = haldet.run(config, out)
    assert all(d.cached for d in cells2[0].detectors if not d.error)
    assert [(r["detector"], r["metric"], r["value"]) for r in rows2] == [
        (r["detector"], r["metric"], r["value"]) for r in rows]


def test_suites_list_and_unknown_suite_message(tmp_path: Path) -> None:
    from conftest import run_cli

    listed = run_cli("suites", "list", "--json")
    assert listed.returncode == 0
    info = {s["name"]: s for s in json.loads(listed.stdout)}
    assert info["halluentity"]["levels"] == ["entity"] and info["halluentity"]["protocol"] == "provided"
    assert set(info["halluentity"]["detectors"]) == {"likelihood", "entropy", "ccp", "unit_sar", "focus"}
    assert info["verigray"]["optional_detectors"] == ["verigray_llm", "minicheck", "lynx", "anah_v2"]
    assert "Fig. 4 (per-response hallucination rate)" in info["halluentity"]["tables"]
    bad = run_cli("run", "--suite", "halluentityy", "--out", str(tmp_path / "r"))
    assert bad.returncode == 2 and "halluentity" in bad.stderr and "Traceback" not in bad.stderr


def test_suite_html_section_has_tables_and_position_plot(suite_run) -> None:
    _, rows, _ = suite_run
    planted = [{"dataset": "halluentity", "model": "smollm2-135m", "detector": "focus", "level": "entity",
                "metric": f"fnr[position={p}]", "value": v, "n": 3, "n_pos": 1}
               for p, v in (("first", 0.6), ("middle", 0.4), ("last", 0.2))]
    html = get_suite("halluentity").html_section(rows + planted)
    assert html.count("<table>") == 2 + 6 and "AUROC" in html and "Fig. 4 (per-response" in html
    assert "<svg" in html and "FNR by position" in html


def test_preset_run_records_preset_and_evaluates_every_item(suite_run, tmp_path: Path) -> None:
    """`--preset halluentity` (evaluate_on: all) on a copy of the fixture run: the manifest names the preset and its
    hash; likelihood is scored on every item (the test items' scores are the cached ones) and its rows pool the
    entities of all items, saying scope all; the test-scope run pooled the test items' only."""
    import shutil

    import haldet
    from haldet.presets import load_preset

    out, rows, _ = suite_run
    copy = tmp_path / "run"
    shutil.copytree(out, copy)
    config = haldet.load_config(None, preset="halluentity", data_dir=str(FIX), detectors=["likelihood"])
    rows_all, _ = haldet.run(config, copy, update=True)
    manifest = json.loads((copy / "manifest.json").read_text())
    assert manifest["preset"] == {"name": "halluentity", "hash": load_preset("halluentity").hash,
                                  "file": "haldet/presets/halluentity.yaml"}
    assert manifest["config"]["evaluation"]["evaluate_on"] == "all"
    instances = {i.id: i for i in get_adapter("halluentity", FIX).load()[0]}
    split = json.loads((copy / "halluentity" / "smollm2-135m" / "split.json").read_text())
    n_test = sum(len(instances[i].units) for i in split["test"])
    n_all = sum(len(u.units) for u in instances.values())
    before = next(r for r in rows if r["detector"] == "likelihood" and r["metric"] == "auroc")
    after = next(r for r in rows_all if r["metric"] == "auroc")
    assert (before["scope"], before["n"]) == ("test", n_test) and (after["scope"], after["n"]) == ("all", n_all)
    assert n_all > n_test and "scope all" in after["note"]
    scored = {json.loads(line)["id"] for line in (copy / "halluentity" / "smollm2-135m" / "scores" /
                                                   "likelihood@entity.jsonl").read_text().splitlines()}
    assert scored == set(instances)
    # the report headers name the preset
    from haldet.report.build import write_reports
    from haldet.report.rundata import load_run

    write_reports(copy, [load_run(copy)], write_results=False)
    line = f"preset halluentity (hash {load_preset('halluentity').hash})"
    assert (copy / "tables.md").read_text().startswith(line) and line in (copy / "report.html").read_text()


def test_label_statistics_count_the_fixture(suite_run) -> None:
    from collections import Counter

    from haldet.evaluation.breakdowns import rate_group

    _, rows, _ = suite_run
    items = get_adapter("halluentity", FIX).load()[0]
    units = [u for i in items for u in i.units]

    def table(name: str, col: str) -> dict[tuple[str, str], Any]:
        return {(r[col], r["metric"]): r["value"] for r in rows if r.get("table") == name}

    pos = table("Fig. 2 (POS)", "tag")
    assert sum(v for (_, m), v in pos.items() if m == "n_entities") == len(units)
    assert sum(v for (_, m), v in pos.items() if m == "share") == pytest.approx(1.0)
    bad_by_pos = sum(pos[(t, "hallucination_rate")] * pos[(t, "n_entities")] for t, m in pos if m == "share")
    assert bad_by_pos == pytest.approx(sum(u.binary for u in units))
    groups = Counter(rate_group(i, "entity") for i in items)
    t4 = table("Table 4", "rate_group")
    assert {g: t4[(g, "n_items")] for g in groups} == dict(groups)
    rates = [sum(u.binary for u in i.units) / len(i.units) for i in items]
    per = table("per response", "statistic")
    assert per[("mean", "hallucinated_share")] == pytest.approx(sum(rates) / len(rates))
    assert per[("max", "entities")] == max(len(i.units) for i in items)
    fig4 = table("Fig. 4", "bin")
    assert sum(v for (_, m), v in fig4.items() if m == "n_items") == len(items)
    assert fig4[("0-5%", "n_items")] == sum(r < 0.05 for r in rates)


def test_proxy_correlation_is_pearson_over_common_units() -> None:
    from haldet.suites.halluentity.analysis import proxy_correlation

    a = [0.1, 0.5, 0.2, 0.9, 0.4]
    b = [0.2, 0.4, 0.1, 1.0, None]  # the last unit is invalid for model b: left out
    rows = [{"dataset": "halluentity", "model": m, "detector": "likelihood", "variant": "", "level": "entity",
             "item_id": f"halluentity/test/{k // 2}", "unit_index": k % 2, "score": v}
            for m, vals in (("m1", a), ("m2", b)) for k, v in enumerate(vals)]
    (row,) = proxy_correlation(rows)
    expected = float(np.corrcoef(a[:4], b[:4])[0, 1])
    assert (row["model_a"], row["model_b"], row["n"]) == ("m1", "m2", 4)
    assert row["value"] == pytest.approx(expected) and row["table"] == "Tables 7/8"
    const = [{**r, "score": 1.0} for r in rows if r["model"] == "m2"]
    (undefined,) = proxy_correlation([r for r in rows if r["model"] == "m1"] + const)
    assert undefined["value"] is None and "constant" in undefined["note"]


def test_proxy_correlation_from_a_real_two_model_run(tmp_path: Path, tiny_smol_llama: Path) -> None:
    """Tables 7/8 from two real proxy models on the same items: the embedded SmolLM2-135M and a tiny random Llama
    with the same tokenizer (tests/tiny_llama.py), each teacher-forcing the fixture's biographies. Each row's r is
    Pearson's r recomputed here from the two cells' stored entity scores (their score logs), over the units both
    scored; the table reaches suite_tables.md and the HTML report."""
    from typer.testing import CliRunner

    from haldet.cli import app

    out = tmp_path / "run"
    result = CliRunner().invoke(app, [
        "run", "--suite", "halluentity", "--data-dir", str(FIX), "--model", "smollm2-135m",
        "--model", str(tiny_smol_llama), "--detector", "likelihood,entropy", "--min-per-class", "0",
        "--out", str(out)])
    assert result.exit_code == 0, result.output[-3000:]
    folders = {p.name: p for p in (out / "halluentity").iterdir() if p.is_dir()}
    assert len(folders) == 2 and "smollm2-135m" in folders
    tiny_folder = next(p for name, p in folders.items() if name != "smollm2-135m")
    folder_of = {"smollm2-135m": folders["smollm2-135m"], str(tiny_smol_llama): tiny_folder}
    rows = [r for r in json.loads((out / "results.json").read_text()) if r.get("table") == "Tables 7/8"]
    assert {r["detector"] for r in rows} == {"likelihood", "entropy"}
    for row in rows:
        assert {row["model_a"], row["model_b"]} == {"smollm2-135m", str(tiny_smol_llama)}
        stored = []
        for model in (row["model_a"], row["model_b"]):
            log = folder_of[model] / "scores" / f"{row['detector']}@entity.jsonl"
            stored.append({(rec["id"], k): v for rec in map(json.loads, log.open())
                           for k, v in enumerate(rec["values"]) if v is not None})
        common = sorted(set(stored[0]) & set(stored[1]))
        a = np.array([stored[0][k] for k in common])
        b = np.array([stored[1][k] for k in common])
        assert row["n"] == len(common) > 10
        assert row["value"] == pytest.approx(float(np.corrcoef(a, b)[0, 1]), abs=1e-9)
        assert -1 < row["value"] < 1  # two different models: neither identical nor mirrored scores
    md = (out / "suite_tables.md").read_text()
    assert "Tables 7/8" in md and f"| likelihood | {tiny_smol_llama} | smollm2-135m |" in md
    assert "Tables 7/8" in (out / "report.html").read_text()
