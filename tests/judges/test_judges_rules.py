"""Rule judges on real model phrasing: MCQ letters and texts, math final numbers (units, commas, \\boxed{}),
short answers (aliases, F1, r-), SQuAD v2 unanswerable questions, abstentions, tool calls, and the cascade."""

from __future__ import annotations

import json

import pytest

from haldet.config import JudgeConfig
from haldet.errors import HaldetError
from haldet.judges.base import Undecided
from haldet.judges.cascade import Cascade
from haldet.judges.math import MathJudge, final_number
from haldet.judges.mcq import MCQJudge, chosen_letters
from haldet.judges.short_answer import ShortAnswerJudge
from haldet.judges.text import as_number, is_abstention, normalize, numbers_in, token_f1
from haldet.judges.tool_call import ToolCallJudge
from haldet.schema import Category, Generation, Instance, Label


def inst(task_type: str, **kw: object) -> Instance:
    kw.setdefault("question", "q?")
    return Instance(id=f"t/test/{task_type}", dataset="t", scenario="s", task_type=task_type, **kw)  # type: ignore[arg-type]


def gen(text: str, finish: str = "stop") -> Generation:
    return Generation(id="t/test/x", prompt="p", response=text, token_ids=[], token_logprobs=[],
                      finish_reason=finish, n_tokens=0, model="m")


def category(judge, instance: Instance, text: str, finish: str = "stop") -> str:  # type: ignore[no-untyped-def]
    verdict = judge.judge(instance, gen(text, finish))
    return "undecided" if isinstance(verdict, Undecided) else verdict.category.value


# --- text helpers -------------------------------------------------------------------------------------------
def test_normalize_folds_accents_commas_numbers_and_contractions() -> None:
    assert normalize("Zürich, the city") == "zurich city"
    assert normalize("1,000,000 people") == "1000000 people"
    assert normalize("Three Musketeers") == "3 musketeers"
    assert normalize("I don’t know") == "i dont know"


def test_token_f1_hand_computed() -> None:
    # pred {paris, france}, ref {paris}: P = 1/2, R = 1 -> F1 = 2/3
    assert token_f1("Paris, France", "Paris") == pytest.approx(2 / 3)
    assert token_f1("London", "Paris") == 0.0


@pytest.mark.parametrize("text", [
    "I don't know.",
    "I’m sorry, but I don't have enough information to answer that.",
    "The context does not mention who designed the bridge.",
    "The passage doesn't say when he was born.",
    "There is no information about his wife in the text provided.",
    "I cannot determine the answer from the given context.",
    "I'm not sure.",
    "Hmm, I am not entirely certain, sorry.",
    "Unfortunately, I'm unable to provide the exact figure.",
    "No comment.",
    "As an AI language model, I cannot browse the internet to verify this.",
    "This cannot be determined from the information given.",
    "Unknown",
    "I'm sorry, but I can't assist with that.",
    "It is impossible to say from the passage alone.",
    "The provided text does not contain information about the treaty.",
    "I could not find the answer in the context.",
    "The answer is not given in the passage.",
])
def test_abstentions_on_real_phrasing(text: str) -> None:
    assert is_abstention(text)


@pytest.mark.parametrize("text", [
    "I'm not sure, but I think it was Thomas Edison.",
    "The answer is unknowable to most, but it is 42.".replace("unknowable to most, but it is", "is"),
    "No, the Eiffel Tower is in Paris.",
    "Paris is the capital of France.",
    "Knowledge of the area suggests it is Lake Victoria.",
])
def test_not_abstentions(text: str) -> None:
    assert not is_abstention(text)


def test_numbers_with_units_commas_fractions() -> None:
    assert numbers_in("She paid $1,250.50 for 3 items") == [1250.5, 3.0]
    assert numbers_in("\\frac{3}{4} of the cake") == [0.75]
    assert as_number("1,234") == 1234.0
    assert as_number("[1, 2]") is None
    assert as_number("True") is None


# --- math ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("text", "value"), [
    ("Janet has 16 eggs, eats 3 and bakes 4, so 16 - 3 - 4 = 9 eggs. She sells them for $2 each: 9 * 2 = 18.\n"
     "#### 18", 18.0),
    ("First, 120 / 4 = 30. Then 30 + 12 = 42. The answer is 42 apples.", 42.0),
    ("So the total cost is \\boxed{1,250} dollars.", 1250.0),
    ("Step 1: 3 + 5 = 8.\nStep 2: 8 * 2 = 16.\nTherefore she walked 16 km.", 16.0),
    ("The answer is: 5 + 3 = 8.", 8.0),
    ("Final answer: $\\frac{1}{2}$", 0.5),
    ("The answer is -7.", -7.0),
])
def test_final_number_extraction(text: str, value: float) -> None:
    assert final_number(text)[0] == pytest.approx(value)


