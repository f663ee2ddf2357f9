"""The explorer's per-claim view: an item page shows the answer with the claims the run scored (the `units` log the
longform suite writes), each with its span, label, label source, the verifier's reasoning, its evidence and every
claim-level score; the page keeps the explorer's CSP (no inline script or style)."""

from __future__ import annotations

import html
import re

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("httpx")
from fastapi.testclient import TestClient

from haldet.explorer.app import create_app
from haldet.explorer.data import Explorer
from haldet.schema import LABEL_META, Category, SpanLabel
from haldet.store import RunStore
from repo_paths import REPO

ANSWER = "Marta Kessling is a German botanist. She studied at the University of Bonn in 1970."


def _units() -> list[dict]:
    supported = {"source": "verify:openai:verifier-x", "supported": True, "reasoning": "Passage 1 says so.",
                 "retrieval": "bm25", "evidence": [{"title": "Marta Kessling", "text": "Marta Kessling is a German "
                                                    "botanist known for her work on ferns."}], "data_label": 0}
    unsupported = {"source": "verify:openai:verifier-x", "supported": False, "reasoning": "The page names Hamburg.",
                   "retrieval": "bm25", "evidence": [{"title": "Marta Kessling", "text": "Kessling studied biology "
                                                      "at the University of Hamburg."}]}
    return [SpanLabel(start=0, end=36, text=ANSWER[:36], kind="claim", category=Category.CORRECT,
                      meta={"claim": "Marta Kessling is German.", LABEL_META: supported}).model_dump(mode="json"),
            SpanLabel(start=37, end=len(ANSWER), text=ANSWER[37:], kind="claim", category=Category.HALLUCINATION,
                      meta={LABEL_META: unsupported}).model_dump(mode="json"),
            # a second claim inside the first sentence: overlapping, listed (and markable) but not nested
            SpanLabel(start=0, end=14, text=ANSWER[:14], kind="claim", category=Category.INVALID,
                      meta={LABEL_META: {"source": "verify:openai:verifier-x", "supported": None,
                                         "failed": "HTTP 500 (after 1 attempts)", "evidence": []}}
                      ).model_dump(mode="json")]


def _claims_run(root):
    run = RunStore(root)
    run.write_manifest({"status": "done", "config": {"datasets": ["bio_entities"], "models": ["m"]}})
    cell = run.cell("bio_entities", "m")
    item = "bio_entities/test/Marta_Kessling"
    cell.log("generate").append([{"id": item, "key": "g", "prompt": "Tell me a bio of Marta Kessling.",
                                  "response": ANSWER, "provided": False, "n_tokens": 20, "finish_reason": "stop"}])
    units = _units()
    cell.log("units").append([{"id": item, "key": "u", "question": "Tell me a bio of Marta Kessling.",
                               "response": ANSWER, "units": units}])
    # unit scores follow the instance's claim units in order
    cell.log("scores/p_true_claims@claim").append([{"id": item, "key": "k", "values": [0.125, 0.75, float("nan")],
                                                    "reasons": ["", "", "the reply gave no True/False probability"]}])
    return run, item


