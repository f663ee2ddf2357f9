"""`haldet hallulens build|evaluate`: construct the shared test sets, then evaluate models on them (HalluLens's own
protocol, this folder's other modules). The suite's command group: the CLI finds it by this folder's name
(`haldet.suites.groups.command_groups`) and imports nothing else of the folder; the suite's modules are imported
when a command runs."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from haldet.config import DEFAULT_LLM_BACKEND, LLM_BACKEND_HELP, JudgeConfig, RunConfig, split_names
from haldet.errors import HaldetError
from haldet.presets import load_preset
from haldet.store import RunStore
from haldet.util.console import console, exit_on_failures, out_console, progress_bars

app = typer.Typer(help="HalluLens (PreciseWikiQA, LongWiki, NonExistentRefusal): build seeded shared test sets, "
                       "evaluate models with the HalluLens judges, Table 2-shaped rates. See docs/suites.md.")

AllowFailures = typer.Option("--allow-failures", help="Exit 0 even when some items could not be answered or "
                                                      "judged; what was done is kept either way.")
Backend = Annotated[str, typer.Option(help=LLM_BACKEND_HELP)]


def _llm_config(backend: str, model: str | None, base_url: str | None, retries: int, max_tokens: int) -> JudgeConfig:
    return JudgeConfig(backend=backend, model=model, base_url=base_url, retries=retries,  # type: ignore[arg-type]
                       max_tokens=max_tokens)


PresetOption = typer.Option("--preset", help="Take the defaults of a preset's `hallulens_commands` (`hallulens`: "
                                              "the paper's trials and set sizes); flags override them.")


def preset_defaults(ctx: typer.Context, preset: str | None, command: str) -> dict[str, Any]:
    """The preset's values for this command's options the user did not give (a given flag always wins); an
    option the command does not have is an error naming the preset file."""
    if not preset:
        return {}
    found = load_preset(preset).hallulens_commands.get(command, {})
    unknown = sorted(set(found) - set(ctx.params))
    if unknown:
        raise HaldetError(f"preset {preset!r} sets unknown option(s) {', '.join(unknown)} of `haldet hallulens "
                          f"{command}`", where=f"haldet/presets/{preset}.yaml",
                          hint=f"options: {', '.join(sorted(ctx.params))}")
    console.print(f"preset {preset} (hash {load_preset(preset).hash}): its `{command}` defaults under the flags",
                  highlight=False)
    return {k: v for k, v in found.items()
            if getattr(ctx.get_parameter_source(k), "name", "") != "COMMANDLINE"}  # the flag given wins


def preset_record(preset: str | None) -> dict[str, str] | None:
    """The preset's name, hash and file as the set's build.json / the results.json record it (None: no preset)."""
    if not preset:
        return None
    return load_preset(preset).record()


def parse_task_judges(values: list[str], tasks: dict[str, str]) -> dict[str, str]:
    """`TASK=MODEL` values (comma lists allowed) -> {task: model}; a malformed value or unknown task is one error."""
    out: dict[str, str] = {}
    for value in split_names(values):
        task_name, sep, model_name = value.partition("=")
        if not sep or not model_name.strip() or task_name.strip() not in tasks:
            raise HaldetError(f"--task-judge {value!r} is not TASK=MODEL with a known task", where="--task-judge",
                              hint=f"tasks: {', '.join(tasks)}; e.g. --task-judge longwiki=my-judge-model")
        out[task_name.strip()] = model_name.strip()
    return out


def _ints(text: str, n: int, flag: str, example: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",")]
    except ValueError:
        values = []
    if len(values) != n or min(values) < 0:
        raise HaldetError(f"{flag} {text!r} is not {n} comma-separated non-negative integers", where=flag,
                          hint=f"e.g. {flag} {example}")
    return values


@app.command()
def build(
    ctx: typer.Context,
    out: Annotated[Path, typer.Option(help="Folder of the built set (seed-<s>/<task>.jsonl + build.json).")],
    task: Annotated[list[str] | None, typer.Option(help="precisewikiqa, longwiki, nonexistent, proxy_qa (repeat or "
                                                   "comma list; default: the tasks whose sources are given).")] = None,
    pages: Annotated[Path | None, typer.Option(help="GoodWiki-style page file (title, document|markdown, "
                                               "h_score or decile).")] = None,
    taxonomy: Annotated[str | None, typer.Option(help="ITIS taxonomy: the release's pipe-delimited 'hierarchy' and "
                                             "'longnames' tables (their folder, the hierarchy file, or "
                                             "hierarchy,longnames), or a table file (name, family, "
                                             "domain|kingdom).")] = None,
    medicines: Annotated[Path | None, typer.Option(help="Medicine list (name).")] = None,
    places: Annotated[Path | None, typer.Option(help="GeneratedEntities places (place, and frequency or group "
                                                "low/middle/high) for the place-frequency analysis (Fig. 9).")
                      ] = None,
    generator_model: Annotated[list[str] | None, typer.Option(
        help="Question/name generator(s); several take turns for GeneratedEntities.")] = None,
    generator_backend: Backend = DEFAULT_LLM_BACKEND,
    generator_base_url: Annotated[str | None, typer.Option(help="OpenAI-compatible endpoint.")] = None,
    seed: Annotated[int, typer.Option(help="Seed of the first trial (trial t uses seed + t).")] = 42,
    trials: Annotated[int, typer.Option(help="Sets to build (the paper evaluates 3).")] = 3,
    qa_size: Annotated[int, typer.Option(help="PreciseWikiQA questions (balanced over 10 deciles).")] = 5000,
    long_size: Annotated[int, typer.Option(help="LongWiki prompts (balanced over deciles 5-9).")] = 250,
    qa_tokens: Annotated[str, typer.Option(help="PreciseWikiQA section length MIN,MAX (tokens).")] = "200,500",
    long_tokens: Annotated[str, typer.Option(help="LongWiki section length MIN,MAX (tokens).")] = "500,750",
    mixed_per_domain: Annotated[int, typer.Option(help="MixedEntities names per domain.")] = 2000,
    generated: Annotated[str, typer.Option(help="GeneratedEntities sizes business,event,product.")] = "300,300,50",
    prompts: Annotated[Path | None, typer.Option(help="YAML file overriding HalluLens prompt texts.")] = None,
    retries: Annotated[int, typer.Option(help="Extra attempts per failed or malformed call.")] = 4,
    preset: Annotated[str | None, PresetOption] = None,
    search_url: Annotated[str | None, typer.Option(help="Search endpoint checking that generated names do not "
                                                   "exist: URL with {query} (default: the source files only).")
                          ] = None,
    search_key_env: Annotated[str | None, typer.Option(help="Environment variable holding the search API key "
                                                       "(sent as X-API-Key).")] = None,
) -> None:
    """Build the test sets every tested model shares: seeded, cached (a rerun reuses every model reply)."""
    given = preset_defaults(ctx, preset, "build")
    trials, qa_size, long_size = (int(given.get("trials", trials)), int(given.get("qa_size", qa_size)),
                                  int(given.get("long_size", long_size)))
    qa_tokens, long_tokens = str(given.get("qa_tokens", qa_tokens)), str(given.get("long_tokens", long_tokens))
    mixed_per_domain = int(given.get("mixed_per_domain", mixed_per_domain))
    generated = str(given.get("generated", generated))
    from haldet.suites.hallulens.build import BuildConfig  # lazy: start-up
    from haldet.suites.hallulens.llm import StructuredLLM  # lazy: start-up
    from haldet.suites.hallulens.prompts import Prompts  # lazy: start-up
    from haldet.suites.hallulens.sets import build_sets  # lazy: start-up

    tasks = split_names(task) or [t for t, src in (("precisewikiqa", pages), ("longwiki", pages),
                                                   ("nonexistent", taxonomy)) if src] or ["proxy_qa"]
    sizes = _ints(generated, 3, "--generated", "300,300,50")
    qa_lo, qa_hi = _ints(qa_tokens, 2, "--qa-tokens", "200,500")
    long_lo, long_hi = _ints(long_tokens, 2, "--long-tokens", "500,750")
    cfg = BuildConfig(seed=seed, qa_size=qa_size, long_size=long_size, mixed_per_domain=mixed_per_domain,
                      qa_min_tokens=qa_lo, qa_max_tokens=qa_hi, long_min_tokens=long_lo, long_max_tokens=long_hi,
                      generated=dict(zip(("business", "event", "product"), sizes, strict=True)))
    if places:
        from haldet.suites.hallulens.sources import load_places  # lazy: start-up

        names, groups = load_places(places)
        cfg = cfg.model_copy(update={"places": names, "place_groups": groups})
    cache = out / "cache" / "llm.jsonl"
    generators = [StructuredLLM(_llm_config(generator_backend, m, generator_base_url, retries, 512), cache=cache,
                                option="--generator-model")
                  for m in split_names(generator_model)] if tasks != ["proxy_qa"] else []
    with RunStore(out).lock(), progress_bars() as make:  # one writer per folder: no LLM call made twice
        manifest = build_sets(out, tasks=tasks, cfg=cfg, trials=trials, generators=generators,
                              prompts=Prompts(prompts), pages=str(pages) if pages else None,
                              taxonomy=str(taxonomy) if taxonomy else None,
                              medicines=str(medicines) if medicines else None, progress=make,
                              search_url=search_url, search_key_env=search_key_env, preset=preset_record(preset))
    for name, rep in manifest["reports"].items():
        console.print(f"{name}: {rep['kept']} of {rep['wanted']} kept; dropped {rep['dropped'] or 'none'}; "
                      f"failed calls {len(rep['failures'])}" + (f"; {'; '.join(rep['notes'])}" if rep["notes"] else ""),
                      highlight=False)
    console.print(f"built set: {out}")
    empty = [name for name, rep in manifest["reports"].items() if rep["kept"] == 0 and name.split("/")[-1] in tasks]
    if empty:
        raise HaldetError(f"the build kept no item for {', '.join(empty)} (its report is above)", where=str(out),
                          hint="give more or longer source pages (or widen --qa-tokens/--long-tokens), a taxonomy "
                               "with more species, or a generator model that follows the prompts")


@app.command()
def evaluate(
    ctx: typer.Context,
    set_dir: Annotated[Path, typer.Option("--set", help="A folder written by `haldet hallulens build`.")],
    out: Annotated[Path, typer.Option(help="Output folder (answers, judgements, rates, detection sets).")],
    model: Annotated[list[str], typer.Option(help="Tested model(s): hf id/alias/path, or openai:<name>.")],
    model_base_url: Annotated[str | None, typer.Option(help="Endpoint for openai:<name> models.")] = None,
    device: Annotated[str | None, typer.Option(help="Where local tested models run: auto, cpu, cuda, cuda:1 ...")
                      ] = None,
    task: Annotated[list[str] | None, typer.Option(help="Tasks to evaluate (default: all in the set).")] = None,
    judge_model: Annotated[str | None, typer.Option(help="LLM judge (without one only rule judges decide; "
                                                   "the rest is listed as failed).")] = None,
    judge_backend: Backend = DEFAULT_LLM_BACKEND,
    judge_base_url: Annotated[str | None, typer.Option(help="OpenAI-compatible endpoint of the judge.")] = None,
    task_judge: Annotated[list[str] | None, typer.Option(
        help="TASK=MODEL: judge one task with its own model (same backend and endpoint as --judge-model; repeat "
             "per task). The paper: precisewikiqa and nonexistent Llama-3.1-70B-Instruct, longwiki "
             "Llama-3.1-405B-Instruct.")] = None,
    judges: Annotated[str, typer.Option(help="cascade: rule judges decide first (a refusal phrase, the gold answer "
                                             "stated, an empty reply, a claim quoted in a passage), the LLM the "
                                             "rest; llm: the LLM judge decides everything (the paper's protocol)."
                                        )] = "cascade",
    pages: Annotated[Path | None, typer.Option(help="Page file for LongWiki retrieval (default: the build's).")
                     ] = None,
    k: Annotated[int, typer.Option(help="K of Recall@K / F1@K.")] = 32,
    limit: Annotated[int | None, typer.Option(help="First N items of each set file (quick checks).")] = None,
    max_new_tokens: Annotated[int | None, typer.Option(help="Answer budget for every task (default per task: "
                                                       "128 QA, 1024 LongWiki, 256 NonExistentRefusal).")] = None,
    prompts: Annotated[Path | None, typer.Option(help="YAML file overriding HalluLens prompt texts.")] = None,
    retries: Annotated[int, typer.Option(help="Extra attempts per failed or malformed judge call.")] = 4,
    allow_failures: Annotated[bool, AllowFailures] = False,
    preset: Annotated[str | None, PresetOption] = None,
) -> None:
    """Answer every prompt of the set with each model, judge, and print the Table 2-shaped rates.

    Items whose answer or judgement failed after retries are listed (exit status 1 unless --allow-failures) and
    left out of the rates; a rerun retries exactly those."""
    from rich.table import Table

    from haldet.suites.hallulens.evaluate import MAX_NEW_TOKENS, TASK_TITLES, table_rows  # lazy: start-up
    from haldet.suites.hallulens.evaluate import evaluate as run_eval  # lazy: start-up
    from haldet.suites.hallulens.judges import JUDGE_MODES  # lazy: start-up
    from haldet.suites.hallulens.llm import StructuredLLM  # lazy: start-up
    from haldet.suites.hallulens.prompts import Prompts  # lazy: start-up
    from haldet.suites.hallulens.target import Target  # lazy: start-up

    given = preset_defaults(ctx, preset, "evaluate")
    k = int(given.get("k", k))
    judges = str(given.get("judges", judges))
    if judges not in JUDGE_MODES:
        raise HaldetError(f"unknown --judges {judges!r}", where="--judges", hint=f"one of {', '.join(JUDGE_MODES)}")
    if judges == "llm" and not judge_model and not task_judge:
        raise HaldetError("--judges llm needs an LLM judge", where="--judges",
                          hint="name one with --judge-model (and --task-judge TASK=MODEL), or use --judges cascade")
    if given.get("max_new_tokens") is not None:
        max_new_tokens = int(given["max_new_tokens"])
    judge = StructuredLLM(_llm_config(judge_backend, judge_model, judge_base_url, retries, 256),
                          cache=out / "judge_cache.jsonl") if judge_model else None
    task_judges = {t: StructuredLLM(_llm_config(judge_backend, m, judge_base_url, retries, 256),
                                    cache=out / "judge_cache.jsonl", option="--task-judge")
                   for t, m in parse_task_judges(task_judge or [], TASK_TITLES).items()}
    settings = RunConfig(**({"device": device} if device else {}))  # the backend settings of every tested model
    targets = [Target(m, config=settings, base_url=model_base_url) for m in split_names(model)]
    budgets = {t: max_new_tokens for t in MAX_NEW_TOKENS} if max_new_tokens else None
    with RunStore(out).lock(), progress_bars() as make:  # one writer per folder: no answer or judgement twice
        results = run_eval(set_dir, out, targets=targets, judge=judge, tasks=split_names(task) or None,
                           prompts=Prompts(prompts), pages=str(pages) if pages else None, k=k,
                           max_new_tokens=budgets, limit=limit, progress=make, preset=preset_record(preset),
                           task_judges=task_judges, judges_mode=judges)
    present = [t for t in TASK_TITLES if any(t in m for m in results["models"].values())]
    for task_name in present:  # one narrow table per task; table.md holds the one-row-per-model Table 2 shape
        header, rows = table_rows(results, [task_name])
        table = Table(title=f"HalluLens {TASK_TITLES[task_name]} (percent, mean ± sd over trials)")
        for h in header:
            table.add_column(h.split(" ", 1)[-1] if h != "model" else h)
        for r in rows:
            table.add_row(*r)
        out_console.print(table)
    if not judge_model and not task_judges:
        console.print("no --judge-model: only rule judges decided; undecided items are listed as failed")
    console.print(f"results: {out / 'results.json'}, {out / 'table.md'}, {out / 'report.html'}")
    failures = [f"{model_name} {task_name}: {failed} item(s) not judged (<model>/seed-*/{task_name}.failed.jsonl; "
                "a rerun retries them)"
                for model_name, per_task in results["models"].items() for task_name, res in per_task.items()
                if (failed := sum(t["failed"] for t in res["trials"].values()))]
    exit_on_failures(failures, allow_failures)
