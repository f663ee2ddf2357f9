"""`haldet view` in a real headless Chromium (Debian's, driven by Playwright; no browser download): the CLI serves
on a free loopback port and prints the URL; the overview filters; an items page opens an item whose shown label and
score are the stored ones; the detector x metric view; the threshold slider moves the confusion counts to the
values computed here; a screenshot is not blank; Ctrl-C stops the server cleanly. All of it under the explorer's
content security policy: a blocked script or style would show as a console error, and the test requires none."""

from __future__ import annotations

import io
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from haldet.evaluation.thresholds import at_threshold, best_f1_threshold
from haldet.testing.synthetic_run import DATASET, MODEL, write_synthetic_run
from repo_paths import REPO

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
pytestmark = pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="Debian package chromium is not installed")
playwright = pytest.importorskip("playwright.sync_api")
pytest.importorskip("uvicorn")


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    root = tmp_path_factory.mktemp("view") / "run"
    truth = write_synthetic_run(root, n_items=40, n_detectors=2)
    src = REPO / "src"
    proc = subprocess.Popen([sys.executable, "-m", "haldet", "view", str(root)], stderr=subprocess.PIPE, text=True,
                            env={"PYTHONPATH": str(src), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"})
    url = None
    deadline = time.monotonic() + 60
    while url is None and time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        if (m := re.search(r"(http://127\.0\.0\.1:\d+/)", line)):
            url = m.group(1)
    assert url, "haldet view printed no URL"
    yield url, truth, proc
    if proc.poll() is None:
        proc.kill()


def test_explorer_in_chromium(served):
    url, truth, proc = served
    labels, scores, ids = truth["labels"], truth["scores"], truth["ids"]
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM,
                                    args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"])
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
        first = page.goto(url)
        assert "script-src 'self'" in first.headers["content-security-policy"]  # the pages below work under it
        page.click("#view-pivot")
        assert page.locator("#pivot tbody tr").count() == 2  # one row per detector
        page.click("#view-rows")
        page.select_option("#result-filters select[name=detector]", "det1")
        page.click("#result-filters button[type=submit]")
        assert page.locator("#results tbody tr").count() == 1
        assert page.locator("#results tbody td.c-detector").inner_text() == "det1"
        page.click("a.items-link")
        page.select_option("#item-filters select[name=label]", "hallucination")
        page.click("#apply")
        shown = page.locator("#items tbody tr").count()
        assert shown == int(labels.sum())
        page.locator("#items tbody td.id a").nth(2).click()
        item_id = page.locator("#item-id").inner_text()
        n = ids.index(item_id)
        assert page.locator("#item-label").inner_text() == ("hallucination" if labels[n] else "correct")
        shown_score = page.locator("#scores tr[data-detector=det0] td.score").inner_text()
        assert shown_score == f"{scores['det0'][n]:.6g}"
        png = page.screenshot(full_page=True)
        page.goto(f"{url}detector?run=0&dataset={DATASET}&model={MODEL}&name=det0")
        slider = page.locator("section#panel-0 input.threshold")
        assert page.locator("#panel-0 svg.roc text.tick").count() == 10  # tick values on both axes
        assert page.locator("#panel-0 svg.hist text.tick").count() == 5
        data = page.evaluate("JSON.parse(document.querySelector('#panel-0 script.curve-data').textContent)")
        test = np.array([ids.index(i) for i in truth["splits"]["test"]])
        val = np.array([ids.index(i) for i in truth["splits"]["val"]])
        y, s = labels[test], scores["det0"][test]
        ok = np.isfinite(scores["det0"][val])
        for k in (None, len(data["thresholds"]) // 2):  # as loaded (the validation threshold), then moved
            if k is None:
                c = at_threshold(y, s, best_f1_threshold(labels[val][ok], scores["det0"][val][ok]))
            else:
                slider.evaluate(f"(el) => {{ el.value = {k}; el.dispatchEvent(new Event('input')); }}")
                c = at_threshold(y, s, data["thresholds"][k])
            got = {name: int(page.locator(f"#panel-0 td.{name}").inner_text()) for name in ("tp", "fp", "fn", "tn")}
            assert got == {"tp": c.tp, "fp": c.fp, "fn": c.fn, "tn": c.tn}
        assert errors == []
        browser.close()
    from PIL import Image

    image = Image.open(io.BytesIO(png)).convert("L")
    assert image.getextrema()[1] - image.getextrema()[0] > 100 and len(set(image.getdata())) > 10  # not blank
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0 and "haldet view stopped" in err and "Traceback" not in err
