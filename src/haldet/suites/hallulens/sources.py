"""The user-supplied sources HalluLens builds its test sets from, read in their own schemas.

- **Page file** (GoodWiki-style; jsonl/json/parquet/csv): `title`, the article text in `document` (or GoodWiki's
  `markdown`, or `text`), and the page's difficulty as `h_score` (harmonic centrality, higher = better known) or
  its decile already computed (`h_score_cat` or `decile`, 0 = hardest ... 9 = easiest). Deciles from `h_score`
  are rank-based over the file (ties broken by title), so they do not depend on row order.
- **Taxonomy** (ITIS-like): a table file with `name` (the scientific name, "Genus epithet"), `family`, and the
  domain as `domain` (animal / plant / bacteria) or ITIS's `kingdom` (Animalia / Plantae / Bacteria); or the ITIS
  release tables themselves (`load_itis`): `hierarchy` (hierarchy_string|TSN|Parent_TSN|level|ChildrenCount) and
  `longnames` (tsn|completename), pipe-delimited, no header line, Latin-1 text, as in the ITIS download
  (itisMySQLTables; layout checked against its load script, docs/suites.md), given as their folder, as the
  `hierarchy` file (with `longnames` beside it) or as both files separated by a comma.
- **Medicine file** (a drug list such as the A-Z medicine dataset): `name` ("Augmentin 625 Duo Tablet").

Text lengths are counted in tokens of the packaged MiniLM tokenizer (WordPiece), which is offline and fixed.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from haldet.datasets.formats import read_table
from haldet.errors import HaldetError
from haldet.models.passages import minilm_tokenizer

DOC_FIELDS = ("document", "markdown", "text")
KINGDOMS = {"animalia": "animal", "plantae": "plant", "bacteria": "bacteria"}
DOMAINS = ("animal", "plant", "bacteria")
_HEADING = re.compile(r"^\s*#{1,6}\s+(.*)$", re.MULTILINE)


@dataclass(frozen=True)
class Page:
    title: str
    document: str
    decile: int


@dataclass(frozen=True)
class Section:
    """A piece of a page used as the reference of one question."""

    title: str
    heading: str
    text: str
    n_tokens: int


def _read(path: str | Path, what: str) -> list[dict[str, Any]]:
    p = Path(path)
    if not p.is_file():
        also = " (or, for the taxonomy, the ITIS 'hierarchy' and 'longnames' tables or their folder)" \
            if what == "taxonomy file" else ""
        raise HaldetError(f"{what} not found", where=str(p), hint=f"pass an existing jsonl/json/parquet/csv file{also}")
    return read_table(p)


def _field(row: dict[str, Any], names: Sequence[str], where: str) -> Any:
    for name in names:
        value = row.get(name)
        if value is not None and value != "":
            return value
    raise HaldetError(f"missing field {' / '.join(names)}", where=where,
                      hint="see docs/suites.md (HalluLens sources) for the expected columns")


def load_pages(path: str | Path) -> list[Page]:
    """Pages with their difficulty decile (0 hardest .. 9 easiest)."""
    rows = _read(path, "page file")
    titles: list[str] = []
    docs: list[str] = []
    scores: list[float | None] = []
    deciles: list[int | None] = []
    for i, row in enumerate(rows):
        where = f"{path}, row {i}"
        titles.append(str(_field(row, ("title",), where)))
        docs.append(str(_field(row, DOC_FIELDS, where)))
        given = row.get("h_score_cat", row.get("decile"))
        if given is not None and given != "":
            try:
                value = int(given)
            except (TypeError, ValueError):
                raise HaldetError(f"decile {given!r} is not an integer", where=where) from None
            if not 0 <= value <= 9:
                raise HaldetError(f"decile {value} outside 0..9", where=where)
            deciles.append(value)
            scores.append(None)
        else:
            try:
                scores.append(float(_field(row, ("h_score",), where)))
            except (TypeError, ValueError):
                raise HaldetError(f"h_score {row.get('h_score')!r} is not a number", where=where) from None
            deciles.append(None)
    scored = sorted((i for i, s in enumerate(scores) if s is not None), key=lambda i: (scores[i] or 0.0, titles[i]))
    for rank, i in enumerate(scored):
        deciles[i] = rank * 10 // len(scored)
    return [Page(t, d, int(dec or 0)) for t, d, dec in zip(titles, docs, deciles, strict=True)]


def page_texts(path: str | Path) -> dict[str, str]:
    """title -> article text of a page file (the deciles are not needed): the knowledge source LongWiki's claims
    are verified against, read by the `hallulens_longwiki` adapter for the longform suite's labels."""
    rows = _read(path, "page file")
    return {str(_field(row, ("title",), f"{path}, row {i}")): str(_field(row, DOC_FIELDS, f"{path}, row {i}"))
            for i, row in enumerate(rows)}


