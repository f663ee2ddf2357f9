"""The drawing layer (haldet.figures): curves drawn through sklearn's own points (thinned only when long), PDF and
PNG files of the expected size and structure, renders that are identical byte for byte, SVG a page can inline."""

from __future__ import annotations

import re
import struct

import numpy as np
import pytest
from sklearn.metrics import precision_recall_curve, roc_curve

from haldet.figures.charts import heatmap, line_figure
from haldet.figures.curves import MAX_POINTS, curve_figure, thin
from haldet.figures.data import PR, ROC, Curve, Series
from haldet.figures.render import PNG_DPI, FigureSet, render


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def pdf_structure(data: bytes) -> dict[str, object]:
    """A small PDF reader: every object the cross-reference table names starts at its offset, the trailer names
    a root; returns the page count, the page's MediaBox and the Info dictionary's keys."""
    assert data.startswith(b"%PDF-1.") and data.rstrip().endswith(b"%%EOF")
    start = int(re.search(rb"startxref\s+(\d+)\s+%%EOF\s*$", data).group(1))
    assert data[start:start + 4] == b"xref"
    first, count = map(int, re.match(rb"xref\s+(\d+) (\d+)\s+", data[start:]).groups())
    table = re.findall(rb"(\d{10}) (\d{5}) ([nf])", data[start:])[:count]
    for k, (offset, _gen, kind) in enumerate(table):
        if kind == b"n":
            assert data[int(offset):].startswith(f"{first + k} 0 obj".encode()), k
    trailer = data[start:].split(b"trailer", 1)[1]
    assert re.search(rb"/Root \d+ 0 R", trailer)
    info = re.search(rb"/Info (\d+) 0 R", trailer)
    keys = []
    if info:
        obj = data[data.index(info.group(1) + b" 0 obj"):]
        keys = re.findall(rb"/(\w+) ", obj[: obj.index(b"endobj")])
    box = re.search(rb"/MediaBox \[\s*([\d.]+) ([\d.]+) ([\d.]+) ([\d.]+)\s*\]", data)
    return {"pages": len(re.findall(rb"/Type /Page\b(?!s)", data)), "mediabox": [float(v) for v in box.groups()],
            "info": {k.decode() for k in keys}}


def test_roc_and_pr_curves_are_drawn_through_sklearns_points() -> None:
    rng = np.random.default_rng(1)
    y = np.array([1] * 12 + [0] * 18)
    s = y + rng.normal(size=30)
    fpr, tpr, _ = roc_curve(y, s)
    fig = curve_figure([Curve("d", fpr, tpr, 0.7)], kind=ROC)
    drawn = fig.axes[0].lines[-1].get_xydata()          # the chance diagonal is drawn first
    assert np.array_equal(drawn, np.column_stack([fpr, tpr]))
    precision, recall, _ = precision_recall_curve(y, s)
    fig = curve_figure([Curve("d", recall, precision, 0.6)], kind=PR, baseline=0.4)
    line = fig.axes[0].lines[-1]
    assert np.array_equal(line.get_xydata(), np.column_stack([recall, precision]))
    assert line.get_drawstyle() == "steps-post"           # average precision's step shape
    assert fig.axes[0].lines[0].get_ydata()[0] == 0.4     # the random detector's precision, dashed


def test_a_long_curve_is_thinned_to_its_own_points() -> None:
    rng = np.random.default_rng(2)
    y = rng.integers(0, 2, 20_000)
    fpr, tpr, _ = roc_curve(y, y * 0.8 + rng.normal(size=y.size))
    assert len(fpr) > 2 * MAX_POINTS
    fig = curve_figure([Curve("d", fpr, tpr, 0.7)], kind=ROC)
    drawn = fig.axes[0].lines[-1].get_xydata()
    assert 0.9 * MAX_POINTS <= len(drawn) <= MAX_POINTS
    assert tuple(drawn[0]) == (0.0, 0.0) and tuple(drawn[-1]) == (1.0, 1.0)
    full = {(a, b) for a, b in zip(fpr, tpr, strict=True)}
    assert all((a, b) in full for a, b in drawn)           # a subset of sklearn's points, nothing invented
    assert np.max(np.abs(np.interp(fpr, drawn[:, 0], drawn[:, 1]) - tpr)) < 0.02  # and close to the whole curve


