"""The explorer's item page shows a reasoning model's reasoning folded (a <details> element) above its answer, and
says why an output has no answer; the page keeps the explorer's CSP (no inline script or style)."""

from __future__ import annotations

import json
import re

import pytest

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient

from haldet.explorer.app import create_app
from haldet.explorer.data import Explorer
from haldet.testing.synthetic_run import write_synthetic_run


def test_item_page_folds_the_reasoning_above_the_answer(tmp_path) -> None:
    root = tmp_path / "run"
    truth = write_synthetic_run(root, n_items=20, n_detectors=1)
    (log,) = list(root.glob("*/*/generate.jsonl"))
    records = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    thought = {**records[3], "reasoning": "Fact 3 <b>might</b> be wrong; check.", "reasoning_ids": [5, 6, 7]}
    cut = {**records[4], "response": "", "reasoning": "still thinking", "no_answer": "no answer: cut off"}
    with log.open("a") as fh:
        fh.write(json.dumps(thought) + "\n" + json.dumps(cut) + "\n")
    client = TestClient(create_app(Explorer([root])), base_url="http://127.0.0.1")
    response = client.get(f"/item/{truth['ids'][3]}")
    page = response.text
    fold = page.index('<details class="thinking" id="thinking">')
    assert fold < page.index('id="answer"') and "<details" not in page[:fold]
    assert "Fact 3 &lt;b&gt;might&lt;/b&gt; be wrong; check." in page and "3 tokens" in page  # escaped, folded
    assert not re.search(r"<script(?![^>]*\ssrc=)|<style|\sstyle=|\son\w+=", page)  # CSP: nothing inline
    assert "script-src 'self'" in response.headers["content-security-policy"]
    other = client.get(f"/item/{truth['ids'][4]}").text
    assert 'id="no-answer">no answer: cut off' in other and "still thinking" in other
    assert 'id="thinking"' not in client.get(f"/item/{truth['ids'][5]}").text  # no reasoning, no fold