def token_count(text: str) -> int:
    return len(minilm_tokenizer()(text, add_special_tokens=False, verbose=False).input_ids)


def sections(page: Page, min_tokens: int, max_tokens: int) -> list[Section]:
    """The page's heading-delimited sections whose length lies in [min_tokens, max_tokens]; a longer section
    contributes its leading paragraphs up to `max_tokens` (when that reaches `min_tokens`)."""
    parts: list[tuple[str, str]] = []
    last, heading = 0, "(lead)"
    for m in _HEADING.finditer(page.document):
        parts.append((heading, page.document[last:m.start()]))
        heading, last = m.group(1).strip(), m.end()
    parts.append((heading, page.document[last:]))
    out = []
    for head, body in parts:
        text = body.strip()
        if not text:
            continue
        n = token_count(text)
        if n > max_tokens:
            kept: list[str] = []
            for para in (p.strip() for p in text.split("\n\n") if p.strip()):
                if token_count("\n\n".join([*kept, para])) > max_tokens:
                    break
                kept.append(para)
            text = "\n\n".join(kept)
            n = token_count(text) if kept else 0
        if min_tokens <= n <= max_tokens:
            out.append(Section(page.title, head, text, n))
    return out


@dataclass(frozen=True)
class Species:
    name: str
    family: str
    domain: str

    @property
    def genus(self) -> str:
        return self.name.split()[0]

    @property
    def epithet(self) -> str:
        return " ".join(self.name.split()[1:])


ITIS_TABLES = ("hierarchy", "longnames")
FAMILY_SUFFIXES = ("idae", "aceae")  # zoological (ICZN) and botanical/bacterial (ICN, ICNP) family endings


def _itis_table(folder: Path, name: str) -> Path | None:
    found = sorted(p for p in folder.iterdir() if p.is_file() and p.name.split(".")[0].lower() == name)
    return found[0] if found else None


def itis_files(spec: str | Path) -> dict[str, Path] | None:
    """{'hierarchy': path, 'longnames': path} when `spec` names the ITIS release tables, else None (a table file)."""
    parts = [Path(p.strip()) for p in str(spec).split(",") if p.strip()]
    if len(parts) == 1 and parts[0].is_dir():
        tables = {n: _itis_table(parts[0], n) for n in ITIS_TABLES}
    elif len(parts) == 1 and parts[0].name.split(".")[0].lower() in ITIS_TABLES:
        tables = {n: _itis_table(parts[0].parent, n) if parts[0].parent.is_dir() else None for n in ITIS_TABLES}
    elif len(parts) == 2:
        tables = {p.name.split(".")[0].lower(): p for p in parts}
        if set(tables) != set(ITIS_TABLES):
            raise HaldetError(f"two taxonomy files given ({', '.join(map(str, parts))}), not ITIS's hierarchy and "
                              "longnames", where="--taxonomy", hint="pass hierarchy,longnames or their folder")
    else:
        return None
    missing = [n for n, p in tables.items() if p is None or not p.is_file()]
    if missing:
        raise HaldetError(f"ITIS table(s) {', '.join(missing)} not found", where=str(spec),
                          hint="the folder of the ITIS download must hold its pipe-delimited 'hierarchy' and "
                               "'longnames' tables (or pass a jsonl/json/parquet/csv taxonomy file)")
    return {n: p for n, p in tables.items() if p is not None}


def taxonomy_files(spec: str | Path) -> list[Path]:
    """The files a taxonomy spec reads (recorded with their hashes in the build manifest)."""
    tables = itis_files(spec)
    return list(tables.values()) if tables else [Path(spec)]


