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
                   "hallulens_longwiki": "hallulens", "hallulens_nonexistent": "hallulens"}
FOLDER_DETECTORS = {"verigray_llm": "verigray", "nli_verifier": "verigray"}
FOLDER_SUITES = {"verigray": "verigray", "triviaplus": "triviaplus", "halluentity": "halluentity",
                 "hallulens": "hallulens", "hallulens_longwiki": "hallulens"}


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
        assert all(d in DETECTORS for d in suite.detectors), (name, suite.detectors)


def test_a_fresh_process_finds_suite_plugins_through_the_registries_alone() -> None:
    """Nothing imports a suite folder first: the first lookup's walk must find them."""
    code = ("import sys; from haldet.datasets.base import DATASETS; from haldet.detectors.base import DETECTORS\n"
            "assert not any(m.startswith('haldet.suites.verigray') for m in sys.modules)\n"
            "print(DATASETS.get('verigray').__module__, DETECTORS.get('verigray_llm').__module__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["haldet.suites.verigray.dataset", "haldet.suites.verigray.verigray_llm"]
