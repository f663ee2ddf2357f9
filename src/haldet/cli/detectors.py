"""`haldet detectors list|show|idf`: every registered detector (built-in and from plugin packages), one detector with
the file and line that define it, and Focus's IDF table built from a corpus."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from haldet.errors import HaldetError
from haldet.util.console import console, origin_column, print_json, print_table, progress_bars

NOT_DECLARED = "(method family not declared)"  # a plugin detector without `method_family`

app = typer.Typer(help="List registered detectors, or show one and where it is defined.")


def needs(cls: Any) -> list[str]:
    """What a detector's default instance needs beside the run's model: its auxiliary models (kind and default;
    none where the default variant sets the model parameter to None, as the Jaccard graph variants do) and verdict
    prompt."""
    default = cls()
    params = default.params
    models = [f"{kind} ({param}={params.get(param, '')})" if params.get(param) else kind
              for param, kind in getattr(cls, "auxiliary", {}).items() if not (param in params and not params[param])]
    ask = getattr(cls, "ask", None)
    if isinstance(ask, property):  # built from the parameters (the LLM judges): the default instance's
        ask = default.ask
    return models + ([f"verdict prompt {ask.name}"] if ask is not None and hasattr(ask, "name") else [])


def describe(name: str, cls: Any, origin: str) -> dict[str, Any]:
    """What `detectors list` shows of one detector (also the head of `detectors show`)."""
    return {"name": name, "method_family": getattr(cls, "method_family", "") or NOT_DECLARED,
            "family": str(cls.family()), "requires": sorted(s.value for s in cls.requires),
            "levels": list(getattr(cls, "levels", ("response",))), "needs": needs(cls),
            "trains": cls.trains, "variants": sorted(cls.variants), "defaults": cls.defaults,
            "version": cls.version, "paper": getattr(cls, "paper", ""), "peers": list(getattr(cls, "peers", ())),
            "origin": origin}


@app.command("list")
def detectors_list(as_json: Annotated[bool, typer.Option("--json", help="A JSON list of objects.")] = False) -> None:
    """Every registered detector, grouped by method family: the paper it comes from, access family (black, gray,
    white box), required signals, the levels it scores, the models it needs beside the run's (auxiliary models,
    verdict prompts), whether it trains, named variants."""
    from haldet.detectors.base import DETECTORS  # lazy: start-up

    infos = [describe(name, cls, DETECTORS.origin(name)) for name, cls in DETECTORS]
    if as_json:
        print_json(infos, default=str)
        return
    cols = ("name", "paper", "family", "requires", "levels", "needs", "trains", "variants", *origin_column(infos))
    for group in sorted({info["method_family"] for info in infos}, key=lambda g: (g == NOT_DECLARED, g)):
        rows = ([", ".join(v) if isinstance(v := info[c], list) else str(v) for c in cols]
                for info in infos if info["method_family"] == group)
        # a name must stay copyable, never cut with an ellipsis
        print_table(f"detectors: {group}", cols, rows, no_wrap={"name"})


@app.command("show")
def detectors_show(
    name: Annotated[str, typer.Argument(help="Detector name (see `haldet detectors list`).")],
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object.")] = False,
) -> None:
    """One detector: where it is defined (file:line of its class), then what `detectors list` shows of it, its
    defaults and version."""
    from haldet.detectors.base import DETECTORS  # lazy: start-up

    cls = DETECTORS.get(name, where="detector name")
    info = describe(name, cls, DETECTORS.origin(name))
    found = DETECTORS.where(name)
    if as_json:
        print_json({**info, "file": None if found is None else str(found.file),
                    "line": None if found is None else found.line}, default=str)
        return
    shown = {"defined": str(found) if found is not None else "(no Python source)", **info}
    rows = ([key, ", ".join(v) if isinstance(v := value, list) else str(v)] for key, value in shown.items())
    print_table(f"detector {name}", ("field", "value"), rows, no_wrap={"value"})


@app.command("idf")
def detectors_idf(
    corpus: Annotated[list[str], typer.Argument(help="hf:DATASET_ID (streamed from the Hugging Face hub), or local "
                                                     ".txt (one document per line) / .jsonl files.")],
    tokenizer: Annotated[str, typer.Option(help="The scored model (alias, hub id or local path): its tokenizer's "
                                                "ids are counted.")],
    out: Annotated[Path, typer.Option(help="The table file to write (.npz).")],
    documents: Annotated[int | None, typer.Option(help="Count at most this many documents (the HalluEntity paper: "
                                                       "1000000 of RedPajama).")] = None,
    text_field: Annotated[str, typer.Option(help="The documents' field in .jsonl lines and hub rows.")] = "text",
    split: Annotated[str, typer.Option(help="The hub dataset's split.")] = "train",
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace an existing table file.")] = False,
) -> None:
    """Build Focus's IDF table from any corpus: the document frequency of each token id over the corpus, streamed
    with a progress bar, written with what made it (corpus id or file hashes, tokenizer, documents counted). Score
    with it: `detector_params: {focus: {idf_table: FILE}}` (its record joins the detector's identity)."""
    from haldet.models.idf_corpus import CorpusSource, build_table  # lazy: h5py

    if out.exists() and not overwrite:
        raise HaldetError(f"{out} exists", where="--out", hint="choose another file, or pass --overwrite")
    source = CorpusSource.parse(corpus, split=split, text_field=text_field, limit=documents, where="CORPUS")
    with progress_bars() as make:
        table = build_table(source, tokenizer, out, make)
    console.print(f"IDF table {out}: {table.documents} documents of {table.meta['corpus']}, tokenizer {tokenizer}, "
                  f"{int((table.df > 0).sum())} of {len(table.df)} token ids seen", highlight=False)
