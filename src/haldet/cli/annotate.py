"""`haldet annotate`: label (or relabel) a run's answers with the chosen judges (`haldet.commands.annotate`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from haldet.cli.options import AllowFailures, JudgeBackendHelp, RunDirArg
from haldet.cli.outcome import annotate_problems
from haldet.config import split_names
from haldet.util.console import exit_on_failures, out_console, print_json, progress_bars

JudgeKind = typer.Option(help="rule | exec | llm | cascade (default: the run's; cascade = rule and execution "
                                "judges where they apply, the LLM judge for the rest when --judge-model is set).")


def annotate(
    run_dir: RunDirArg,
    judge: Annotated[str | None, JudgeKind] = None,
    judge_model: Annotated[str | None, typer.Option(help="LLM judge model: endpoint model name (e.g. gpt-4o-mini) "
                                                   "or, with --judge-backend hf, an hf id/alias/path.")] = None,
    judge_base_url: Annotated[str | None, typer.Option(help="OpenAI-compatible endpoint, e.g. "
                                                       "http://localhost:8000/v1 (key from $OPENAI_API_KEY).")] = None,
    judge_backend: Annotated[str | None, typer.Option(help=JudgeBackendHelp)] = None,
    judge_concurrency: Annotated[int | None, typer.Option(help="LLM requests in flight.")] = None,
    judge_retries: Annotated[int | None, typer.Option(help="Retries per item (429/5xx/timeout/malformed).")] = None,
    judge_timeout: Annotated[float | None, typer.Option(help="Seconds per LLM request.")] = None,
    judge_max_tokens: Annotated[int | None, typer.Option(help="Judge reply token budget.")] = None,
    judge_template_dir: Annotated[Path | None, typer.Option(help="Folder overriding judge_*.txt / "
                                                           "judge_examples.json.")] = None,
    compare_with: Annotated[str | None, typer.Option(help="Also label with this judge kind and report Cohen's "
                                                     "kappa and the confusion table.")] = None,
    dataset: Annotated[list[str] | None, typer.Option("--dataset", "-d", help="Only these datasets of the run.")]
    = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the per-cell reports as JSON.")] = False,
    allow_failures: Annotated[bool, AllowFailures] = False,
) -> None:
    """Label (or relabel) the answers of an existing run: correct / hallucination / abstention / invalid.

    Resumable: labels are appended as they come; items that failed after all retries are listed in
    annotate.failed.jsonl and a rerun retries only those. The label distribution per dataset and judge goes to
    the manifest. See docs/judges.md.
    """
    from haldet.commands.annotate import annotate_run, render_reports  # lazy: sklearn, scipy

    overrides = {"kind": judge, "model": judge_model, "base_url": judge_base_url, "backend": judge_backend,
                 "concurrency": judge_concurrency, "retries": judge_retries, "timeout": judge_timeout,
                 "max_tokens": judge_max_tokens, "template_dir": str(judge_template_dir) if judge_template_dir
                 else None}
    with progress_bars() as make:
        reports = annotate_run(run_dir, overrides, compare_with=compare_with, datasets=split_names(dataset),
                               progress=make)

    if as_json:
        print_json(reports, default=str)
    else:
        for renderable in render_reports(reports):
            out_console.print(renderable)
    exit_on_failures(annotate_problems(reports), allow_failures)

