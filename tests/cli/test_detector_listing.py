"""Every registered detector says which method family it belongs to, which paper it comes from and which peer tools
also ship it (declared on its own class); `haldet detectors list` groups by family, and docs/detectors.md's method
table is generated from those declarations (`python tests/cli/test_detector_listing.py` rewrites it; the test fails
when the docs differ)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from typer.testing import CliRunner

REPO = Path(__file__).resolve().parents[2]  # (a script too: `python tests/cli/test_detector_listing.py`)

DOCS = REPO / "docs" / "detectors.md"
BEGIN = "<!-- the method table, generated from the detector classes: python tests/cli/test_detector_listing.py -->"
END = "<!-- end of the method table -->"
PEERS = {"lm-polygraph", "TruthTorchLM", "uqlm", "selfcheckgpt"}
FAMILIES = ["information (token probabilities)", "sample consistency", "internal states", "attention",
            "self-assessment", "judges and verifiers", "ensemble"]


def method_table() -> str:
    from haldet.detectors.base import DETECTORS

    rows = ["| method | family | signals | paper | also in |", "|---|---|---|---|---|"]
    built_in = sorted(((cls.method_family, name, cls) for name, cls in DETECTORS
                       if DETECTORS.origin(name) == "built-in"), key=lambda r: (FAMILIES.index(r[0]), r[1]))
    for family, name, cls in built_in:
        signals = ", ".join(sorted(s.value for s in cls.requires))
        rows.append(f"| `{name}` | {family}, {cls.family()} | {signals} | {cls.paper.replace('|', '/')} | "
                    f"{', '.join(cls.peers) or '-'} |")
    return "\n".join(rows)


def documented(text: str) -> str:
    match = re.search(re.escape(BEGIN) + r"\n(.*?)\n" + re.escape(END), text, flags=re.S)
    return match.group(1) if match else ""


def test_every_detector_declares_its_family_paper_and_peers() -> None:
    from haldet.detectors.base import DETECTORS

    for name, cls in DETECTORS:
        if DETECTORS.origin(name) != "built-in":
            continue
        own = vars(cls)  # declared on the class itself: a subclass never passes for its parent's paper
        assert own.get("method_family") in FAMILIES, name
        assert isinstance(own.get("paper"), str) and len(own["paper"]) > 10, name
        assert isinstance(own.get("peers"), tuple) and set(own["peers"]) <= PEERS, name


def test_the_method_table_is_generated_from_the_classes() -> None:
    assert documented(DOCS.read_text()) == method_table(), "run `python tests/cli/test_detector_listing.py`"


def test_list_groups_by_family_and_shows_what_the_default_variant_needs() -> None:
    from haldet.cli import app

    res = CliRunner().invoke(app, ["detectors", "list", "--json"])
    assert res.exit_code == 0, res.output
    rows = {r["name"]: r for r in json.loads(res.output)}
    # the graph detectors default to Jaccard similarity: no NLI model (their NLI variants are opt-in)
    assert [rows[n]["needs"] for n in ("eigv", "ecc", "deg", "num_sem_sets")] == [[]] * 4
    assert rows["kle"]["needs"] == ["nli (nli_model=roberta-large-mnli)"]  # its default variant is NLI
    assert rows["rauq"]["method_family"] == "attention" and "Vazhentsev" in rows["rauq"]["paper"]
    assert rows["pmi"]["peers"] == ["lm-polygraph"]
    text = CliRunner().invoke(app, ["detectors", "list"], terminal_width=400).output
    titles = [line.strip() for line in text.splitlines() if line.strip().startswith("detectors: ")]
    assert titles == [f"detectors: {f}" for f in sorted(FAMILIES)]
    block = text.split("detectors: information (token probabilities)")[1].split("detectors: internal states")[0]
    assert "renyi_divergence" in block and "semantic_entropy" not in block


if __name__ == "__main__":
    sys.path.insert(0, str(REPO / "src"))
    text = DOCS.read_text()
    if BEGIN not in text:
        raise SystemExit(f"add the markers {BEGIN!r} and {END!r} to {DOCS}")
    DOCS.write_text(re.sub(re.escape(BEGIN) + r"\n.*?\n" + re.escape(END),
                           lambda m: f"{BEGIN}\n{method_table()}\n{END}", text, flags=re.S))
