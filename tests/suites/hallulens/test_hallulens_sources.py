"""HalluLens sources as their users have them: the ITIS release tables (`hierarchy`, `longnames`, pipe-delimited)
as a folder, as the hierarchy file or as both files; and a build that keeps no item for a task exits non-zero with
its per-task report on screen."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from haldet.errors import HaldetError
from haldet.suites.hallulens.sources import Species, load_taxonomy
from repo_paths import FIXTURES

FIX = FIXTURES / "hallulens"
ITIS = FIX / "itis"
# the fixture mirrors the ITIS download (itisMySQLTables): no header line, '|' between fields, Latin-1 text
# (the hybrid sign of "Mentha \u00d7piperita" is the single byte 0xD7 in `longnames`)
EXPECTED = [Species("Escherichia coli", "Enterobacteriaceae", "bacteria"),
            Species("Helianthus annuus", "Asteraceae", "plant"), Species("Mentha \u00d7piperita", "Lamiaceae", "plant"),
            Species("Panthera leo", "Felidae", "animal"), Species("Panthera tigris", "Felidae", "animal")]


@pytest.mark.parametrize("spec", [str(ITIS), str(ITIS / "hierarchy"), f"{ITIS / 'hierarchy'},{ITIS / 'longnames'}"])
def test_itis_tables_give_binomial_species_with_family_and_domain(spec: str) -> None:
    # the subspecies (three words), the ranks above species and the kingdom Fungi are left out
    assert load_taxonomy(spec) == EXPECTED


def test_itis_tables_with_header_and_extension(tmp_path: Path) -> None:
    (tmp_path / "hierarchy.txt").write_text("hierarchy_string|TSN|Parent_TSN|level|ChildrenCount\n"
                                            + (ITIS / "hierarchy").read_text())
    (tmp_path / "longnames.txt").write_bytes(b"tsn|completename\n" + (ITIS / "longnames").read_bytes())
    assert load_taxonomy(tmp_path) == EXPECTED


def test_itis_release_bytes_and_a_utf8_copy_read_the_same(tmp_path: Path) -> None:
    raw = (ITIS / "longnames").read_bytes()
    assert b"Mentha \xd7piperita" in raw  # the release's Latin-1 byte, not UTF-8's two
    shutil.copy(ITIS / "hierarchy", tmp_path / "hierarchy")
    (tmp_path / "longnames").write_text(raw.decode("latin-1"), encoding="utf-8")  # as `iconv -t UTF-8` leaves it
    assert load_taxonomy(tmp_path) == load_taxonomy(ITIS) == EXPECTED


def test_itis_folder_without_longnames_is_a_clear_error(tmp_path: Path) -> None:
    shutil.copy(ITIS / "hierarchy", tmp_path / "hierarchy")
    with pytest.raises(HaldetError, match="longnames not found") as err:
        load_taxonomy(tmp_path)
    assert "ITIS download" in (err.value.hint or "")
    (tmp_path / "longnames").write_text("202423 Animalia\n")  # not pipe-delimited
    with pytest.raises(HaldetError, match="expected at least 2") as err:
        load_taxonomy(tmp_path)
    assert "longnames, line 1" in (err.value.where or "")


def test_build_keeping_no_item_exits_non_zero_with_the_report(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from haldet.cli import app
    from mock_openai import FakeOpenAI

    with FakeOpenAI() as srv:  # sections longer than any fixture page: nothing to ask the generator
        result = CliRunner().invoke(app, [
            "hallulens", "build", "--out", str(tmp_path / "set"), "--task", "precisewikiqa",
            "--pages", str(FIX / "pages.jsonl"), "--generator-backend", "openai", "--generator-model", "gen",
            "--generator-base-url", srv.base_url, "--trials", "1", "--qa-size", "2", "--qa-tokens", "5000,6000",
            "--retries", "0"])
    assert result.exit_code != 0, result.output
    assert "seed-42/precisewikiqa: 0 of 2 kept" in " ".join(result.output.split())
    assert isinstance(result.exception, HaldetError)
    assert "kept no item for seed-42/precisewikiqa" in str(result.exception)
    report = json.loads((tmp_path / "set" / "build.json").read_text())["reports"]["seed-42/precisewikiqa"]
    assert report["kept"] == 0  # the report is written all the same


def test_rates_per_decile_and_place_group_and_kendall_tau() -> None:
    from scipy.stats import kendalltau

    from haldet.suites.hallulens.evaluate import breakdown_markdown, breakdown_summaries
    from haldet.suites.hallulens.rates import far_by_place_group, kendall_between_tasks, rates_by_decile

    recs = [{"id": "a", "abstained": True, "verdict": None}, {"id": "b", "abstained": False, "verdict": "CORRECT"},
            {"id": "c", "abstained": False, "verdict": "INCORRECT"}, {"id": "d", "abstained": False,
                                                                       "verdict": "UNVERIFIABLE"}]
    by = rates_by_decile(recs, {"a": 0, "b": 0, "c": 9, "d": 9})
    assert (by["0"]["false_refusal"], by["0"]["hallucination"], by["0"]["correct"]) == (0.5, 0.0, 0.5)
    assert (by["9"]["hallucination"], by["9"]["n"]) == (1.0, 2)
    far = far_by_place_group([{"id": i, "believes": b} for i, b in (("x", 1), ("y", 0), ("z", 1), ("w", 1))],
                             {"x": "low", "y": "low", "z": "middle"})  # w: a product, no place
    assert far == {"low": {"far": 0.5, "believed": 1, "n": 2}, "middle": {"far": 1.0, "believed": 1, "n": 1}}
    means = {"m1": {("nonexistent", "mixed"): 0.1, ("nonexistent", "generated"): 0.3},
             "m2": {("nonexistent", "mixed"): 0.2, ("nonexistent", "generated"): 0.2},
             "m3": {("nonexistent", "mixed"): 0.3, ("nonexistent", "generated"): 0.4},
             "m4": {("nonexistent", "mixed"): 0.4, ("nonexistent", "generated"): 0.5}}
    (row,) = kendall_between_tasks(means)
    assert row["tau"] == pytest.approx(float(kendalltau([1, 2, 3, 4], [3, 2, 4, 5]).statistic)) == pytest.approx(2 / 3)
    summary = breakdown_summaries({"seed-1": {"by_decile": by}, "seed-2": {"by_decile": by}})
    assert summary["by_decile"]["9"]["hallucination"]["mean"] == 1.0 and summary["by_decile"]["9"]["n"] == 4
    md = breakdown_markdown({"models": {"m1": {"precisewikiqa": summary}}, "kendall": [row]})
    assert "Fig. 4: PreciseWikiQA per h-score decile" in md and "| m1 | 9 | 4 |" in md and "0.667" in md
    from haldet.figures.render import FigureSet
    from haldet.suites.hallulens.report import html_report

    figures = FigureSet(formats=("png",))
    html = html_report({"models": {"m1": {"precisewikiqa": summary}}, "kendall": [row]}, ["model"], [["m1"]],
                       figures=figures)
    assert '<figure id="fig-hallulens-fig4-deciles"><svg ' in html and "0.667" in html
    (fig4,) = figures.rendered
    assert fig4.title.startswith("HalluLens Fig. 4") and fig4.files["png"].startswith(b"\x89PNG")
    assert "<td>9</td><td>4</td><td>0.00 ± 0.00</td><td>100.00 ± 0.00</td>" in html


def test_kendall_tau_of_a_metric_every_model_ties_is_undefined_with_the_reason() -> None:
    """Three models with the same MixedEntities FAR: tau-b has no value, so the row says why (no number), and
    table.md and report.html show it as n/a (report.html used to stop on formatting the missing value)."""
    from haldet.suites.hallulens.evaluate import breakdown_markdown
    from haldet.suites.hallulens.rates import kendall_between_tasks
    from haldet.suites.hallulens.report import html_report

    means = {m: {("nonexistent", "mixed"): 0.5, ("nonexistent", "generated"): g}
             for m, g in (("m1", 0.1), ("m2", 0.2), ("m3", 0.3))}
    (row,) = kendall_between_tasks(means)
    assert row["tau"] is None and row["p"] is None
    assert row["note"] == "undefined: every model has the same nonexistent/mixed = 0.5"
    md = breakdown_markdown({"models": {}, "kendall": [row]})
    assert "| nonexistent/mixed | nonexistent/generated | n/a | n/a | 3 | undefined: every model" in md
    html = html_report({"models": {}, "kendall": [row]}, ["model"], [["m1"]])
    assert "<td>n/a</td><td>n/a</td><td>3</td><td>undefined: every model has the same" in html


def test_places_are_grouped_in_thirds_of_frequency(tmp_path: Path) -> None:
    from haldet.suites.hallulens.sources import load_places

    path = tmp_path / "places.csv"
    path.write_text("place,frequency\nParis,900\nTbilisi,20\nAccra,15\nLyon,300\nGhent,40\nOslo,100\n")
    names, groups = load_places(path)
    assert names == ["Paris", "Tbilisi", "Accra", "Lyon", "Ghent", "Oslo"]
    assert groups == {"Accra": "low", "Tbilisi": "low", "Ghent": "middle", "Oslo": "middle", "Lyon": "high",
                      "Paris": "high"}
    path.write_text("place,group\nParis,very high\n")
    with pytest.raises(HaldetError, match="place group 'very high'"):
        load_places(path)


def test_existence_check_asks_the_configured_search_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    from urllib.parse import parse_qs, urlsplit

    from haldet.suites.hallulens.existence import SearchCheck, SourceCheck

    asked: list[tuple[str, str | None]] = []

    class Search(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            query = parse_qs(urlsplit(self.path).query)["q"][0]
            asked.append((query, self.headers.get("X-API-Key")))
            body = json.dumps({"results": [{"title": "Cafe Aurora, Lisbon"}] if "Aurora" in query else []})
            self.send_response(200)
            self.end_headers()
            self.wfile.write(body.encode())

    server = ThreadingHTTPServer(("127.0.0.1", 0), Search)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        monkeypatch.setenv("SEARCH_KEY", "k123")
        url = f"http://127.0.0.1:{server.server_port}/search?q={{query}}"
        check = SearchCheck({"Marie Curie"}, url, key_env="SEARCH_KEY")
        assert check.exists("Cafe Aurora") and not check.exists("Cafe Zyxwv") and check.exists("marie curie")
        assert asked == [('"Cafe Aurora"', "k123"), ('"Cafe Zyxwv"', "k123")]  # sources first, no request
        assert check.exists("Cafe Aurora") and len(asked) == 2  # asked once per name
        assert "web search at 127.0.0.1" in check.description
        assert "offline" in SourceCheck({"a"}).description
    finally:
        server.shutdown()
    with pytest.raises(HaldetError, match="search request for 'Bar Nova' failed"):
        SearchCheck(set(), url, timeout=2).exists("Bar Nova")  # the server is gone: an error, not "new"
    with pytest.raises(HaldetError, match=r"no \{query\} placeholder"):
        SearchCheck(set(), "http://example.invalid/search")


def test_generated_entities_combining_step_with_three_generators() -> None:
    from types import SimpleNamespace

    from haldet.suites.hallulens.build import BuildConfig, build_generated
    from haldet.suites.hallulens.existence import SourceCheck
    from haldet.suites.hallulens.prompts import NamesReply, Prompts

    class Fake:
        def __init__(self, name: str) -> None:
            self.id, self.asked = name, []

        def ask(self, requests: list) -> list:
            out = []
            for r in requests:
                text = r.messages[-1]["content"]
                self.asked.append(text)
                if "First list:" in text:  # the combiner: one name per pair of brainstormed names
                    first = text.split("First list: ", 1)[1].split("\n", 1)[0].split("; ")
                    second = text.split("Second list: ", 1)[1].split("\n", 1)[0].split("; ")
                    names = [f"{a.split()[0]} {b.split()[-1]}" for a, b in zip(first, second, strict=True)]
                else:
                    names = [f"{self.id} Name{k}" for k in range(2)]
                out.append(SimpleNamespace(value=NamesReply(names=names)))
            return out

    llms = [Fake("Alpha"), Fake("Beta"), Fake("Gamma")]
    cfg = BuildConfig(generated={"business": 2, "event": 0, "product": 0}, names_per_call=2, places=["Lisbon"],
                      place_groups={"Lisbon": "middle"})
    items, report = build_generated(llms, Prompts(), cfg, set(), check=SourceCheck({"Alpha Name0"}))
    # combination 0: Alpha and Beta brainstorm, Gamma combines ("Alpha Name0" exists: dropped); combination 1: Beta
    # and Gamma brainstorm, Alpha combines
    assert [(it.name, it.generator, it.meta["brainstormed_by"]) for it in items] == [
        ("Alpha Name1", "Gamma", ["Alpha", "Beta"]), ("Beta Name0", "Alpha", ["Beta", "Gamma"])]
    assert [sum("First list:" in t for t in g.asked) for g in llms] == [1, 0, 1]
    assert items[0].meta["place_group"] == "middle"
    assert report.dropped == {"name exists (existence check)": 1}
    assert any(n.startswith("existence check: offline") for n in report.notes)


def test_build_reads_the_itis_download_and_combines_three_generators(tmp_path: Path) -> None:
    """`haldet hallulens build --taxonomy FOLDER --places FILE` with three endpoint generators (the mock), end to
    end: the ITIS tables as downloaded (the fixture plus a second genus of Felidae, Felis catus, so that Felidae has
    sibling genera) give MixedEntities names that can only be Felis leo, Felis tigris or Panthera catus, and the
    domains whose families hold one genus say so; the GeneratedEntities business name comes from the combining step
    (two models brainstorm, the third blends their lists), carries its place's frequency group, and the build report
    says the existence check was offline."""
    import json as _json

    from typer.testing import CliRunner

    from haldet.cli import app
    from haldet.suites.hallulens.sets import read_items
    from mock_openai import FakeOpenAI

    itis = tmp_path / "itis"
    shutil.copytree(ITIS, itis)
    with (itis / "hierarchy").open("a", encoding="latin-1") as f:
        f.write("202423-914154-179913-180539-180578-180600|180600|180578|5|1\n"
                "202423-914154-179913-180539-180578-180600-183798|183798|180600|6|0\n")
    with (itis / "longnames").open("a", encoding="latin-1") as f:
        f.write("180600|Felis\n183798|Felis catus\n")
    places = tmp_path / "places.csv"
    places.write_text("place,group\nLisbon,middle\n")

    def names(arg: str, body: dict, j: int) -> str:
        text = body["messages"][-1]["content"]
        blended = "First list:" in text
        return _json.dumps({"names": [f"Quorvex {'Blend' if blended else body['model']}{k}" for k in range(2)]})

    with FakeOpenAI(content=names, key_of=lambda body: "all", default="ok:-") as srv:
        result = CliRunner().invoke(app, [
            "hallulens", "build", "--out", str(tmp_path / "set"), "--task", "nonexistent", "--taxonomy", str(itis),
            "--places", str(places), "--generator-backend", "openai", "--generator-base-url", srv.base_url,
            "--generator-model", "gen_a", "--generator-model", "gen_b", "--generator-model", "gen_c",
            "--trials", "1", "--mixed-per-domain", "2", "--generated", "1,0,0", "--retries", "0"])
        asked = [b["model"] for b in srv.requests]
    assert result.exit_code == 0, result.output
    assert sorted(asked) == ["gen_a", "gen_b", "gen_c"]  # two brainstorms, one combining call
    items = read_items(tmp_path / "set" / "seed-42" / "nonexistent.jsonl")
    animals = [it for it in items if it.domain == "animal"]
    assert len(animals) == 2 and {it.name for it in animals} <= {"Felis leo", "Felis tigris", "Panthera catus"}
    (business,) = [it for it in items if it.domain == "business"]
    assert business.name.startswith("Quorvex Blend") and business.generator == "openai:gen_c"
    assert business.meta["brainstormed_by"] == ["openai:gen_a", "openai:gen_b"]
    assert business.meta["place_group"] == "middle"
    assert {it.domain for it in items} == {"animal", "business"}
    report = json.loads((tmp_path / "set" / "build.json").read_text())["reports"]["seed-42/nonexistent"]
    assert any("plant: 0 of 2 names (taxonomy too small)" in n for n in report["notes"])
    assert any(n.startswith("existence check: offline") for n in report["notes"])
