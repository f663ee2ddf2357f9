"""A drawn figure rendered three ways: inline SVG for the self-contained HTML report, PDF and PNG for a paper.

Every render is reproducible byte for byte: no creation date in the PDF, no software stamp in the PNG, and SVG ids
salted with the figure's own name (stable, and distinct between the figures of one page). The figure is released
as soon as it is rendered, so a report with many figures holds bytes, not figures.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from html import escape
from typing import Any

import matplotlib as mpl
from matplotlib.figure import Figure

from haldet.figures.style import RC

FORMATS = ("pdf", "png")
PNG_DPI = 150  # slides and web pages; a paper takes the PDF (vectors, TrueType fonts: no Type 3)
# no dates, no software versions: the same figure gives the same bytes
_METADATA: dict[str, dict[str, Any]] = {"pdf": {"CreationDate": None, "ModDate": None, "Producer": None,
                                                "Creator": "haldet"},
                                        "png": {"Software": None}, "svg": {"Date": None}}


@dataclass(frozen=True)
class Rendered:
    """One figure: its file name stem, its title, the SVG element for HTML, and format -> file bytes."""

    name: str
    title: str
    svg: str
    files: dict[str, bytes] = field(default_factory=dict)

    def file_names(self) -> list[str]:
        return [f"{self.name}.{fmt}" for fmt in self.files]


def slug(text: str) -> str:
    """A file-name stem: lower case letters, digits, '.', '_' and '-' only."""
    out = re.sub(r"[^a-z0-9._-]+", "-", text.lower()).strip("-.")
    return out or "figure"


def _inline_svg(raw: bytes, title: str) -> str:
    """matplotlib's SVG document as an element to paste into HTML: no XML prolog, doctype or RDF metadata (they
    name external URLs), xlink:href as plain href, scaled to its container and labelled for screen readers."""
    svg = raw.decode()
    svg = svg[svg.index("<svg"):]
    svg = re.sub(r"<metadata>.*?</metadata>\s*", "", svg, flags=re.S)
    svg = re.sub(r'\s+xmlns:xlink="[^"]*"', "", svg, count=1).replace("xlink:href=", "href=")
    return svg.replace("<svg ", f'<svg role="img" aria-label="{escape(title, quote=True)}" '
                                 'style="max-width:100%;height:auto" ', 1).strip()


def render(fig: Figure, name: str, title: str = "", formats: Sequence[str] = FORMATS) -> Rendered:
    """SVG plus each of `formats` ("pdf", "png") of `fig`, then the figure is cleared."""
    files: dict[str, bytes] = {}
    with mpl.rc_context({**RC, "svg.hashsalt": name}):
        if fig.get_layout_engine() is not None:  # lay out once, not once per format (small multiples: seconds)
            fig.draw_without_rendering()
            fig.set_layout_engine("none")
        for fmt in ("svg", *formats):
            buf = io.BytesIO()
            metadata = {**_METADATA[fmt], **({"Title": title} if title and fmt != "svg" else {})}
            fig.savefig(buf, format=fmt, metadata=metadata, dpi=PNG_DPI if fmt == "png" else "figure")
            files[fmt] = buf.getvalue()
    fig.clear()
    return Rendered(name, title, _inline_svg(files.pop("svg"), title), files)


class FigureSet:
    """The figures of one report, in the order drawn, each with a unique name; `add` returns its HTML."""

    def __init__(self, formats: Sequence[str] = FORMATS) -> None:
        self.formats = tuple(formats)
        self.rendered: list[Rendered] = []
        self._names: set[str] = set()

    def add(self, name: str, fig: Figure, title: str = "") -> str:
        stem = base = slug(name)
        k = 1
        while stem in self._names:
            k += 1
            stem = f"{base}-{k}"
        self._names.add(stem)
        done = render(fig, stem, title, self.formats)
        self.rendered.append(done)
        return f'<figure id="fig-{stem}">{done.svg}</figure>'

    def files(self) -> Iterator[tuple[str, bytes]]:
        """(file name, bytes) of every rendered file, figure by figure."""
        for r in self.rendered:
            for fmt, data in r.files.items():
                yield f"{r.name}.{fmt}", data
