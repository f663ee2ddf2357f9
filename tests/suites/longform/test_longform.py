"""The longform scenario: FActScore's labelled biographies as claim units (the release's own files), the
response-level rows from claims, and `--level` picking the suite."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from haldet.datasets.base import DATASETS
from haldet.errors import HaldetError
from haldet.suites.levels import suite_with_levels
from haldet.suites.longform.from_claims import from_claims_rows, response_scores
from repo_paths import FIXTURES

FIXTURE = FIXTURES / "factscore_bio"


def _load(tmp_path: Path) -> dict[str, object]:
    shutil.copytree(FIXTURE, tmp_path / "factscore_bio")
    instances, report = DATASETS.get("factscore_bio")(data_dir=tmp_path).load()
    assert report.n_filtered == 1 and "abstained" in report.filtered[0]  # Ilse Varga: annotations null
    return {i.id: i for i in instances}


def test_factscore_release_files_give_claims_with_offsets_and_the_datas_labels(tmp_path: Path) -> None:
    by_id = _load(tmp_path)
    assert len(by_id) == 8
    inst = by_id["factscore_bio/test/ChatGPT-Marta_Kessling"]
    assert inst.meta["source_model"] == "ChatGPT" and inst.question == "Question: Tell me a bio of Marta Kessling."
    raw = json.loads((FIXTURE / "labeled" / "ChatGPT.jsonl").read_text().splitlines()[0])
    facts = [f for a in raw["annotations"] for f in a["human-atomic-facts"]]
    assert [u.meta["claim"] for u in inst.units] == [f["text"] for f in facts]  # every fact, in order
    assert all(u.kind == "claim" and u.meta["labels"]["source"] == "data" for u in inst.units)
    labels = {"S": "correct", "NS": "hallucination"}
    assert [u.category.value for u in inst.units] == [labels[f["label"]] for f in facts]
    for unit in inst.units:  # offsets into the response, inside the fact's own sentence
        assert inst.response[unit.start : unit.end] == unit.text and unit.text
        sentence = raw["annotations"][unit.meta["sentence"]]["text"]
        assert unit.text in sentence
    spans = {u.meta["claim"]: u.text for u in inst.units}
    assert spans["Marta Kessling studied at the University of Bonn."] == "studied at the University of Bonn"
    assert spans["She discovered it in Peru."] == "discovered a fern species in Peru"
    # "The discovery was in 1979." shares one content word with its sentence: it takes the sentence's span
    assert spans["The discovery was in 1979."] == "She discovered a fern species in Peru in 1979."
    assert inst.meta["sentence_spans"] == 1 and inst.meta["labels"]["unsupported_share"] == pytest.approx(4 / 9)
    # a detector's view shows the claims' offsets and words, never their labels or the label details
    hidden = inst.without_labels()
    assert [u.meta["claim"] for u in hidden.units] == [u.meta["claim"] for u in inst.units]
    assert all("labels" not in u.meta and u.binary is None for u in hidden.units) and "labels" not in hidden.meta
    # IR (irrelevant) facts are kept unlabelled; a sentence without facts gives no unit
    oren = by_id["factscore_bio/test/ChatGPT-Oren_Dalby"]
    assert [u.meta["labels"]["data"] for u in oren.units].count("S") == len(oren.units)
    lucia = by_id["factscore_bio/test/InstructGPT-Lucia_Ferrandi"]
    assert lucia.response.endswith("Architecture is an art.")
    assert all(u.end <= lucia.response.index(" Architecture is an art.") for u in lucia.units)
    assert lucia.units_of("response")[0].binary == 1 and oren.units_of("response")[0].binary == 0


def test_irrelevant_facts_are_unlabelled_units(tmp_path: Path) -> None:
    line = {"input": "Question: Tell me a bio of A B.", "output": "A B is a poet. A B likes tea.", "topic": "A B",
            "annotations": [{"text": "A B is a poet.", "is-relevant": True,
                             "human-atomic-facts": [{"text": "A B is a poet.", "label": "S"}]},
                            {"text": "A B likes tea.", "is-relevant": True,
                             "human-atomic-facts": [{"text": "A B likes tea.", "label": "IR"}]}]}
    (tmp_path / "factscore_bio").mkdir()
    (tmp_path / "factscore_bio" / "PerplexityAI.jsonl").write_text(json.dumps(line) + "\n")
    [inst], _ = DATASETS.get("factscore_bio")(data_dir=tmp_path).load()
    assert [(u.text, u.binary, u.meta["labels"]["data"]) for u in inst.units] == [("A B is a poet", 0, "S"),
                                                                         ("A B likes tea", None, "IR")]
    assert inst.id == "factscore_bio/test/PerplexityAI-A_B" and inst.meta["labels"]["unsupported_share"] == 0.0


def _row(item: str, score: float | None, label: int | None, detector: str = "d") -> dict[str, object]:
    return {"dataset": "x", "model": "m", "detector": detector, "level": "claim", "part": "test", "item_id": item,
            "score": score, "label": label}


def test_response_scores_from_claims_known_answers() -> None:
    rows = [_row("a", 0.9, 1), _row("a", 0.1, 0), _row("a", 0.2, 0),   # one bad claim, scored worst
            _row("b", 0.3, 0), _row("b", 0.4, 0),                       # all supported
            _row("c", 0.8, 1), _row("c", 0.7, 1), _row("c", None, None),  # mostly bad; an unscored IR claim
            _row("d", 0.05, 0)]
    per = response_scores(rows)
    # median claim score over the cell: of [0.9, 0.1, 0.2, 0.3, 0.4, 0.8, 0.7, 0.05] = 0.35
    assert per["a"] == {"worst_claim": 0.9, "claim_share": pytest.approx(1 / 3), "label": 1,
                        "unsupported_share": pytest.approx(1 / 3)}
    assert per["b"]["claim_share"] == 0.5 and per["b"]["label"] == 0
    assert per["c"]["worst_claim"] == 0.8 and per["c"]["claim_share"] == 1.0 and per["c"]["unsupported_share"] == 1
    out = {(r["aggregate"], r["metric"]): r for r in from_claims_rows(rows)}
    assert out[("worst_claim", "auroc")]["value"] == 1.0  # 0.9, 0.8 above 0.4, 0.05
    assert out[("worst_claim", "auroc")]["n"] == 4 and out[("worst_claim", "auroc")]["n_positive"] == 2
    assert out[("claim_share", "auroc")]["value"] == 0.75  # a (1/3) ranks below b (1/2): 3 of 4 pairs right
    assert out[("claim_share", "spearman_unsupported_share")]["value"] == pytest.approx(
        np.corrcoef([2, 3, 4, 1], [3, 1.5, 4, 1.5])[0, 1])  # ranks of (1/3, 1/2, 1, 0) vs (1/3, 0, 1, 0)
    one_class = from_claims_rows([_row("a", 0.2, 0), _row("b", 0.3, 0)])
    assert one_class[0]["value"] is None and "one class" in one_class[0]["note"]


def test_level_flag_picks_the_suite_with_selectable_levels() -> None:
    assert suite_with_levels(None, ["factscore_bio"], ["claim"]) == ("longform", {"levels": ["claim"]})
    with pytest.raises(HaldetError, match="needs a suite"):
        suite_with_levels(None, ["halueval_qa"], ["claim"])
    with pytest.raises(HaldetError, match="fixed levels"):
        suite_with_levels("halluentity", ["halluentity"], ["claim"])


def test_level_flag_sets_the_suite_and_its_levels_over_the_config_file(tmp_path: Path) -> None:
    from haldet.cli.run import RunOptions, run_config

    config = run_config(RunOptions(dataset=["factscore_bio"], level=["claim,response"], detector=["likelihood"]))
    assert config.suite == "longform" and config.suite_params["longform"]["levels"] == ["claim", "response"]
    assert config.datasets == ["factscore_bio"] and config.detectors == ["likelihood"]
    file = tmp_path / "run.yaml"
    file.write_text(json.dumps({"suite": "longform", "suite_params": {"longform": {"levels": ["response"],
                                                                                  "labels": "data"}}}))
    config = run_config(RunOptions(config_file=file, level=["claim"]))
    assert config.suite_params["longform"] == {"levels": ["claim"], "labels": "data"}
    assert run_config(RunOptions(config_file=file)).suite_params["longform"]["levels"] == ["response"]


def test_level_flag_with_your_own_responses(tmp_path: Path) -> None:
    from haldet.cli.run import RunOptions, run_config

    file = tmp_path / "mine.jsonl"
    file.write_text(json.dumps({"prompt": "Tell me a bio of A B.", "response": "A B is a poet. A B likes tea.",
                                "units": [{"start": 0, "end": 13, "label": 0, "kind": "claim"}]}) + "\n")
    assert run_config(RunOptions(responses=file)).suite_params["responses"]["levels"] == ["response", "claim"]
    config = run_config(RunOptions(responses=file, level=["claim"]))
    assert config.suite == "responses" and config.suite_params["responses"]["levels"] == ["claim"]
