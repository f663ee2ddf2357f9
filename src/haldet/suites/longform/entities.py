"""Biographies your model writes, from an entity list: FActScore's generation procedure on any model.

FActScore (Min et al., 2023) asks each model "Tell me a bio of <entity>." for every name of an entity file
(`data/{labeled,unlabeled}/prompt_entities.txt` of the release: one name per line) and scores the atomic facts of
the biography it writes. The registered adapter `bio_entities` reads such a file (a `.txt` file, one entity per
line; or rows with a `topic` or `entity` field) into items whose question is that prompt and which carry no answer:
the run's model (`--model`) writes the biography (the generate stage), the claims stage splits it
(`suite_params.longform.claims: extract`) and a labeller labels the claims (`labels: verify` or `nli`), against the
entity's page of a knowledge source in FActScore's format (`dataset_params.bio_entities.knowledge`; the page titled
as the entity becomes the item's reference, never shown to the model).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, ClassVar

from haldet.datasets.adapter import DatasetAdapter, Source
from haldet.datasets.base import register
from haldet.datasets.formats import with_line
from haldet.datasets.rows import BadRow
from haldet.errors import HaldetError
from haldet.schema import Instance
from haldet.suites.longform.dataset import read_knowledge

PROMPT = "Tell me a bio of {entity}."


def entity_rows(path: Path) -> list[dict[str, Any]]:
    """An entity list: a `.txt` file read line by line (a name may hold commas; blank lines skipped), each row
    keeping its file line."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise HaldetError(f"cannot read the entity list: {exc}", where=str(path),
                          hint="a UTF-8 text file with one entity name per line") from None
    return [with_line({}, n, topic=line.strip()) for n, line in enumerate(lines, 1) if line.strip()]


@register("bio_entities")
class BioEntities(DatasetAdapter):
    scenario = "longform"
    task_type = "long_form"
    source = "an entity list (FActScore's prompt_entities.txt, or your own): the run's model writes each biography"
    license = "as the entity list's"
    split_order = ("test",)
    file_split = "test"
    local_names = ("bio_entities", "prompt_entities", "entities")
    required_fields = ("topic",)
    # a knowledge source in FActScore's format (JSON lines of {title, text}): the entity's page is its reference
    params: ClassVar[dict[str, Any]] = {"knowledge": None}
    _pages: dict[str, str] | None = None

    def hub_rows(self) -> Source:
        raise HaldetError("an entity list is a file of your own", where="dataset bio_entities",
                          hint="put a .txt file with one entity per line (FActScore's prompt_entities.txt) under "
                               "DIR/bio_entities/ and pass --data-dir DIR, or pass --data-file PATH")

    def local_rows(self) -> Source:
        """`.txt` entity lists (FActScore's format) read line by line; other files as any dataset's."""
        lists = [p for p in (self.local_paths() if self.data_dir is not None else []) if p.suffix.lower() == ".txt"]
        if not lists:
            return super().local_rows()
        rows = []
        for path in lists:
            rows += [{**row, "_file": path.name} if len(lists) > 1 else row for row in entity_rows(path)]
        return Source(", ".join(str(p) for p in lists), "test", rows)

    def row_to_instance(self, row: dict[str, Any], index: int, split: str) -> Instance:
        entity = str(row.get("topic") or row.get("entity") or "").strip()
        if not entity:
            raise BadRow("topic", "an entity name is required")
        if self._pages is None:
            spec = self.options["knowledge"]
            self._pages = read_knowledge(spec, "dataset_params.bio_entities.knowledge") if spec else {}
        page = self._pages.get(entity, "")
        native = re.sub(r"[^0-9A-Za-z]+", "_", entity).strip("_") or str(index)
        return self.instance(split, native, question=PROMPT.format(entity=entity),
                             references=[page] if page else [], meta={"topic": entity})
