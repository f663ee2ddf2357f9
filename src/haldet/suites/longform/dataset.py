"""FActScore biographies (Min et al., 2023): given responses with human-labelled atomic facts, as claim units.

The release's `data/labeled/{InstructGPT,ChatGPT,PerplexityAI}.jsonl` hold one biography per line: `input`
("Question: Tell me a bio of <topic>."), `output` (the model's biography), `topic`, `cat` ([rarity, region]) and
`annotations` (null when the model abstained): per sentence of the output {text, is-relevant, human-atomic-facts:
[{text, label}] or null, model-atomic-facts}. Labels: S (supported by Wikipedia) = correct, NS (not supported) =
hallucination, IR (irrelevant) = unlabelled (kept as a unit, left out of the metrics, as FActScore leaves it out
of the score). Each unit records the raw label and its source in `meta.labels` ({data: S|NS|IR, source: data}: hidden
from detectors, as every label is).

The atomic facts are rewrites, not quotes, so each is located inside its own sentence (the sentence found in the
output in order, then `haldet.text.claim_spans.map_claim` within it); a fact whose words are not found there takes
its sentence's span (`meta.span = "sentence"`: the sentence it was written from). A sentence not found in the
output leaves its facts out, listed in the instance's `meta.unaligned` (their labels in `meta.labels.unaligned`).
The file name names the model that wrote the responses (`meta.source_model`; the files of one folder are read
together). An abstention has no claim and
is filtered out (counted in the load report). With `dataset_params.factscore_bio.knowledge` (a knowledge source
in FActScore's JSON-lines {title, text} format) the topic's page is the item's reference (`references`, never in
the prompt): the text NLI claim labels read (`suite_params.longform.labels: nli`).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, ClassVar

from haldet.datasets.adapter import DatasetAdapter, Source
from haldet.datasets.base import register
from haldet.datasets.formats import Format, RawFile, records, with_line
from haldet.datasets.rows import BadRow, SkipRow, require
from haldet.errors import HaldetError
from haldet.schema import LABEL_META, Category, Instance, SpanLabel
from haldet.text.claim_spans import map_claim
from haldet.text.units import align_sequential

LABELS = {"S": Category.CORRECT, "NS": Category.HALLUCINATION, "IR": Category.INVALID}
RELEASE = ("data/labeled/<model>.jsonl: {input, output, topic, cat, annotations: [{text, is-relevant, "
           "human-atomic-facts: [{text, label S|NS|IR}]}] | null}")


def _release(raw: RawFile) -> list[tuple[str | None, list[dict[str, Any]]]] | None:
    """The release's labelled JSON lines; the file's stem names the model that wrote the responses."""
    recs = records(raw)
    if not recs or not all({"output", "topic"} <= set(r) and "annotations" in r for r, _ in recs):
        return None
    return [("test", [with_line(r, line, **r, source_model=raw.path.stem) for r, line in recs])]


def read_knowledge(spec: str, where: str) -> dict[str, str]:
    """Pages of a knowledge source in FActScore's format: JSON lines of {title, text} (text a string or a list of
    sections, joined by blank lines), title -> text."""
    path = Path(spec).expanduser()
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise HaldetError(f"cannot read the knowledge source: {exc.strerror}", where=where,
                          hint="a JSON lines file of {title, text} (FActScore's knowledge-source format)") from None
    pages: dict[str, str] = {}
    for n, line in enumerate(lines, 1):
        if line.strip():
            try:
                rec = json.loads(line)
                text = rec["text"]
                pages[str(rec["title"])] = "\n\n".join(text) if isinstance(text, list) else str(text)
            except (json.JSONDecodeError, KeyError, TypeError):
                raise HaldetError(f"line {n} of the knowledge source is not a {{title, text}} record",
                                  where=str(path), hint="FActScore's format: one JSON object per line "
                                  "with title and text (a string or a list of sections)") from None
    return pages


@register("factscore_bio")
class FActScoreBio(DatasetAdapter):
    scenario = "longform"
    task_type = "long_form"
    source = "shmsw25/FActScore data/labeled (InstructGPT, ChatGPT, PerplexityAI biographies, human atomic facts)"
    license = "MIT (code); data as released by the authors"
    split_order = ("test",)
    file_split = "test"
    local_names = ("factscore_bio", "FActScore")
    required_fields = ("output", "topic", "annotations", "source_model")
    originals = (Format("FActScore labelled release", RELEASE, _release),)
    # a knowledge source in FActScore's own format (JSON lines of {title, text}, text a string or a list of
    # sections): the page titled as the item's topic becomes its reference, the text NLI labels read
    params: ClassVar[dict[str, Any]] = {"knowledge": None}
    _pages: dict[str, str] | None = None

    def hub_rows(self) -> Source:
        raise HaldetError("FActScore's labelled biographies are not on a hub haldet downloads from (the authors "
                          "release them as files)", where="dataset factscore_bio",
                          hint="download the release's data/labeled/*.jsonl (the FActScore repository's data link) "
                               "and pass --data-dir DIR (files in DIR/factscore_bio/) or --data-file PATH")

    def page(self, topic: str) -> str:
        """The knowledge source's text titled `topic` ("" without a knowledge source or such a page)."""
        if self.options["knowledge"] is None:
            return ""
        if self._pages is None:
            self._pages = read_knowledge(self.options["knowledge"], f"dataset_params.{self.name}.knowledge")
        return self._pages.get(topic, "")

    def row_to_instance(self, row: dict[str, Any], index: int, split: str) -> Instance:
        topic = str(require(row, "topic")).strip()
        output = str(row.get("output") or "")
        annotations = row.get("annotations")
        if annotations is None or not output.strip():
            raise SkipRow("the model abstained (no annotations)")
        if not isinstance(annotations, list) or not all(isinstance(a, dict) for a in annotations):
            raise BadRow("annotations", "must be a list of per-sentence records or null")
        source_model = str(row.get("source_model") or row.get("_file") or "unknown").removesuffix(".jsonl")
        sentences = [str(a.get("text") or "") for a in annotations]
        units: list[SpanLabel] = []
        unaligned: list[dict[str, Any]] = []
        n_sentence_spans = 0
        for k, (ann, span) in enumerate(zip(annotations, align_sequential(output, sentences), strict=True)):
            facts = ann.get("human-atomic-facts") or []
            if not isinstance(facts, list):
                raise BadRow(f"annotations[{k}].human-atomic-facts", "must be a list of {text, label} or null")
            for f, fact in enumerate(facts):
                text, label = str(fact.get("text") or "").strip(), str(fact.get("label") or "").strip()
                if label not in LABELS:
                    raise BadRow(f"annotations[{k}].human-atomic-facts[{f}].label",
                                 f"must be one of {', '.join(LABELS)}, got {label!r}")
                if span is None:
                    unaligned.append({"sentence": k, "fact": text, "label": label})
                    continue
                found = map_claim(output, text, span[0], span[1])
                start, end = found if found is not None else span
                n_sentence_spans += found is None
                units.append(SpanLabel(start=start, end=end, text=output[start:end], kind="claim",
                                       category=LABELS[label],
                                       meta={"claim": text, "sentence": k, "span": "claim" if found else "sentence",
                                             LABEL_META: {"data": label, "source": "data"}}))
        labelled = [u.meta[LABEL_META]["data"] for u in units if u.meta[LABEL_META]["data"] != "IR"]
        unsupported = labelled.count("NS") / len(labelled) if labelled else None
        native = f"{source_model}-{re.sub(r'[^0-9A-Za-z]+', '_', topic).strip('_')}"
        return self.instance(split, native, question=str(row.get("input") or f"Tell me a bio of {topic}."),
                             response=output, units=units, references=[p for p in [self.page(topic)] if p],
                             meta={"topic": topic, "source_model": source_model, "cat": row.get("cat"),
                                   "n_facts": len(units) + len(unaligned), "sentence_spans": n_sentence_spans,
                                   "unaligned": [{k: v for k, v in f.items() if k != "label"} for f in unaligned],
                                   LABEL_META: {"unsupported_share": unsupported, "unaligned": unaligned}})
