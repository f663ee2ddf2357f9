"""`haldet view` over HTTP (FastAPI's TestClient): every page shows what the run directory stores (checked against
the synthetic run's known labels and scores), filters and thresholds give hand-computable answers, bad requests are
clear 4xx pages without a traceback, nothing outside the runs is readable and nothing in them is written."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("fastapi")
pytest.importorskip("httpx")
from fastapi.testclient import TestClient

from haldet.errors import HaldetError
from haldet.evaluation.thresholds import at_threshold, best_f1_threshold
from haldet.explorer.app import create_app
from haldet.explorer.data import Explorer, question_excerpt
from haldet.store import RunStore
from haldet.testing.synthetic_run import DATASET, MODEL, NAN_REASON, write_synthetic_run
from repo_paths import FIXTURES

CELL = {"run": 0, "dataset": DATASET, "model": MODEL}
LOCAL = "http://127.0.0.1"  # the explorer answers only the hosts it was started for


def local_client(explorer: Explorer) -> TestClient:
    return TestClient(create_app(explorer), raise_server_exceptions=False, base_url=LOCAL)


@pytest.fixture(scope="module")
def synth(tmp_path_factory):
    root = tmp_path_factory.mktemp("explorer") / "run"
    truth = write_synthetic_run(root, n_items=60, n_detectors=3)
    return root, truth


@pytest.fixture(scope="module")
def client(synth):
    return local_client(Explorer([synth[0]]))


def text(html: str) -> str:
    return " ".join(re.sub(r"<[^>]+>", " ", html).split())


def digest_tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def test_overview_filters_and_sorts_the_result_rows(client, synth):
    rows = json.loads((synth[0] / "results.json").read_text())
    page = client.get("/", params={"detector": "det1"})
    assert page.status_code == 200
    body = page.text.split('id="results"')[1].split("</table>")[0]
    assert body.count("<tr>") == 2  # header + the one det1 row
    assert f"{rows[1]['value']:.3g}" in body
    ordered = client.get("/", params={"sort": "value", "desc": 1}).text.split('id="results"')[1]
    shown = [m for m in re.findall(r'class="c-value">([^<]+)<', ordered)]
    assert shown == [f"{v:.3g}" for v in sorted((r["value"] for r in rows), reverse=True)]
    assert client.get("/", params={"sort": "nonsense"}).status_code == 400


def test_items_filters_match_the_stored_labels_splits_and_thresholds(client, synth):
    _, truth = synth
    labels, scores, ids = truth["labels"], truth["scores"], truth["ids"]
    count = lambda html: int(re.search(r'id="match-count">(\d+) of', html).group(1))  # noqa: E731
    page = client.get("/items", params={**CELL, "label": "hallucination", "split": "test", "per": 500}).text
    expected = [i for n, i in enumerate(ids) if labels[n] == 1 and n % 5 not in (0, 1)]
    assert count(page) == len(expected)
    assert set(re.findall(r'data-id="([^"]+)"', page)) == set(expected)
    # false positives of det0 at its validation threshold (best F1 on val), by hand
    val = np.array([n % 5 == 0 for n in range(len(ids))]) & np.isfinite(scores["det0"])
    t = best_f1_threshold(labels[val], scores["det0"][val])
    fp = [i for n, i in enumerate(ids) if labels[n] == 0 and np.isfinite(scores["det0"][n]) and scores["det0"][n] >= t]
    page = client.get("/items", params={**CELL, "err": "fp:det0", "per": 500}).text
    assert set(re.findall(r'data-id="([^"]+)"', page)) == set(fp)
    assert "validation items" in page
    # text search, pagination, sorting by score with rank 1 on top
    assert count(client.get("/items", params={**CELL, "q": "fact number 42?"}).text) == 1
    top = client.get("/items", params={**CELL, "det": "det2", "sort": "det2", "per": 5, "page": 2}).text
    order = np.argsort(-np.nan_to_num(scores["det2"], nan=-np.inf), kind="stable")
    assert re.findall(r'data-id="([^"]+)"', top) == [ids[n] for n in order[5:10]]
    assert "#6 ·" in top


def test_item_page_shows_every_stored_record_of_the_item(client, synth):
    _, truth = synth
    n = 49  # a NaN score (every 50th item)
    page = client.get(f"/item/{truth['ids'][n]}").text
    assert "Question: What is fact number 49?" in page and "Fact 49 is right." in page
    assert "reasoning for item 49" in page and "sample 2 of item 49" in page and "Confidence 9" in page
    scores = page.split('id="scores"')[1]
    assert scores.count(NAN_REASON) == 3
    assert f'href="/item/{truth["ids"][48]}?' in page and f'href="/item/{truth["ids"][50]}?' in page
    ok = text(client.get(f"/item/{truth['ids'][3]}").text)
    assert f"{truth['scores']['det1'][3]:.6g}" in ok and "999" not in ok.split("Detector scores")[1]


def test_detector_page_counts_and_paired_difference(client, synth):
    _, truth = synth
    labels, s = truth["labels"], truth["scores"]["det0"]
    page = client.get("/detector", params={**CELL, "name": "det0", "vs": "det1"}).text
    test = np.array([n % 5 not in (0, 1) for n in range(len(labels))]) & np.isfinite(s)
    val = np.array([n % 5 == 0 for n in range(len(labels))]) & np.isfinite(s)
    c = at_threshold(labels[test], s[test], best_f1_threshold(labels[val], s[val]))
    panel = page.split('id="panel-0"')[1]
    shown = {k: int(re.search(rf'class="{k}">(\d+)<', panel).group(1)) for k in ("tp", "fp", "fn", "tn")}
    assert shown == {"tp": c.tp, "fp": c.fp, "fn": c.fn, "tn": c.tn}
    data = json.loads(re.search(r'class="curve-data">(.+?)</script>', panel).group(1))
    assert data["pos"] + data["neg"] == int(test.sum()) and data["thresholds"] == sorted(data["thresholds"])[::-1]
    assert 'id="paired-diff"' in page and 'id="panel-1"' in page


@pytest.mark.parametrize("url,status,needle", [
    ("/items?run=0&dataset=../..&model=x", 404, "has no cell"),
    ("/items?run=7&dataset=synth_qa&model=synth-model", 404, "no run number 7"),
    ("/items?run=0&dataset=synth_qa&model=synth-model&page=abc", 400, "malformed query"),
    ("/items?run=0&dataset=synth_qa&model=synth-model&det=../../manifest", 404, "no detector scores"),
    ("/items?run=0&dataset=synth_qa&model=synth-model&err=fp:nope", 404, "no detector scores"),
    ("/items?run=0&dataset=synth_qa&model=synth-model&page=99", 404, "past the last page"),
    ("/item/synth_qa/test/100000", 404, "no item"),
    ("/item/../../../etc/passwd", 404, "Not Found"),  # the client normalises the dots away
    ("/item/synth_qa/..%2F..%2Fmanifest.json", 404, "no item"),
    ("/static/..%2F..%2Fexplorer%2Fdata.py", 404, ""),
    ("/static/explorer.py", 404, "no static file"),
    ("/detector?run=0&dataset=synth_qa&model=synth-model&name=det0&split=all", 400, "split must be"),
    ("/nowhere", 404, ""),
])
def test_bad_requests_are_clear_4xx_pages(client, synth, url, status, needle):
    before = digest_tree(synth[0])
    reply = client.get(url)
    assert reply.status_code == status, reply.text[-500:]
    assert "Traceback" not in reply.text and "root:" not in reply.text and "def " not in reply.text
    assert needle in reply.text
    assert digest_tree(synth[0]) == before  # read-only


def test_bad_run_paths_and_in_progress_runs(tmp_path, synth):
    with pytest.raises(HaldetError, match="run directory not found"):
        Explorer([tmp_path / "missing"])
    (tmp_path / "empty").mkdir()
    with pytest.raises(HaldetError, match=r"no manifest\.json or results\.json"):
        Explorer([tmp_path / "empty"])
    # in progress: a manifest with a config, records so far, no results and no split yet
    run = tmp_path / "running"
    RunStore(run).write_manifest({"status": "running", "config": {"datasets": [DATASET], "models": [MODEL]}})
    RunStore(run).cell(DATASET, MODEL).log("generate").append(
        [{"id": f"{DATASET}/test/1", "key": "g", "prompt": "Question: half way?", "response": "so far"}])
    client = local_client(Explorer([run]))
    assert "No result rows yet" in client.get("/").text
    page = client.get("/items", params=CELL).text
    assert "1 of 1 items" in page and "half way?" in page
    with open(RunStore(run).cell(DATASET, MODEL).root / "generate.jsonl", "a") as fh:  # a line in flight
        fh.write('{"id": "synth_qa/test/2", "key": "g", "prompt": "Question: next?", "resp')
    assert "1 of 1 items" in client.get("/items", params=CELL).text
    with open(RunStore(run).cell(DATASET, MODEL).root / "generate.jsonl", "a") as fh:
        fh.write('onse": "done"}\n')
    assert "2 of 2 items" in client.get("/items", params=CELL).text


def test_a_merged_report_and_its_runs(tmp_path, synth):
    """`haldet report A B --out DIR` writes results only: its rows show, naming their runs, and with the runs given
    too, a row's detector link opens that run's cell."""
    from haldet.report.build import report_runs

    other = tmp_path / "other"
    write_synthetic_run(other, n_items=30, n_detectors=1, seed=3)
    report_runs([synth[0], other], tmp_path / "merged", n_boot=10)
    client = local_client(Explorer([tmp_path / "merged", synth[0]]))
    page = client.get("/", params={"detector": "det1"}).text
    body = page.split('id="results"')[1].split("</table>")[0]
    assert body.count("<tr>") == 3 and ">run<" in body  # header, the report's det1 row, the run's own
    assert body.count(f'class="c-run">{synth[0].name}<') == 2
    assert f'href="/detector?run=1&amp;dataset={DATASET}' in body
    assert "merged report" in page


def test_suite_run_shows_units_with_their_labels_and_scores(tmp_path):
    """A unit-level suite run: labels and units come from the data, unit scores from the `@sentence` log."""
    from haldet.datasets.base import get_adapter

    instances, _ = get_adapter("verigray", FIXTURES / "datasets").load(limit=None, seed=42, on_bad_row="skip")
    run = RunStore(tmp_path / "suite")
    run.write_manifest({"status": "done", "config": {"datasets": ["verigray"], "models": ["m"], "limit": None,
                                                     "data_dir": str(FIXTURES / "datasets")}})
    cell = run.cell("verigray", "m")
    cell.log("generate").append({"id": i.id, "key": "g", "prompt": i.context, "response": i.response,
                                 "provided": True} for i in instances)
    cell.log("scores/u@sentence").append({"id": i.id, "key": "k", "values": [0.1 * (k + 1) for k in range(
        len(i.units_of("sentence")))], "reasons": ["" for _ in i.units_of("sentence")]} for i in instances)
    client = local_client(Explorer([run.root]))
    inst = instances[0]
    page = client.get(f"/item/{inst.id}").text
    units = page.split('id="units"')[1].split("</table>")[0]
    for k, unit in enumerate(inst.units_of("sentence")):
        assert html_escape(inst.response[unit.start:unit.end]) in units
        assert f">{unit.category}<" in units or f">{unit.category} (" in units
        assert f"{0.1 * (k + 1):.4g}" in units
    assert page.count('class="unit lab-') >= len(inst.units_of("sentence"))
    label = inst.units_of("response")[0].category
    assert f'id="item-label" class="lab lab-{label}">{label}<' in page


def html_escape(s: str) -> str:
    import html

    return html.escape(s)


def test_question_excerpt_of_a_chat_prompt():
    prompt = "<|im_start|>system\nBe honest.<|im_end|>\n<|im_start|>user\nContext: x\nQuestion: Who wrote it?" \
             "<|im_end|>\n<|im_start|>assistant\n"
    assert question_excerpt(prompt) == "Who wrote it?"
    assert question_excerpt("Summarise: " + "word " * 100, limit=20).endswith("…")


def test_a_real_run_agrees_with_its_results_and_the_report_reader():
    """The stored run of the embedded model (tests/fixtures/run_fixture): every detector page's test AUROC is the
    run's own result row, and the items' labels and scores are those the report reader (rundata) reads."""
    from haldet.report.rundata import load_run

    root = FIXTURES / "run_fixture"
    before = digest_tree(root)
    explorer = Explorer([root])
    client = local_client(explorer)
    rows = [r for r in json.loads((root / "results.json").read_text()) if r["metric"] == "auroc"]
    cell = explorer.cell(0, "halueval_qa", "smollm2-135m")
    reference = load_run(root).cell_scores("halueval_qa", "smollm2-135m")
    for row in rows:
        page = client.get("/detector", params={"run": 0, "dataset": row["dataset"], "model": row["model"],
                                               "name": row["detector"]}).text
        assert f'class="auroc">{row["value"]:.4g}<' in page, row["detector"]
        at = [cell.position[i] for i in reference.ids]
        np.testing.assert_array_equal(cell.labels[at], reference.labels)
        np.testing.assert_allclose(cell.columns[row["detector"]].values[at], reference.scores[row["detector"]])
    overview = client.get("/").text
    assert "triviaqa" in overview and "failed: cannot load dataset" in overview  # the failed cell, with its reason
    assert digest_tree(root) == before


def test_view_without_the_extra_says_how_to_install(monkeypatch):
    import sys

    from haldet.cli.view import view

    monkeypatch.setitem(sys.modules, "uvicorn", None)
    with pytest.raises(HaldetError, match=r"pip install 'haldet\[view\]'"):
        view([FIXTURES / "run_fixture"])


def test_loopback_and_a_taken_port():
    from haldet.explorer.serve import bind, is_loopback

    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("192.168.1.5")
    sock = bind("127.0.0.1", 0)
    try:
        with pytest.raises(HaldetError, match=r"cannot listen on 127\.0\.0\.1"):
            bind("127.0.0.1", sock.getsockname()[1])
    finally:
        sock.close()


def test_a_corrupt_stored_record_is_a_page_naming_the_file(tmp_path):
    root = tmp_path / "run"
    write_synthetic_run(root, n_items=20, n_detectors=1)
    path = RunStore(root).cell(DATASET, MODEL).root / "scores" / "det0.jsonl"
    data = path.read_bytes()
    path.write_bytes(data.replace(b'"value":', b'"value":}', 1))  # the first line no longer parses
    reply = local_client(Explorer([root])).get("/items", params=CELL)
    assert reply.status_code == 422
    assert "corrupt record at byte 0" in reply.text and "det0.jsonl" in reply.text and "Traceback" not in reply.text


def test_cells_are_read_once_until_their_files_change(tmp_path):
    root = tmp_path / "run"
    write_synthetic_run(root, n_items=20, n_detectors=1)
    explorer = Explorer([root])
    client = local_client(explorer)
    cell = explorer.cell(0, DATASET, MODEL)
    client.get("/")  # re-reads the manifest
    assert client.get("/items", params=CELL).status_code == 200
    assert explorer.cell(0, DATASET, MODEL) is cell and cell.ids  # the same loaded cell, not read again
    RunStore(root).cell(DATASET, MODEL).log("generate").append([{"id": f"{DATASET}/test/99", "key": "g",
                                                                  "prompt": "Question: late?", "response": "r"}])
    RunStore(root).cell(DATASET, MODEL).record_keys("generate", {f"{DATASET}/test/99": "g"}, add=True)  # used
    assert "21 of 21 items" in client.get("/items", params=CELL).text


def test_view_warns_when_not_on_loopback(monkeypatch, capsys):
    import haldet.cli.view as view_module
    from haldet.cli.view import view

    served = []
    monkeypatch.setattr(view_module, "serve", lambda runs, host, port, on_ready, **_: served.append((host, port)))
    view([FIXTURES / "run_fixture"], host="0.0.0.0", port=0)
    view([FIXTURES / "run_fixture"], host="127.0.0.1", port=0)
    err = capsys.readouterr().err
    assert served == [("0.0.0.0", 0), ("127.0.0.1", 0)]
    assert err.count("not loopback") == 1 and "0.0.0.0" in err


def test_calibrated_probabilities_show_only_under_the_recorded_key(tmp_path):
    root = tmp_path / "run"
    truth = write_synthetic_run(root, n_items=20, n_detectors=2)
    scores = RunStore(root).cell(DATASET, MODEL).root / "scores"
    test_ids = truth["splits"]["test"]
    probs = {i: round(0.05 + 0.9 * n / len(test_ids), 4) for n, i in enumerate(test_ids)}
    (scores / "det0.calibrated.json").write_text(json.dumps({"key": "key0", "method": "platt",
                                                             "probabilities": probs}))
    # det1's probabilities were made from scores under other settings: not the ones shown, never displayed
    (scores / "det1.calibrated.json").write_text(json.dumps({"key": "stale", "method": "isotonic",
                                                             "probabilities": {i: 0.777 for i in test_ids}}))
    client = local_client(Explorer([root]))
    item = test_ids[3]
    rows = client.get(f"/item/{item}").text.split('id="scores"')[1].split("</table>")[0]
    det0, det1 = (text(r) for r in rows.split('<tr data-detector="')[1:])
    assert f"P(halluc.) {probs[item]:.3g}, platt" in det0
    assert "P(halluc.)" not in det1 and "0.777" not in det1 and "isotonic" not in det1
    page = client.get("/items", params={**CELL, "split": "test", "per": 500}).text
    header = page.split("<thead>")[1].split("</thead>")[0]
    assert text(header).count("P(halluc.)") == 1 and "platt" in header and "isotonic" not in header
    shown = dict(re.findall(r'data-id="([^"]+)">.*?data-p="([^"]+)"', page, flags=re.S))
    assert {i: float(p) for i, p in shown.items()} == probs
    assert "0.777" not in page


def test_foreign_host_is_refused(client):
    """DNS rebinding: a page on another site that resolves its own name to 127.0.0.1 sends that name as Host."""
    for host in ("evil.example", "evil.example:8000", "127.0.0.1.evil.example"):
        reply = client.get("/", headers={"Host": host})
        assert reply.status_code == 400, host
        assert "det0" not in reply.text and "<html" not in reply.text.lower()
    for host in ("127.0.0.1", "127.0.0.1:8123", "localhost:8123", "[::1]:8123"):
        assert client.get("/", headers={"Host": host}).status_code == 200, host


def test_allowed_hosts_follow_the_bind_address():
    from haldet.explorer.security import allowed_hosts

    assert allowed_hosts("127.0.0.1") == ["127.0.0.1", "localhost", "[::1]"]
    assert allowed_hosts("::1") == ["127.0.0.1", "localhost", "[::1]"]
    assert allowed_hosts("10.1.2.3", ["Box.Lab"])[-2:] == ["10.1.2.3", "box.lab"]
    assert "evil.example" not in allowed_hosts("0.0.0.0")


def test_protective_headers_on_every_page(client):
    for path in ("/", f"/items?run=0&dataset={DATASET}&model={MODEL}", "/static/explorer.js", "/no-such-page"):
        reply = client.get(path)
        assert reply.headers["x-content-type-options"] == "nosniff", path
        assert reply.headers["x-frame-options"] == "DENY", path
        policy = reply.headers["content-security-policy"]
        assert "script-src 'self'" in policy and "frame-ancestors 'none'" in policy and "unsafe" not in policy, path


def test_pivot_view_is_detector_by_metric(client, synth):
    """One row per detector and one column per metric, each value the stored row's (hand-read from results.json)."""
    import json as _json

    stored = _json.loads((synth[0] / "results.json").read_text())
    reply = client.get("/", params={"view": "pivot"})
    assert reply.status_code == 200
    body = reply.text.split('id="pivot"', 1)[1].split("</table>", 1)[0]
    detectors = sorted({r["detector"] for r in stored})
    assert body.count("<tr>") - 1 == len(detectors)  # header + one row per detector
    header = re.findall(r"<th>([^<]+)</th>", body.split("</thead>")[0])
    metrics = list(dict.fromkeys(r["metric"] for r in stored))
    assert header[6:7] == ["auroc"] and sorted(header[6:]) == sorted(metrics)
    for row in stored:
        if row["metric"] == "auroc":
            line = next(tr for tr in body.split("<tr>") if f">{row['detector']}</a>" in tr)
            cell = re.search(r'class="c-value m-auroc"[^>]*>([^<]+)', line).group(1)
            assert cell == f"{row['value']:.3g}"
    assert client.get("/", params={"view": "wide"}).status_code == 400


def test_histogram_axis_suits_the_range():
    from haldet.explorer.charts import histogram_axis

    perplexity = np.r_[np.linspace(4, 12, 95), [150, 300, 450, 600, 630]]  # spans two decades, all positive
    axis, edges = histogram_axis(perplexity)
    assert axis == "log" and edges[0] == 4 and np.isclose(edges[-1], 630)
    assert np.allclose(edges[1:] / edges[:-1], (630 / 4) ** (1 / 30))  # equal ratios
    outliers = np.r_[np.linspace(-1, 1, 98), [-500.0, 500.0]]  # two far outliers, values of both signs
    axis, edges = histogram_axis(outliers)
    counts = np.histogram(outliers, bins=edges)[0]
    assert axis == "quantile" and counts.max() - counts.min() <= 2  # equal counts, not one bar of 98
    axis, edges = histogram_axis(np.linspace(0, 1, 50))
    assert axis == "linear" and np.allclose(np.diff(edges), 1 / 30)
    assert histogram_axis(np.array([0.3, 0.3]))[0] == "linear"