def test_math_judge_tolerance_units_commas_and_truncation() -> None:
    judge = MathJudge(rel_tol=1e-4)
    item = inst("reasoning", references=["1250"])
    assert category(judge, item, "He earns 50 * 25 = 1,250 dollars. The answer is $1,250.") == "correct"
    assert category(judge, item, "The answer is 1250.00 dollars") == "correct"
    assert category(judge, item, "The answer is 1,205.") == "hallucination"
    # cut off mid-reasoning: the last number is a step, not an answer
    assert category(judge, item, "First, 50 * 25 = 1250. Then we subtract 30", finish="length") == "undecided"
    assert category(judge, item, "I'm not sure how to solve this.") == "abstention"
    pct = inst("reasoning", references=["0.25"])
    assert category(judge, pct, "So the probability is 25%.") == "correct"
    truth = inst("science", references=["True"])
    assert category(judge, truth, "By the theorem the statement holds. Answer: True") == "correct"
    assert category(judge, truth, "Answer: False") == "hallucination"
    assert not judge.applies(inst("science", references=["[1, 2]"]))


# --- MCQ ----------------------------------------------------------------------------------------------------
OPTIONS = {"A": "London", "B": "Paris", "C": "Berlin", "D": "Madrid"}


@pytest.mark.parametrize(("text", "expected"), [
    ("B", "correct"),
    ("B. Paris", "correct"),
    ("(B)", "correct"),
    ("The correct answer is B.", "correct"),
    ("Answer: (C) Berlin", "hallucination"),
    ("A good guess would be B", "correct"),  # the article "A" is not a choice
    ("The capital of France is Paris.", "correct"),  # option text, no letter
    ("I think the answer is D, Madrid.", "hallucination"),
    ("I don't know.", "abstention"),
    ("A or C, hard to say", "undecided"),
    ("", "invalid"),
    ("A", "hallucination"),  # a bare letter A is a choice, not an empty answer (found by benchmarks/judges.py)
    ("A.", "hallucination"),
])
def test_mcq_judge(text: str, expected: str) -> None:
    item = inst("mcq", options=OPTIONS, references=["B"], incorrect=["A", "C", "D"])
    assert category(MCQJudge(), item, text) == expected


def test_mcq_multi_letter_and_text_references() -> None:
    item = inst("mcq", options=OPTIONS, references=["A, C"])
    assert category(MCQJudge(), item, "The answers are A and C") == "correct"
    assert chosen_letters("answer is a cat", list(OPTIONS)) == ([], "no option letter in the answer")
    by_text = inst("mcq", options=OPTIONS, references=["Paris"])
    assert category(MCQJudge(), by_text, "B") == "correct"


# --- short answers, SQuAD v2 --------------------------------------------------------------------------------
def test_short_answer_aliases_f1_and_traps() -> None:
    judge = ShortAnswerJudge()
    item = inst("short_answer", references=["William Shakespeare", "Shakespeare"],
                incorrect=["Christopher Marlowe"])
    assert category(judge, item, "It was written by Shakespeare.") == "correct"
    assert category(judge, item, "Hamlet was written by Christopher Marlowe.") == "hallucination"
    assert category(judge, item, "I'm not sure, but I believe Shakespeare wrote it.") == "correct"
    assert category(judge, item, "I'm not sure.") == "abstention"
    assert category(judge, item, "Ben Jonson") == "undecided"  # low overlap alone decides nothing
    assert category(judge, item, "Either Marlowe or Shakespeare") == "correct"  # "Marlowe" alone is not r-
    both = inst("short_answer", references=["Shakespeare"], incorrect=["Marlowe"])
    assert category(judge, both, "Either Marlowe or Shakespeare") == "undecided"
    sentence_trap = inst("grounded_qa", question="Where is the sanctuary?",
                         references=["Talbot-Taylor Wildlife Sanctuary"],
                         incorrect=["The school is located in the Talbot-Taylor Wildlife Sanctuary."])
    assert category(judge, sentence_trap, "The school is located in the Talbot-Taylor Wildlife Sanctuary.") == \
        "hallucination"
    assert category(judge, sentence_trap, "It is the Talbot-Taylor Wildlife Sanctuary.") == "correct"
    nums = inst("short_answer", references=["1,000 km"])
    assert category(judge, nums, "about 1000 km") == "correct"
    accents = inst("short_answer", references=["Zürich"])
    assert category(judge, accents, "Zurich") == "correct"
    yes = inst("short_answer", references=["no"])
    assert category(judge, yes, "No, there is no such law.") == "correct"
    assert category(judge, yes, "Yes, it is not allowed in most states.") == "hallucination"


