"""Open-ended and reading-comprehension QA: TriviaQA, TruthfulQA, SQuAD v2, HotpotQA, CoQA."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, ClassVar

from haldet.datasets.adapter import DatasetAdapter
from haldet.datasets.base import register
from haldet.datasets.formats import SPLIT_WORDS, Format, RawFile, records, with_line
from haldet.datasets.rows import ABSTAIN_REFERENCE, BadRow, require
from haldet.schema import Instance

Parts = list[tuple[str | None, list[dict[str, Any]]]] | None


def _trivia_release(raw: RawFile) -> Parts:
    """TriviaQA release (`qa/wikipedia-dev.json`, `web-dev.json`, ...): {"Data": [{"Question", "QuestionId",
    "Answer": {"Value", "Aliases", "NormalizedAliases"}}], "Split": "dev"}."""
    recs = records(raw, "Data")
    if recs is None or not all("Question" in r and "Answer" in r for r, _ in recs):
        return None
    rows = [with_line(r, line, question=r["Question"], question_id=r.get("QuestionId"),
                      answer={"value": (r.get("Answer") or {}).get("Value"),
                              "aliases": (r.get("Answer") or {}).get("Aliases") or [],
                              "normalized_aliases": (r.get("Answer") or {}).get("NormalizedAliases") or []})
            for r, line in recs]
    return [(SPLIT_WORDS.get(str(raw.data.get("Split", "")).lower()), rows)]


def _semicolons(value: Any) -> list[str]:
    """A list given as one delimited string (TruthfulQA's CSV: 'a; b; c')."""
    if isinstance(value, list):
        return [str(v).strip() for v in value if str(v).strip()]
    return [v.strip() for v in str(value or "").split(";") if v.strip()]


def _truthfulqa_csv(raw: RawFile) -> Parts:
    """TruthfulQA.csv (the authors' release): Type, Category, Question, Best Answer, Correct Answers,
    Incorrect Answers, Source; the answer lists are ';'-separated. The hub has it as one validation split."""
    rows = raw.rows()
    if rows is None or not rows or not {"Question", "Best Answer", "Correct Answers", "Incorrect Answers"} <= set(
            raw.columns()):
        return None
    out = [with_line(r, r.get("_line"), type=r.get("Type", ""), category=r.get("Category", ""),
                     question=r.get("Question"), best_answer=r.get("Best Answer"),
                     correct_answers=_semicolons(r.get("Correct Answers")),
                     incorrect_answers=_semicolons(r.get("Incorrect Answers")), source=r.get("Source", ""))
           for r in rows]
    return [("validation", out)]


def _squad_release(raw: RawFile) -> Parts:
    """Official SQuAD v2.0 JSON (`dev-v2.0.json`): {"version", "data": [{"title", "paragraphs": [{"context",
    "qas": [{"id", "question", "answers": [{"text", "answer_start"}], "is_impossible"}]}]}]}."""
    recs = records(raw, "data")
    if recs is None or not all("paragraphs" in r for r, _ in recs):
        return None
    rows = []
    for article, line in recs:
        for para in article.get("paragraphs") or []:
            for qa in para.get("qas") or []:
                answers = [] if qa.get("is_impossible") else list(qa.get("answers") or [])
                qa_line = raw.line_of(json.dumps(qa.get("id")), line) if qa.get("id") is not None else line
                rows.append(with_line(qa, qa_line, id=qa.get("id"), title=article.get("title", ""),
                                      context=para.get("context"), question=qa.get("question"),
                                      answers={"text": [a.get("text") for a in answers],
                                               "answer_start": [a.get("answer_start") for a in answers]}))
    return [(None, rows)]


def _hotpot_release(raw: RawFile) -> Parts:
    """HotpotQA release JSON (`hotpot_dev_distractor_v1.json`): a list of {"_id", "question", "answer",
    "supporting_facts": [[title, sent_id]], "context": [[title, [sentences]]], "type", "level"}."""
    recs = records(raw)
    if recs is None or not recs or not all("_id" in r and isinstance(r.get("context"), list) for r, _ in recs):
        return None
    rows = []
    for r, line in recs:
        ctx, facts = r.get("context") or [], r.get("supporting_facts") or []
        rows.append(with_line(r, line, id=r["_id"], question=r.get("question"), answer=r.get("answer"),
                              type=r.get("type", ""), level=r.get("level", ""),
                              supporting_facts={"title": [f[0] for f in facts], "sent_id": [f[1] for f in facts]},
                              context={"title": [c[0] for c in ctx], "sentences": [c[1] for c in ctx]}))
    return [(None, rows)]


def _coqa_release(raw: RawFile) -> Parts:
    """CoQA release JSON (`coqa-dev-v1.0.json`): {"version", "data": [{"id", "source", "story", "questions":
    [{"input_text", "turn_id"}], "answers": [{"input_text", "span_start", "span_end", "turn_id"}]}]}. The hub
    copy has no story id, so none is kept (the same item ids either way)."""
    recs = records(raw, "data")
    if recs is None or not all("story" in r and isinstance(r.get("questions"), list) for r, _ in recs):
        return None
    if not all(isinstance(q, dict) for r, _ in recs for q in r["questions"]):
        return None
    rows = []
    for r, line in recs:
        answers = sorted(r.get("answers") or [], key=lambda a: a.get("turn_id", 0))
        questions = sorted(r["questions"], key=lambda q: q.get("turn_id", 0))
        rows.append(with_line(r, line, source=r.get("source", ""), story=r.get("story"),
                              questions=[q.get("input_text") for q in questions],
                              answers={"input_text": [a.get("input_text") for a in answers],
                                       "answer_start": [a.get("span_start") for a in answers],
                                       "answer_end": [a.get("span_end") for a in answers]}))
    return [(None, rows)]


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
    originals = (Format("TriviaQA release", "qa/<domain>-<split>.json: {Data: [{Question, QuestionId, Answer: "
                        "{Value, Aliases}}], Split}", _trivia_release),)

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
    originals = (Format("TruthfulQA.csv release", "CSV with Type, Category, Question, Best Answer, Correct Answers, "
                        "Incorrect Answers (';'-separated), Source", _truthfulqa_csv),)

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
    originals = (Format("SQuAD v2.0 release", "dev-v2.0.json / train-v2.0.json: {version, data: [{title, "
                        "paragraphs: [{context, qas: [{id, question, answers, is_impossible}]}]}]}", _squad_release),)

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
    originals = (Format("HotpotQA release", "hotpot_dev_distractor_v1.json / hotpot_train_v1.1.json: a list of "
                        "{_id, question, answer, supporting_facts: [[title, sent_id]], context: [[title, "
                        "[sentences]]], type, level}", _hotpot_release),)

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
    originals = (Format("CoQA release", "coqa-dev-v1.0.json / coqa-train-v1.0.json: {version, data: [{id, source, "
                        "story, questions: [{input_text, turn_id}], answers: [{input_text, span_start, span_end, "
                        "turn_id}]}]}", _coqa_release),)

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
