"""Suites as folders: a suite's datasets and detectors live in its folder and register like plugins,
found by the registries' walk of `haldet.suites`, never by a core import."""

from __future__ import annotations

import subprocess
import sys

from haldet.datasets.base import DATASETS
from haldet.detectors.base import DETECTORS
from haldet.suites.base import SUITES, get_suite

# registry name -> the suite folder its class lives in
FOLDER_DATASETS = {"verigray": "verigray", "triviaplus": "triviaplus", "halluentity": "halluentity",
                   "hallulens_precisewikiqa": "hallulens", "hallulens_proxy_qa": "hallulens",
                   "hallulens_longwiki": "hallulens", "hallulens_nonexistent": "hallulens",
                   "factscore_bio": "longform", "bio_entities": "longform"}
FOLDER_DETECTORS = {"verigray_llm": "verigray", "nli_verifier": "verigray", "selfcheck_claims": "longform",
                    "luq": "longform", "p_true_claims": "longform"}
FOLDER_SUITES = {"verigray": "verigray", "triviaplus": "triviaplus", "halluentity": "halluentity",
                 "hallulens": "hallulens", "hallulens_longwiki": "hallulens", "longform": "longform"}


def test_each_suite_part_is_registered_from_its_folder() -> None:
    for registry, expected in ((DATASETS, FOLDER_DATASETS), (DETECTORS, FOLDER_DETECTORS), (SUITES, FOLDER_SUITES)):
        for name, folder in expected.items():
            module = registry.get(name).__module__
            assert module.startswith(f"haldet.suites.{folder}."), (registry.kind, name, module)
            assert registry.origin(name) == "built-in"


def test_every_suite_names_registered_datasets_and_detectors() -> None:
    for name in SUITES.names():
        suite = get_suite(name)
        assert all(d in DATASETS for d in suite.datasets), (name, suite.datasets)
        assert all(d in DETECTORS for d in (*suite.detectors, *suite.optional)), (name, suite.optional)


def test_a_fresh_process_finds_suite_plugins_through_the_registries_alone() -> None:
    """Nothing imports a suite folder first: the first lookup's walk must find them."""
    code = ("import sys; from haldet.datasets.base import DATASETS; from haldet.detectors.base import DETECTORS\n"
            "assert not any(m.startswith('haldet.suites.verigray') for m in sys.modules)\n"
            "print(DATASETS.get('verigray').__module__, DETECTORS.get('verigray_llm').__module__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["haldet.suites.verigray.dataset", "haldet.suites.verigray.verigray_llm"]


def test_suites_show_names_each_detector_its_levels_needs_and_every_table() -> None:
    """`haldet suites show NAME`: the paper's detectors run only when named are listed beside the defaults, each with
    the levels it scores and the models it needs; every table says what writes it (a run, or the suite's command)."""
    import json

    from typer.testing import CliRunner

    from haldet.cli import app

    runner = CliRunner()
    shown = runner.invoke(app, ["suites", "show", "triviaplus", "--json"])
    assert shown.exit_code == 0, shown.output
    info = json.loads(shown.output)
    details = {d["name"]: d for d in info["detector_details"]}
    assert info["optional_detectors"] == ["llm_judge_po", "sft", "redeep", "lettucedetect"]
    assert details["sft"]["runs"] == "--detector"
    assert details["sft"]["needs"] == ["causal_lm (model=smollm2-135m)"] and details["sft"]["trains"]
    assert details["redeep"]["suite_levels"] == ["response"] and details["redeep"]["family"] == "white"
    assert details["perplexity"]["runs"] == "default"
    assert any(t.startswith("Table 10 (") for t in info["tables"]) and info["params"]["vote_noise_rate"] == 0.15
    verigray = runner.invoke(app, ["suites", "show", "verigray"], env={"COLUMNS": "250"})
    assert verigray.exit_code == 0, verigray.output
    line = next(x for x in verigray.output.splitlines() if "minicheck" in x)
    assert "--detector" in line and "sentence" in line and "support (checker=llm:bespokelabs/Bespoke-MiniCheck-7B)" \
        in line
    assert "Fig. 6 (transition" in verigray.output and "run: suite_tables.md, report.html" in verigray.output
    lens = json.loads(runner.invoke(app, ["suites", "show", "hallulens", "--json"]).output)
    assert {o["table"].split(" (")[0] for o in lens["other_outputs"]} >= {"Fig. 4", "Fig. 9"}
    assert all("haldet hallulens evaluate" in o["written_by"] for o in lens["other_outputs"])
    listed = runner.invoke(app, ["suites", "list"], env={"COLUMNS": "250"})
    assert next(x for x in listed.output.splitlines() if x.startswith("│ triviaplus")).rstrip(" │").endswith(
        "sft, redeep, lettucedetect")
    bad = runner.invoke(app, ["suites", "show", "verigrey"])
    assert bad.exit_code != 0 and "unknown suite 'verigrey'" in str(bad.exception)
