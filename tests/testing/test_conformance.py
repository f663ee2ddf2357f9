"""The conformance suite over every registered detector and each of its variants, one test per (detector/variant,
named check), parametrized from the registry (a new detector is checked without touching this file); an exempt
check is reported as skipped with its reason. Negative controls: tests/testing/test_conformance_controls.py."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from haldet.detectors.base import DETECTORS
from haldet.testing.conformance import CHECKS, CannotRun, Case, applicable, check_detector, exemptions, light, run_check
from repo_paths import REPO

DOCS = REPO / "docs"


def _cases() -> list[tuple[str, dict[str, Any]]]:
    cases = []
    for name, cls in DETECTORS:
        variants = list(cls.variants) or [None]
        cases += [(name, {} if v is None else {"variant": v}) for v in variants]
    return cases


CASES = _cases()


def _case_id(name: str, params: dict[str, Any]) -> str:
    return f"{name}-{params.get('variant', 'default')}"


# one test per (detector/variant, check), e.g. `pytest tests/testing/test_conformance.py -k "mind and order"`;
# a case's checks
# share one xdist worker (`--dist loadgroup`), so its runs and fits are computed once
CHECK_CASES = [pytest.param(name, params, check, id=f"{_case_id(name, params)}-{check}",
                            marks=pytest.mark.xdist_group(_case_id(name, params)))
               for name, params in CASES for check in applicable(DETECTORS.get(name))]


@pytest.fixture(scope="session")
def small_models(tmp_path_factory) -> dict[str, str]:
    """Small local stand-ins for each auxiliary model kind: a random 2-layer NLI classifier (MNLI labels) with
    MiniLM's tokenizer, a random 2-way fact-checking head, a random 2-label ModernBERT token classifier; the
    packaged MiniLM for similarity and BERTScore."""
    from transformers import AutoTokenizer

    from haldet.util.assets import resolve_embedding
    from tiny_llama import build_tiny_checker, build_tiny_llama, build_tiny_nli

    path = build_tiny_nli(tmp_path_factory.mktemp("tiny-nli"))
    tok = AutoTokenizer.from_pretrained(resolve_embedding("minilm"))
    support = build_tiny_checker(tmp_path_factory.mktemp("tiny-minicheck"))  # a 2-way head (label 1 = supported)

    llama = build_tiny_llama(tmp_path_factory.mktemp("tiny-llama"))
    lettuce = tmp_path_factory.mktemp("tiny-token-classifier")  # LettuceDetect's class: ModernBERT, 2 labels
    from transformers import ModernBertConfig, ModernBertForTokenClassification

    ModernBertForTokenClassification(ModernBertConfig(
        vocab_size=tok.vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
        num_labels=2, pad_token_id=tok.pad_token_id, cls_token_id=tok.cls_token_id, sep_token_id=tok.sep_token_id,
        bos_token_id=tok.cls_token_id, eos_token_id=tok.sep_token_id, max_position_embeddings=512,
        initializer_range=0.5)).save_pretrained(lettuce)
    tok.save_pretrained(lettuce)
    return {"nli": str(path), "similarity": "minilm", "bertscore": "minilm", "support": str(support),
            "causal_lm": str(llama), "token_classifier": str(lettuce)}


@pytest.fixture(scope="session")
def conformance_cases() -> Iterator[dict[str, Case]]:
    """The case under test: its checks run one after another, so a new case closes the previous one."""
    cases: dict[str, Case] = {}
    yield cases
    for case in cases.values():
        case.close()


@pytest.mark.parametrize(("name", "params", "check"), CHECK_CASES)
def test_conformance(name: str, params: dict[str, Any], check: str, small_models: dict[str, str],
                     conformance_cases: dict[str, Case]) -> None:
    cls = DETECTORS.get(name)
    reason = exemptions(cls).get(check)
    if reason:
        pytest.skip(f"exempt: {reason}")
    key = _case_id(name, params)
    if key not in conformance_cases:
        for old in conformance_cases.values():
            old.close()
        conformance_cases.clear()
        conformance_cases[key] = Case(cls, light(cls, params, small_models))
    try:
        problems = run_check(conformance_cases[key], check)
    except CannotRun as exc:
        pytest.skip(str(exc))
    assert not problems, f"{key} {check}: " + "; ".join(problems)


def test_every_check_and_exemption_is_documented() -> None:
    """docs/developing.md names every check; docs/detectors.md lists every registered detector's exemptions with
    the check's name (a new exemption fails here until it is documented)."""
    developing, detectors = (DOCS / "developing.md").read_text(), (DOCS / "detectors.md").read_text()
    assert [c for c in CHECKS if f"`{c}`" not in developing] == []
    assert [c for c, check in CHECKS.items() if len(check.doc) < 30] == []  # each says what property it checks
    table = detectors.split("## Conformance exemptions", 1)[1].split("\n#", 1)[0]
    rows = {(m.group(1), m.group(2)) for m in re.finditer(r"^\| `(\w+)` \| `(\w+)` \|", table, re.MULTILINE)}
    declared = {(name, check) for name, cls in DETECTORS for check in exemptions(cls)}
    assert declared and rows == declared


def test_developing_template_runs_as_written_and_conforms() -> None:
    """The detector template of docs/developing.md, executed verbatim, registers and passes the suite."""
    text = (REPO / "docs" / "developing.md").read_text()
    section = text.split("## Writing a detector", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.DOTALL).group(1)  # type: ignore[union-attr]
    namespace: dict[str, Any] = {"__name__": "developing_template"}
    try:
        exec(compile(code, "docs/developing.md", "exec"), namespace)
        cls = DETECTORS.get("my_detector")
        for variant in cls.variants:
            assert check_detector(cls, {"variant": variant}) == []
    finally:
        DETECTORS._items.pop("my_detector", None)
