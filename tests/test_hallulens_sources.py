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

FIX = Path(__file__).parent / "fixtures" / "hallulens"
ITIS = FIX / "itis"
EXPECTED = [Species("Escherichia coli", "Enterobacteriaceae", "bacteria"),
            Species("Helianthus annuus", "Asteraceae", "plant"),
            Species("Panthera leo", "Felidae", "animal"), Species("Panthera tigris", "Felidae", "animal")]


@pytest.mark.parametrize("spec", [str(ITIS), str(ITIS / "hierarchy"), f"{ITIS / 'hierarchy'},{ITIS / 'longnames'}"])
def test_itis_tables_give_binomial_species_with_family_and_domain(spec: str) -> None:
    # the subspecies (three words), the ranks above species and the kingdom Fungi are left out
    assert load_taxonomy(spec) == EXPECTED


def test_itis_tables_with_header_and_extension(tmp_path: Path) -> None:
    (tmp_path / "hierarchy.txt").write_text("hierarchy_string|TSN|Parent_TSN|level|ChildrenCount\n"
                                            + (ITIS / "hierarchy").read_text())
    (tmp_path / "longnames.txt").write_text("tsn|completename\n" + (ITIS / "longnames").read_text())
    assert load_taxonomy(tmp_path) == EXPECTED


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
    assert isinstance(result.exception, HaldetError) and "kept no item for seed-42/precisewikiqa" in str(result.exception)
    report = json.loads((tmp_path / "set" / "build.json").read_text())["reports"]["seed-42/precisewikiqa"]
    assert report["kept"] == 0  # the report is written all the same