def test_item_page_shows_each_claim_with_its_label_source_evidence_and_score(tmp_path) -> None:
    run, item = _claims_run(tmp_path / "run")
    client = TestClient(create_app(Explorer([run.root])), raise_server_exceptions=False, base_url="http://127.0.0.1")
    response = client.get(f"/item/{item}")
    assert response.status_code == 200, response.text[:2000]
    page = response.text
    table = page.split('id="units"')[1].split("</table>")[0]
    rows = re.findall(r'<tr class="unit-row" data-start="(\d+)" data-end="(\d+)">(.*?)</tr>', table, re.S)
    assert [(int(a), int(b)) for a, b, _ in rows] == [(0, 14), (0, 36), (37, len(ANSWER))]  # by offset
    by_start = {(int(a), int(b)): body for a, b, body in rows}
    first, second, failed = by_start[(0, 36)], by_start[(37, len(ANSWER))], by_start[(0, 14)]
    assert ">correct<" in first and "claim: Marta Kessling is German." in first and "human: 0" in first
    assert "verify:openai:verifier-x" in first and "Passage 1 says so." in first and "0.125" in first
    assert "<details><summary>1 passage</summary>" in first and "known for her work on ferns." in first
    assert ">hallucination<" in second and "The page names Hamburg." in second and "0.75" in second
    assert "University of Hamburg" in second
    assert "HTTP 500" in failed and "the reply gave no True/False probability" in failed
    # the answer carries its plain text for the page script, and the non-overlapping claims are highlighted
    assert f'data-answer="{html.escape(ANSWER)}"' in page
    shown = page.split('id="answer"')[1].split("</div>")[0]
    assert shown.count('<span class="unit lab-') == 2  # (0, 14) and (37, end); (0, 36) overlaps the first
    # the explorer's CSP: no inline script or style in the page
    assert not re.search(r"<script(?![^>]*\bsrc=)", page) and " style=" not in page and "<style" not in page
    assert "script-src 'self'" in response.headers["content-security-policy"]


def test_clicking_a_claim_marks_its_span_in_chromium(tmp_path) -> None:
    """In a real headless Chromium under the explorer's CSP: a click on a claim's row marks exactly its span (an
    overlapping claim too), a second click shows every unit again; no console error (a blocked script would)."""
    import shutil
    import subprocess
    import sys
    import time
    from pathlib import Path

    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    if not Path(chromium).exists():
        pytest.skip("Debian package chromium is not installed")
    playwright = pytest.importorskip("playwright.sync_api")
    pytest.importorskip("uvicorn")
    run, item = _claims_run(tmp_path / "run")
    src = REPO / "src"
    proc = subprocess.Popen([sys.executable, "-m", "haldet", "view", str(run.root)], stderr=subprocess.PIPE,
                            text=True, env={"PYTHONPATH": str(src), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"})
    try:
        url, deadline = None, time.monotonic() + 60
        while url is None and time.monotonic() < deadline:
            line = proc.stderr.readline()
            if not line:
                break
            if (m := re.search(r"(http://127\.0\.0\.1:\d+/)", line)):
                url = m.group(1)
        assert url, "haldet view printed no URL"
        with playwright.sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium,
                                        args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"])
            page = browser.new_page()
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
            page.goto(url + "item/" + item)
            assert page.locator("#answer span.unit").count() == 2
            page.locator("#units tr.unit-row").nth(1).click()  # (0, 36): overlaps the first, not highlighted alone
            assert page.locator("#answer mark.claim-focus").inner_text() == ANSWER[:36]
            assert page.locator("#answer").inner_text() == ANSWER
            page.locator("#units tr.unit-row").nth(2).click()
            assert page.locator("#answer mark.claim-focus").inner_text() == ANSWER[37:]
            page.locator("#units tr.unit-row").nth(2).click()  # again: every unit shown
            assert page.locator("#answer mark").count() == 0 and page.locator("#answer span.unit").count() == 2
            browser.close()
        assert errors == []
    finally:
        proc.kill()
        proc.wait()


def test_a_data_label_names_who_gave_it() -> None:
    """HalluLens LongWiki's claims carry its verifier's label (source `data`) and who decided it (`by`)."""
    from haldet.explorer.app import _label_details

    unit = SpanLabel(start=0, end=5, text="Marta", kind="claim", category=Category.CORRECT,
                     meta={"claim": "Marta is a botanist", LABEL_META: {"data": "correct", "source": "data",
                                                                       "by": "rule:in_passage"}})
    details = _label_details(unit)
    assert details["source"] == "data (rule:in_passage)" and details["human"] == "correct"
    plain = unit.model_copy(update={"meta": {LABEL_META: {"data": "S", "source": "data"}}})
    assert _label_details(plain)["source"] == "data"