def _itis_line(raw: bytes) -> str:
    """One line of an ITIS table: the release writes Latin-1 (ISO-8859-1; its load scripts declare latin1), a copy
    converted to UTF-8 reads the same."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("latin-1")


def _pipe_rows(path: Path, width: int, header: str) -> Iterator[tuple[int, list[str]]]:
    """(line number, first `width` fields) of a pipe-delimited ITIS table; a header line (`header` as its first
    field) is skipped; a line with fewer fields is an error naming it."""
    with path.open("rb") as fh:
        for lineno, raw in enumerate(fh, start=1):
            line = _itis_line(raw)
            if not line.strip():
                continue
            fields = line.rstrip("\r\n").split("|")
            if lineno == 1 and fields[0].strip().lower() == header:
                continue
            if len(fields) < width:
                raise HaldetError(f"{len(fields)} pipe-separated field(s), expected at least {width}",
                                  where=f"{path}, line {lineno}",
                                  hint=f"is this ITIS's pipe-delimited '{path.name.split('.')[0]}' table?")
            yield lineno, fields[:width]


def load_itis(hierarchy: Path, longnames: Path) -> list[Species]:
    """Species of the ITIS release tables: every binomial ("Genus epithet") name whose hierarchy path runs from a
    kingdom of `KINGDOMS` through a family (the ancestor named with a family ending, -idae or -aceae)."""
    names: dict[str, str] = {}
    for _, (tsn, name) in _pipe_rows(longnames, 2, "tsn"):
        names[tsn.strip()] = " ".join(name.split())
    out = []
    for _, (path_string, tsn) in _pipe_rows(hierarchy, 2, "hierarchy_string"):
        name = names.get(tsn.strip(), "")
        if len(name.split()) != 2 or not name[:1].isupper():
            continue  # higher ranks, subspecies and varieties
        ancestors = [names.get(t.strip(), "") for t in path_string.split("-")[:-1]]
        if not ancestors or ancestors[0].lower() not in KINGDOMS:
            continue
        family = next((a for a in reversed(ancestors) if a.lower().endswith(FAMILY_SUFFIXES) and " " not in a), "")
        if family and ancestors[-1] == name.split()[0]:  # its parent is its genus
            out.append(Species(name, family, KINGDOMS[ancestors[0].lower()]))
    if not out:
        raise HaldetError("no species found in the ITIS tables (binomial names under Animalia, Plantae or "
                          "Bacteria with a family)", where=f"{hierarchy}, {longnames}",
                          hint="pass the full 'hierarchy' and 'longnames' tables of the same ITIS release")
    return sorted(out, key=lambda s: s.name)


def load_taxonomy(path: str | Path) -> list[Species]:
    tables = itis_files(path)
    if tables:
        return load_itis(tables["hierarchy"], tables["longnames"])
    out = []
    for i, row in enumerate(_read(path, "taxonomy file")):
        where = f"{path}, row {i}"
        name = " ".join(str(_field(row, ("name", "complete_name"), where)).split())
        if len(name.split()) < 2:
            raise HaldetError(f"scientific name {name!r} has no species epithet", where=where,
                              hint="use species rows ('Genus epithet'); drop higher ranks")
        raw = str(_field(row, ("domain", "kingdom"), where)).strip().lower()
        domain = KINGDOMS.get(raw, raw)
        if domain not in DOMAINS:
            raise HaldetError(f"domain {raw!r} is not one of {', '.join(DOMAINS)} (or an ITIS kingdom)", where=where)
        out.append(Species(name, str(_field(row, ("family",), where)).strip(), domain))
    return out


PLACE_GROUPS = ("low", "middle", "high")


def load_places(path: str | Path) -> tuple[list[str], dict[str, str]]:
    """Places for GeneratedEntities with their frequency group (Fig. 9): rows with `place` (or `name`) and either
    `group` (low / middle / high) or a `frequency` (e.g. an n-gram count), cut into equal thirds by rank (ties by
    name) as the paper groups its cities and countries."""
    rows = _read(path, "place file")
    places, given, freq = [], {}, {}
    for i, row in enumerate(rows):
        where = f"{path}, row {i}"
        place = " ".join(str(_field(row, ("place", "name"), where)).split())
        places.append(place)
        if row.get("group") not in (None, ""):
            group = str(row["group"]).strip().lower()
            if group not in PLACE_GROUPS:
                raise HaldetError(f"place group {group!r} is not one of {', '.join(PLACE_GROUPS)}", where=where)
            given[place] = group
        else:
            try:
                freq[place] = float(_field(row, ("frequency",), where))
            except (TypeError, ValueError):
                raise HaldetError(f"frequency {row.get('frequency')!r} is not a number", where=where) from None
    ranked = sorted(freq, key=lambda p: (freq[p], p))
    groups = {p: PLACE_GROUPS[min(3 * k // len(ranked), 2)] for k, p in enumerate(ranked)} | given
    return places, groups


def load_medicines(path: str | Path) -> list[str]:
    return [" ".join(str(_field(row, ("name",), f"{path}, row {i}")).split())
            for i, row in enumerate(_read(path, "medicine file"))]
