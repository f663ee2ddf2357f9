"""Rows in the TRIVIA+ release schema (column names, types and label conventions of the release parquet), made
up for tests: 30 answers over 10 articles (short, medium and long), three generators, five sources, every split.

`rows()` is deterministic; `write(path)` writes them as parquet (the release format) or jsonl.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

TOPICS = [
    ("drop", "The Harlow Lighthouse", "lighthouse", "1887", "Captain Edda Marsh", "forty-two"),
    ("msmarco", "Brindle tea", "tea", "1923", "the Okoro family", "nine"),
    ("ms_marco", "The Vell river", "river", "1402", "the monks of Sarn", "three hundred"),
    ("nq", "Mount Caddon", "mountain", "1951", "Ilse Brandt", "two"),
    ("trivia", "The Pell Cup", "trophy", "1899", "the Kestrel club", "eleven"),
    ("covid", "Trial KX-7", "trial", "2020", "Dr. Amina Soto", "six hundred"),
    ("drop", "The Quarry Line railway", "railway", "1868", "the Lund company", "fourteen"),
    ("nq", "Saint Orla's fair", "fair", "1750", "the town council", "five"),
    ("msmarco", "The Tarn bridge", "bridge", "1932", "engineer Rui Vale", "seven"),
    ("covid", "The Ostra clinic", "clinic", "1988", "Dr. Lena Ruiz", "forty"),
]
LENGTHS = [600, 2_500, 9_000, 800, 3_000, 12_000, 1_200, 6_000, 700, 5_500]  # short, medium and long articles
FILLER = ("Local records describe the weather, the harvests and the markets of each year in some detail. "
          "Visitors often remark on the quiet streets and the old stone houses near the square. ")
MODELS = ["claude", "gemma", "mixtral_8x7b"]
SPLITS = ["train", "train", "train", "train", "valid", "valid", "test", "test", "train", "train"]


def _article(i: int, length: int) -> str:
    _, name, kind, year, person, count = TOPICS[i]
    facts = (f"{name} is a {kind} first recorded in {year}. It was founded by {person}. "
             f"Today it counts {count} members or parts, according to the latest survey. ")
    body = FILLER * (length // len(FILLER) + 1)
    cut = length // 2
    return (body[:cut] + "\n\n" + facts + "\n\n" + body[: max(0, length - cut - len(facts))]).strip()


def _answers(i: int) -> list[tuple[list[str], list[str]]]:
    """Three answers per article, (sentences, majority vote per sentence): faithful, contradicted, and faithful
    (even articles) or not mentioned (odd ones), so every split holds both labels."""
    _, name, kind, year, person, count = TOPICS[i]
    third = (([f"It is a {kind}.", f"It counts {count} members or parts."], ["supports", "supports"]) if i % 2 == 0
             else ([f"It is a {kind}.", f"It is the oldest {kind} in the country."], ["supports", "not-mentioned"]))
    return [
        ([f"{name} was first recorded in {year}.", f"It was founded by {person}."], ["supports", "supports"]),
        ([f"{name} was first recorded in {int(year) + 13}.", "Happy to help further!"],
         ["contradicts", "supplementary"]),
        third,
    ]


def rows(lengths: list[int] = LENGTHS, splits: list[str] = SPLITS) -> list[dict[str, Any]]:
    """The rows; `lengths` and `splits` (one per article of TOPICS) change the articles' lengths in characters and
    their split (a test that needs other strata or a cheaper run)."""
    rng = random.Random(15)
    out = []
    for i in range(len(TOPICS)):
        source, name = TOPICS[i][0], TOPICS[i][1]
        article = _article(i, lengths[i])
        for j, (sentences, votes) in enumerate(_answers(i)):
            clean = int(any(v in ("contradicts", "not-mentioned") for v in votes))
            three = 1 if "contradicts" in votes else (-1 if "not-mentioned" in votes else 0)
            workers = [f"W{rng.randint(1, 9)}" for _ in range(3)]
            noisy = {name: clean if rng.random() > rate else 1 - clean
                     for name, rate in (("ws_llm_aaj", 0.25), ("15pct_noise_dissenting_label", 0.15),
                                        ("15pct_noise_dissenting_workers", 0.15),
                                        ("15pct_noise_random_flipping", 0.15))}
            out.append({
                "source": source, "split": splits[i],
                "model": MODELS[j], "article": article, "question": f"What do we know about {name}?",
                "answer": " ".join(sentences), "workerId": workers,
                "response-level-labels-bin": [str(clean)] * 3,
                "response-level-word-labels": ["contradicts" if three == 1 else "not-mentioned" if three == -1
                                               else "supports"] * 3,
                "sentence-level-word-labels": [list(votes) for _ in workers],
                "answer_sentence_list": sentences, "sentence_level_majority_vote": votes,
                "response_level_label_binary": clean, "response_level_label": three,
                **{f"response_level_label_binary_{k}": v for k, v in noisy.items()},
            })
    return out


def gold_answers() -> list[dict[str, Any]]:
    """Ground-truth answers in the shape of a user's gold-answers file (question, answer, optional source) for the
    two test articles, the questions written differently from the release's (case, punctuation, spacing) as the
    source datasets write them; a second railway answer belongs to another source. Their ROUGE-L bins
    (hand-checked): railway answers 0, 0, 0.18; fair answers 0.056, 0, 0.19, so [0, 0.01) holds labels 0, 1, 1,
    [0.01, 0.1) one 0 and [0.1, 1] a 0 and a 1."""
    return [
        {"question": "what do we know about the QUARRY LINE railway", "answer": "fourteen", "source": "drop"},
        {"question": "What do we know about the Quarry Line railway?", "answer": "seven", "source": "trivia"},
        {"question": "What do we know about  Saint Orla's fair ?",
         "answer": ["A summer market held on the green beside the old chapel with music stalls and games for the "
                    "village children"]},
    ]


def write(path: Path, data: list[dict[str, Any]] | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = rows() if data is None else data
    if path.suffix == ".parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(data), path)
    else:
        path.write_text("".join(json.dumps(r) + "\n" for r in data))
    return path


if __name__ == "__main__":  # regenerate the committed fixture
    write(Path(__file__).parent / "fixtures" / "datasets" / "triviaplus" / "triviaplus_fixture.parquet")
