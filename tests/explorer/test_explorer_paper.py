"""The explorer's paper page (`/paper?name=NAME`): a paper's numbers beside the matching result cells, inside /
outside marked in words, the cells that cannot match with their reasons, OpenHalDet's oriented Table 2; the page
keeps the explorer's content security policy (no inline script or style)."""

from __future__ import annotations

import re
from pathlib import Path

from fastapi.testclient import TestClient
from test_papers import LLAMA3B, _relabel, _row

from haldet.explorer.app import create_app
from haldet.explorer.data import Explorer


def test_paper_page_marks_inside_and_outside_and_lists_what_cannot_match(tmp_path: Path) -> None:
    rows = [_row(LLAMA3B, "triviaqa", "perplexity", 0.80, 0.78, 0.85),  # Table 9: 83.10, inside our CI
            _row(LLAMA3B, "arc_challenge", "perplexity", 0.65, 0.60, 0.70),  # 73.51, outside
            _row(LLAMA3B, "triviaqa", "self_eval", 0.7, 0.6, 0.8, variant="prompted")]  # not the preset's variant
    run = tmp_path / "run"
    _relabel(run, rows, {"models": [LLAMA3B]})
    client = TestClient(create_app(Explorer([run])), raise_server_exceptions=False, base_url="http://127.0.0.1")
    page = client.get("/paper", params={"name": "openhaldet"})
    assert page.status_code == 200
    html = page.text
    matched = html.split('id="paper-matched"')[1].split("</table>")[0]
    inside = re.search(r'<tr class="ci-inside"><td>Table 9</td><td>triviaqa</td>.*?</tr>', matched, re.S)
    outside = re.search(r'<tr class="ci-outside"><td>Table 9</td><td>arc_challenge</td>.*?</tr>', matched, re.S)
    assert inside and '<td class="ci-mark">inside</td>' in inside.group(0) and "0.831" in inside.group(0)
    assert outside and '<td class="ci-mark">outside</td>' in outside.group(0) and "-0.085" in outside.group(0)
    unmatched = html.split('id="paper-unmatched"')[1].split("</table>")[0]
    assert "the paper ran &#39;decision&#39;" in unmatched or "the paper ran 'decision'" in unmatched
    # perplexity's QA column: (0.80 + 0.65) / 2, two of the paper's 8 QA datasets; Table 9's QA Avg. 71.24
    assert 'id="table2-1"' in html and "oriented on the test labels" in html and "72.50† (71.24)" in html
    # the explorer's CSP holds: no inline script or style on the page
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert "<style" not in html and " style=" not in html and not re.search(r"<script(?![^>]*\bsrc=)", html)
    assert '<a href="/paper" id="nav-papers">papers</a>' in client.get("/").text
    assert 'href="/paper?name=verigray"' in client.get("/paper").text
    missing = client.get("/paper", params={"name": "nosuch"})
    assert missing.status_code == 404 and "no paper" in missing.text
    # a substitute backbone: nothing matches, said so
    other = tmp_path / "other"
    _relabel(other, [_row("smollm2-135m", "triviaqa", "perplexity", 0.8, 0.7, 0.9)], {"models": ["smollm2-135m"]})
    client = TestClient(create_app(Explorer([other])), raise_server_exceptions=False, base_url="http://127.0.0.1")
    assert 'id="nothing-matches"' in client.get("/paper", params={"name": "openhaldet"}).text