def test_f1_decides_with_r_minus_and_long_references_stay_undecided() -> None:
    judge = ShortAnswerJudge(f1_threshold=0.5)
    item = inst("grounded_qa", references=["the second world war ended in 1945"],
                incorrect=["the second world war ended in 1939"])
    assert category(judge, item, "It ended in 1945, the war.") == "correct"
    assert category(judge, item, "the war ended in 1939") == "hallucination"
    long_ref = inst("dialogue", references=["He starred in several action movies including Die Hard and its sequels"])
    assert category(judge, long_ref, "Yes, Bruce Willis is great!") == "undecided"


def test_squad_v2_unanswerable() -> None:
    judge = ShortAnswerJudge()
    item = inst("span", context="The Normans settled in Normandy.", question="When did the Normans leave?",
                meta={"unanswerable": True})
    assert judge.applies(item)
    assert category(judge, item, "The context does not say when the Normans left.") == "correct"
    assert category(judge, item, "They left in 1066.") == "hallucination"
    answerable = inst("span", references=["in the 10th century", "10th century"], meta={"unanswerable": False})
    assert category(judge, answerable, "In the 10th century.") == "correct"
    assert category(judge, answerable, "The passage doesn't mention it.") == "abstention"


# --- tool calls ---------------------------------------------------------------------------------------------
def test_tool_call_judge() -> None:
    ref = json.dumps([{"arguments": {"city": "Paris", "days": 3}, "name": "get_weather"}], sort_keys=True)
    item = inst("tool_call", references=[ref])
    judge = ToolCallJudge()
    assert judge.applies(item)
    ok = '```json\n[{"name": "get_weather", "arguments": {"days": "3", "city": "paris"}}]\n```'
    assert category(judge, item, ok) == "correct"
    assert category(judge, item, '[{"name": "get_forecast", "arguments": {"city": "Paris"}}]') == "hallucination"
    assert category(judge, item, '{"name": "get_weather", "arguments": {"city": "Rome", "days": 3}}') == \
        "hallucination"
    assert category(judge, item, "Sure! The weather in Paris is sunny.") == "undecided"


# --- cascade ------------------------------------------------------------------------------------------------
def test_cascade_routes_and_marks_undecidable_invalid() -> None:
    cascade = Cascade.from_config(JudgeConfig(kind="cascade"))
    items = [
        (inst("mcq", options=OPTIONS, references=["B"]), gen("B")),
        (inst("reasoning", references=["42"]), gen("The answer is 42.")),
        (inst("summarization", context="doc", references=["a summary"]), gen("A summary of it.")),
        (inst("reasoning", references=["42"]), gen("We start with 40 and then", "length")),
    ]
    out: dict[int, object] = {}
    cascade.judge_many(items, lambda i, o: out.__setitem__(i, o))
    assert isinstance(out[0], Label) and out[0].category is Category.CORRECT and out[0].judge == "rule:mcq"
    assert isinstance(out[1], Label) and out[1].judge == "rule:math"
    assert isinstance(out[2], Label) and out[2].category is Category.INVALID
    assert "no configured judge" in out[2].reasoning
    assert isinstance(out[3], Label) and out[3].category is Category.INVALID
    assert "cut off" in out[3].reasoning


def test_plugin_judge_from_the_registry_comes_first() -> None:
    from haldet.judges.base import JUDGES, Judge, register

    if "test:always_correct" not in JUDGES:
        @register("test:always_correct")
        class AlwaysCorrect(Judge):
            def applies(self, instance: Instance) -> bool:
                return instance.task_type == "summarization"

            def judge(self, instance: Instance, generation: Generation) -> Label:
                return self.label(instance, Category.CORRECT, "plugin says so")

    cascade = Cascade.from_config(JudgeConfig(kind="rule", extra=["test:always_correct"]))
    lab = cascade.judge(inst("summarization", context="doc", references=["r"]), gen("anything"))
    assert isinstance(lab, Label) and lab.judge == "test:always_correct"
    assert cascade.fingerprint()[1] == "test:always_correct"
    with pytest.raises(HaldetError, match="unknown judge"):
        Cascade.from_config(JudgeConfig(extra=["nope"]))


def test_short_answer_without_a_usable_reference_is_undecided_not_a_crash() -> None:
    """A row whose reference normalises to nothing (HaluEval-QA has one within its first 1,000 rows): matching the
    known wrong answer still labels it; anything else has nothing to compare with."""
    judge = ShortAnswerJudge()
    item = inst("short_answer", references=["."], incorrect=["Paris"])
    assert category(judge, item, "It is Paris.") == "hallucination"
    assert category(judge, item, "It is London.") == "undecided"