def test_thin_known_answers() -> None:
    x, y = thin([0, 1, 2], [0, 1, 0], limit=3)
    assert x.tolist() == [0, 1, 2] and y.tolist() == [0, 1, 0]      # short: unchanged
    x, y = thin(np.arange(101.0), np.zeros(101), limit=11)          # evenly spaced along the length
    assert x.tolist() == list(range(0, 101, 10))
    x, _ = thin([0.0] * 500 + [1.0], [0.0] * 501, limit=10)          # repeated points: first and last only
    assert x.tolist() == [0.0, 1.0]


def test_png_and_pdf_have_the_figures_size_and_parse() -> None:
    fig = line_figure([Series("a", [(0.0, 0.1, "1"), (1.0, 0.3, "2")])], title="T")
    width, height = fig.get_size_inches()
    assert (width, height) == pytest.approx((0.62 + 3.2 + 0.2 + 0.45 + 0.055, 0.5 + 2.6 + 0.32))  # axes + margins
    done = render(fig, "t", "Line T")
    assert png_size(done.files["png"]) == (int(width * PNG_DPI), int(height * PNG_DPI))
    pdf = pdf_structure(done.files["pdf"])
    assert pdf["pages"] == 1 and pdf["mediabox"] == pytest.approx([0, 0, width * 72, height * 72])
    assert "Title" in pdf["info"] and "CreationDate" not in pdf["info"]
    assert b"/Title (Line T)" in done.files["pdf"]                     # the title, for a paper's figure list


def _figure(k: int = 14) -> object:
    return curve_figure([Curve(f"det{i}", [0, 0.1 * (i % 5), 1], [0, 0.6, 1], 0.6 + 0.01 * i) for i in range(k)],
                        title="cell")


def test_two_renders_are_byte_identical(monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever the clock says; the control shows matplotlib's own PDF would differ."""
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1000000000")
    a = render(_figure(), "f")
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1600000000")
    b = render(_figure(), "f")
    assert a.files == b.files and a.svg == b.svg
    plain = []
    for epoch in ("1000000000", "1600000000"):
        import io

        monkeypatch.setenv("SOURCE_DATE_EPOCH", epoch)
        buf = io.BytesIO()
        _figure(2).savefig(buf, format="pdf")
        plain.append(buf.getvalue())
    assert plain[0] != plain[1]                                       # negative control: a dated PDF


def test_inline_svg_names_no_url_and_ids_differ_between_figures() -> None:
    figures = FigureSet(formats=())
    html = figures.add("roc a", _figure(3), "A") + figures.add("roc a", _figure(3), "B")
    assert [r.name for r in figures.rendered] == ["roc-a", "roc-a-2"] and list(figures.files()) == []
    assert set(re.findall(r"https?://[^\"' ]+", html)) == {"http://www.w3.org/2000/svg"}
    assert "<?xml" not in html and "DOCTYPE" not in html and "xlink:" not in html
    ids = [set(re.findall(r'id="([^"]+)"', r.svg)) for r in figures.rendered]
    salted = {i for i in ids[0] if re.search(r"[0-9a-f]{10}$", i)}   # matplotlib's clip-path and marker ids
    assert salted and not salted & ids[1]
    assert 'aria-label="A"' in html and "det0 (AUROC" in html        # text stays text: searchable, accessible


def test_heatmap_cells_print_their_values_and_missing_is_grey() -> None:
    fig = heatmap(["a", "b"], ["QA", "Math"], [[0.5, None], [1.0, 0.3]], title="t")
    ax = fig.axes[0]
    texts = [t.get_text() for t in ax.texts]
    assert texts == ["50.0", "—", "100.0", "30.0"]
    grid = ax.images[0].get_array()
    assert grid.mask.tolist() == [[False, True], [False, False]]
    rgba = ax.images[0].to_rgba(grid)
    assert tuple(np.round(rgba[0, 0, :3], 2)) == (1.0, 1.0, 1.0)       # chance is white
    assert rgba[1, 0, 1] > rgba[1, 0, 0] and rgba[1, 1, 0] > rgba[1, 1, 1]  # green above, purple below
    assert [t.get_color() for t in ax.texts][2:] == ["white", "white"]  # dark cells get white text
