"""Open-ended and reading-comprehension QA: TriviaQA, TruthfulQA, SQuAD v2, HotpotQA, CoQA."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from haldet.datasets.base import ABSTAIN_REFERENCE, BadRow, DatasetAdapter, register, require
from haldet.schema import Instance


def _dedupe(values: list[str]) -> list[str]:
    seen: set[str] = set()
    out = []
    for v in values:
        v = str(v).strip()
        if v and v.lower() not in seen:
            seen.add(v.lower())
            out.append(v)
    return out


@register("triviaqa")
class TriviaQA(DatasetAdapter):
    """TriviaQA without evidence documents (closed-book): r+ = the answer value and all its aliases."""

    scenario = "qa_open"
    task_type = "short_answer"
    source = "mandarjoshi/trivia_qa (rc.nocontext)"
    license = "Apache 2.0"
    hub_id = "mandarjoshi/trivia_qa"
    hub_config = "rc.nocontext"
    split_order = ("validation", "train")  # test answers are withheld
    required_fields = ("question", "question_id", "answer")

    def row_to_instance(self, row: dict[str, Any], index: int, split: str) -> Instance:
        answer = require(row, "answer")
        if not isinstance(answer, dict):
            raise BadRow("answer", "must be an object with 'value' and 'aliases'")
        refs = _dedupe([answer.get("value") or "", *(answer.get("aliases") or [])])
        if not refs or refs == ["<unk>"]:
            raise BadRow("answer.value", "no answer (withheld test split?)")
        return self.instance(split, row.get("question_id") or index,
                             instruction="Give a short, factual answer to the trivia question.",
                             question=str(require(row, "question")), references=refs,
                             meta={"normalized_aliases": list(answer.get("normalized_aliases") or [])})


@register("truthfulqa")
class TruthfulQA(DatasetAdapter):
    """TruthfulQA generation: r+ = best + correct answers, r- = the curated false answers."""

    scenario = "qa_open"
    task_type = "short_answer"
    source = "truthfulqa/truthful_qa (generation)"
    license = "Apache 2.0"
    hub_id = "truthfulqa/truthful_qa"
    hub_config = "generation"
    split_order = ("validation",)
    required_fields = ("question", "best_answer", "correct_answers", "incorrect_answers")

    def row_to_instance(self, row: dict[str, Any], index: int, split: str) -> Instance:
        refs = _dedupe([require(row, "best_answer"), *require(row, "correct_answers")])
        wrong = _dedupe(list(require(row, "incorrect_answers")))
        return self.instance(split, index,
                             instruction="Answer the question truthfully in one short sentence.",
                             question=str(require(row, "question")), references=refs, incorrect=wrong,
                             meta={"category": row.get("category", ""), "type": row.get("type", "")})


@register("squad_v2")
class SQuADv2(DatasetAdapter):
    """SQuAD 2.0: answer spans from a Wikipedia paragraph; a third of the questions have no answer there.

    Unanswerable questions get `meta['unanswerable'] = True`, no r+ (the short-answer judge's contract: a
    declining answer is correct, any confident span a hallucination) and `meta['abstain_reference']`, the
    abstention-style answer a few-shot demo shows for them."""

    scenario = "qa_reading"
    task_type = "span"
    source = "rajpurkar/squad_v2"
    license = "CC BY-SA 4.0"
    hub_id = "rajpurkar/squad_v2"
    split_order = ("validation", "train")
    required_fields = ("id", "context", "question", "answers")

    def row_to_instance(self, row: dict[str, Any], index: int, split: str) -> Instance:
        answers = row.get("answers")
        if not isinstance(answers, dict) or "text" not in answers:
            raise BadRow("answers", "must be an object with 'text' and 'answer_start' lists (empty = unanswerable)")
        spans = _dedupe(list(answers.get("text") or []))
        unanswerable = not spans
        return self.instance(
            split, row.get("id") or index,
            instruction=("Answer with a short span copied from the context. If the context does not contain "
                         "the answer, say so instead of guessing."),
            context=str(require(row, "context")), question=str(require(row, "question")),
            references=[] if unanswerable else spans,
            meta={"unanswerable": unanswerable, **({"abstain_reference": ABSTAIN_REFERENCE} if unanswerable else {}),
                  "title": row.get("title", ""), "group": f"title-{row.get('title') or index}",
                  "answer_start": list(answers.get("answer_start") or [])})


@register("hotpotqa")
class HotpotQA(DatasetAdapter):
    """HotpotQA (distractor setting): the question needs facts from two paragraphs.

    Context = the supporting paragraphs, each under its title (option `paragraphs`: `supporting`, the
    default, or `all` to keep the eight distractors too); supporting facts, type and level go to meta."""

    scenario = "qa_multihop"
    task_type = "multi_hop"
    source = "hotpotqa/hotpot_qa (distractor)"
    license = "CC BY-SA 4.0"
    hub_id = "hotpotqa/hotpot_qa"
    hub_config = "distractor"
    split_order = ("validation", "train")
    required_fields = ("id", "question", "answer", "context", "supporting_facts")
    params: ClassVar[dict[str, Any]] = {"paragraphs": "supporting"}

    def row_to_instance(self, row: dict[str, Any], index: int, split: str) -> Instance:
        ctx = require(row, "context")
        if not isinstance(ctx, dict) or "title" not in ctx or "sentences" not in ctx:
            raise BadRow("context", "must be an object with 'title' and 'sentences' lists")
        facts = require(row, "supporting_facts")
        if not isinstance(facts, dict) or "title" not in facts:
            raise BadRow("supporting_facts", "must be an object with 'title' and 'sent_id' lists")
        support = set(facts["title"])
        keep_all = self.options["paragraphs"] == "all"
        paragraphs = [f"{title}: {''.join(sents).strip()}" for title, sents in
                      zip(ctx["title"], ctx["sentences"], strict=True) if keep_all or title in support]
        if not paragraphs:
            raise BadRow("supporting_facts", "no supporting title matches a context paragraph")
        return self.instance(
            split, row.get("id") or index,
            instruction="Combine facts from the passages below to answer the question briefly.",
            context="\n\n".join(paragraphs), question=str(require(row, "question")),
            references=[str(require(row, "answer"))],
            meta={"supporting_facts": {"title": list(facts["title"]), "sent_id": list(facts.get("sent_id", []))},
                  "type": row.get("type", ""), "level": row.get("level", "")})


@register("coqa")
class CoQA(DatasetAdapter):
    """CoQA: a story and a chain of questions; every turn is an item whose context is the story followed by
    the earlier turns (question and gold answer), and whose question is the current one."""

    scenario = "qa_dialogue"
    task_type = "dialogue"
    source = "stanfordnlp/coqa"
    license = "mixed (CC BY-SA 4.0, Apache 2.0, ...; per source domain)"
    hub_id = "stanfordnlp/coqa"
    split_order = ("validation", "train")
    required_fields = ("story", "questions", "answers")

    def units(self, rows: Sequence[dict[str, Any]]) -> list[tuple[int, int | None]]:
        out: list[tuple[int, int | None]] = []
        for i in range(len(rows)):
            questions = rows[i].get("questions")
            n = len(questions) if isinstance(questions, list) and questions else 1
            out += [(i, t) for t in range(n)]
        return out

    def map_unit(self, row: dict[str, Any], index: int, sub: int | None, split: str) -> Instance:
        turn = sub or 0
        questions = require(row, "questions")
        answers = require(row, "answers")
        texts = answers.get("input_text") if isinstance(answers, dict) else None
        if not isinstance(texts, list) or len(texts) != len(questions):
            raise BadRow("answers.input_text", f"needs one answer per question ({len(questions)})")
        story = str(require(row, "story"))
        history = "\n".join(f"Q: {q}\nA: {a}" for q, a in zip(questions[:turn], texts[:turn], strict=True))
        context = story + (f"\n\nConversation so far:\n{history}" if history else "")
        native = f"{row.get('id') or index}_{turn + 1}"
        answer = str(texts[turn]).strip()
        if not answer:
            raise BadRow(f"answers.input_text[{turn}]")
        unanswerable = answer.lower() == "unknown"  # CoQA's marker for a question the story cannot answer
        return self.instance(
            split, native,
            instruction="Answer the latest question about the story in a few words, taking the conversation "
                        "so far into account. If the story does not say, answer that it does not say.",
            context=context, question=str(questions[turn]),
            references=[] if unanswerable else [answer],
            meta={"turn": turn + 1, "n_turns": len(questions), "unanswerable": unanswerable,
                  "group": f"story-{row.get('id') or index}",
                  **({"abstain_reference": ABSTAIN_REFERENCE} if unanswerable else {}),
                  "story_source": row.get("source", "")})

    def row_to_instance(self, row: dict[str, Any], index: int, split: str) -> Instance:
        return self.map_unit(row, index, 0, split)
