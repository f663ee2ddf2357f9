"""TRIVIA+ Table 2 (context lengths of the data) and Table 13 (self-detect vs all responses) on hand-made items whose
statistics, AUROCs and thresholds are worked out in the comments; then through the suite's own hooks."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from haldet.config import RunConfig
from haldet.schema import Category, Instance
from haldet.suites.base import get_suite
from haldet.suites.report import suite_markdown
from haldet.suites.triviaplus.analysis import DetectorScores
from haldet.suites.triviaplus.paper_tables import PROXY, model_key, self_generator, table2, table13

LLAMA, GPT = "llama-2-7b-chat", "gpt-4"


def item(name: str, y: int, generator: str, chars: int = 100, domain: str = "NQ") -> Instance:
    return Instance(id=f"ragtruth_qa/x/{name}", dataset="ragtruth_qa", scenario="rag", task_type="span",
                    question="q", context="c", response="r",
                    response_label=Category.HALLUCINATION if y else Category.CORRECT,
                    meta={"generator": generator, "context_chars": chars, "domain": domain,
                          PROXY: "meta-llama/Llama-2-7b-chat-hf"})


# test: self (llama) t1..t4, the others (gpt-4) t5..t8; validation: v1, v2 (llama), v3, v4 (gpt-4)
TEST = {"t1": (1, LLAMA, 0.9), "t2": (0, LLAMA, 0.1), "t3": (1, LLAMA, 0.8), "t4": (0, LLAMA, 0.7),
        "t5": (1, GPT, 0.2), "t6": (0, GPT, 0.95), "t7": (1, GPT, 0.3), "t8": (0, GPT, 0.6)}
VAL = {"v1": (1, LLAMA, 0.6), "v2": (0, LLAMA, 0.4), "v3": (1, GPT, 0.5), "v4": (0, GPT, 0.55)}
ITEMS = {f"ragtruth_qa/x/{k}": item(k, y, g) for k, (y, g, _) in {**TEST, **VAL}.items()}
SCORES = DetectorScores("redeep", {f"ragtruth_qa/x/{k}": s for k, (_, _, s) in VAL.items()},
                        {f"ragtruth_qa/x/{k}": s for k, (_, _, s) in TEST.items()})


def cells(rows: list[dict]) -> dict[tuple[str, str, str], float | None]:
    return {(r["responses"], r["tune_on"], r["metric"]): r["value"] for r in rows}


def test_table13_self_detect_and_all_known_answers() -> None:
    generator, why = self_generator(list(ITEMS.values()), None)
    assert (generator, why) == (LLAMA, "")  # "Llama-2-7b-chat-hf" under meta-llama/ matches "llama-2-7b-chat"
    got = cells(table13([SCORES], ITEMS, generator, why))
    me = f"self-detect ({LLAMA})"
    # self: positives 0.9, 0.8 above both negatives 0.1, 0.7 -> AUROC 1; all: 8 of 16 pairs ordered -> 0.5
    assert got[(me, "val", "auroc")] == 1.0 and got[("all", "val", "auroc")] == 0.5
    # tuned on the self test items: t = 0.8 separates them -> F1 = P = R = 1
    assert [got[(me, "test", m)] for m in ("f1", "precision", "recall")] == [1.0, 1.0, 1.0]
    # tuned on all test items: t = 0.2 -> tp 4, fp 3 -> F1 8/11, P 4/7, R 1
    assert got[("all", "test", "f1")] == pytest.approx(8 / 11) and got[("all", "test", "precision")] == pytest.approx(
        4 / 7) and got[("all", "test", "recall")] == 1.0
    # from validation: self val (0.6 y1, 0.4 y0) -> t = 0.6; on self test: t1, t3 right, t4 wrong -> P 2/3, R 1
    assert got[(me, "val", "precision")] == pytest.approx(2 / 3) and got[(me, "val", "f1")] == pytest.approx(0.8)
    # all val (0.6 y1, 0.55 y0, 0.5 y1, 0.4 y0) -> t = 0.5: on all test tp 2, fp 3, fn 2 -> P 2/5, R 1/2, F1 4/9
    assert got[("all", "val", "precision")] == pytest.approx(0.4) and got[("all", "val", "f1")] == pytest.approx(4 / 9)


def test_no_matching_generator_is_said_and_the_option_names_one() -> None:
    other = [i.model_copy(update={"meta": {**i.meta, PROXY: "smollm2-135m"}}) for i in ITEMS.values()]
    generator, why = self_generator(other, None)
    assert generator is None and "no generator matches the proxy model smollm2-135m" in why and "gpt-4" in why
    rows = table13([SCORES], ITEMS, generator, why)
    assert all(r["value"] is None and r["note"] == why for r in rows if r["responses"].startswith("self"))
    assert self_generator(other, GPT) == (GPT, "")
    assert "wrote none" in self_generator(other, "claude")[1]
    assert model_key("Org/Model-X-hf") == "model-x"


def test_table2_context_statistics() -> None:
    items = [item("a", 1, "g1", 100, "NQ"), item("b", 0, "g1", 300, "NQ"), item("c", 0, "g2", 2000, "DROP"),
             item("d", 1, "g3", 9000, "COVID")]
    rows = table2(items, {"train": ["ragtruth_qa/x/a", "ragtruth_qa/x/b"], "test": ["ragtruth_qa/x/c",
                                                                                     "ragtruth_qa/x/d"]})
    got = {(r["split"], r["metric"]): r["value"] for r in rows}
    # all: lengths 100 300 2000 9000 -> median 1150, mean 2850, max 9000; 2 of 4 hallucinated; 3 generators
    assert [got[("all", m)] for m in ("context_median", "context_mean", "context_max", "n_items",
                                      "hallucinated_share", "n_llms")] == [1150.0, 2850.0, 9000, 4, 0.5, 3]
    assert [got[("test", m)] for m in ("context_median", "context_mean", "n_llms")] == [5500.0, 5500.0, 2]
    assert {r["note"] for r in rows if r["split"] == "all"} == {"domains: COVID, DROP, NQ"}


class _Backend:
    name = "meta-llama/Llama-2-7b-chat-hf"

    def window(self) -> int:
        return 100_000

    def encode_text(self, text: str) -> list[int]:
        return [0] * len(text.split())


def test_the_suite_stamps_the_proxy_and_writes_both_tables() -> None:
    suite = get_suite("triviaplus")
    config = RunConfig(suite="triviaplus", suite_params={"triviaplus": {}})
    plain = [i.model_copy(update={"meta": {k: v for k, v in i.meta.items() if k != PROXY}}) for i in ITEMS.values()]
    prepared = suite.prepare_instances(plain, _Backend(), config)
    assert {i.meta[PROXY] for i in prepared} == {_Backend.name}
    run = SimpleNamespace(name="redeep", family="white", train_labels="", error="",
                          unit_scores={"items": {"val": SCORES.val, "test": SCORES.test}})
    split = {"train": [], "val": list(SCORES.val), "test": list(SCORES.test)}
    rows = [{**r, "dataset": "ragtruth_qa", "model": "llama"} for r in suite.extra_rows(prepared, split, [run], config)]
    assert cells([r for r in rows if r.get("table") == "Table 13"])[(f"self-detect ({LLAMA})", "val", "auroc")] == 1.0
    text = suite_markdown(suite, rows)
    assert "Table 2 (context length" in text and "Table 13 (self-detect" in text
    assert f"| redeep | self-detect ({LLAMA}) | val | 1.000 |" in text
