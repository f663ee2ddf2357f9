"""`haldet presets list|show`: the packaged paper presets (`haldet.presets`) and the config each one resolves to."""

from __future__ import annotations

from typing import Annotated

import typer
import yaml

from haldet.config import RunConfig
from haldet.presets import load_preset, preset_names
from haldet.util.console import out_console, print_json, print_table

app = typer.Typer(help="The papers' settings as presets (`haldet run --preset NAME`); docs/replication.md lists "
                       "what each still differs in.")


@app.command("list")
def presets_list(as_json: Annotated[bool, typer.Option("--json", help="A JSON list of objects.")] = False) -> None:
    """Every packaged preset: its paper, suite, hash and what it is for."""
    infos = [{"name": p.name, "suite": p.settings.get("suite") or "", "paper": p.paper, "hash": p.hash,
              "about": p.about} for p in map(load_preset, preset_names())]
    if as_json:
        print_json(infos)
        return
    print_table(f"presets ({len(infos)}); run one with `haldet run --preset NAME`, see it with `haldet presets show "
                "NAME`", ("name", "suite", "paper", "hash", "about"),
                ([i["name"], i["suite"], i["paper"], i["hash"], i["about"]] for i in infos), no_wrap={"name"})


@app.command("show")
def presets_show(
    name: Annotated[str, typer.Argument(help="A preset (see `haldet presets list`).")],
    layer: Annotated[bool, typer.Option("--layer", help="Print the preset file as shipped (only what it sets), "
                                                         "not the whole resolved config.")] = False,
) -> None:
    """The whole config the preset resolves to (suite settings, the preset over them, defaults for the rest) as
    YAML: save it, edit it and pass it with --config."""
    out_console.print(resolved_yaml(name, layer=layer), markup=False, highlight=False, soft_wrap=True)


def resolved_yaml(name: str, *, layer: bool = False) -> str:
    """The text `presets show` prints: a commented header, then the YAML (loading it with --config gives the same
    settings as --preset NAME)."""
    from haldet.flow.layers import load_config  # lazy: sklearn, scipy

    preset = load_preset(name, where="haldet presets show")
    head = [f"# preset {preset.name} (hash {preset.hash}, haldet/presets/{preset.path.name})",
            f"# paper: {preset.paper}" if preset.paper else "", f"# {preset.about}" if preset.about else "",
            "# what still differs from the paper and why: docs/replication.md"]
    if layer:
        return "\n".join(h for h in head if h) + "\n" + preset.text
    config = load_config(None, preset=name)
    head += dataset_lines(config)
    data = config.canonical()
    data.pop("preset", None)  # an edited copy is the user's own config, not the packaged preset
    body = yaml.safe_dump(data, sort_keys=False, allow_unicode=True)
    if preset.hallulens_commands:
        commands = yaml.safe_dump({"hallulens_commands": preset.hallulens_commands}, sort_keys=False)
        head.append("# `haldet hallulens build|evaluate --preset " + name + "` defaults (not run settings):")
        head += [f"#   {line}" for line in commands.splitlines()]
    return "\n".join(h for h in head if h) + "\n" + body


def dataset_sizes(config: RunConfig) -> list[tuple[str, str, int]]:
    """(dataset, items: a number or "whole split", the answers' token limit) for each dataset the config runs."""
    from haldet.datasets.base import DATASETS  # lazy: start-up
    from haldet.util.limits import FALLBACK_MAX_NEW_TOKENS, TASK_MAX_NEW_TOKENS  # lazy: start-up

    gen, out = config.generation, []
    for name in config.datasets:
        limit = config.limit_for(name)
        task = str(getattr(DATASETS.get(name, where="datasets"), "task_type", ""))
        tokens = (gen.max_new_tokens if gen.max_new_tokens is not None else gen.max_new_tokens_by_dataset.get(
            name, {**TASK_MAX_NEW_TOKENS, **gen.max_new_tokens_by_task}.get(task, FALLBACK_MAX_NEW_TOKENS)))
        out.append((name, "whole split" if limit is None else f"{limit:,}", tokens))
    return out


def dataset_lines(config: RunConfig) -> list[str]:
    """The header lines of `presets show` naming each dataset with its size and generation length."""
    sizes = dataset_sizes(config)
    width = max(len(n) for n, _, _ in sizes)
    return ([f"# datasets ({len(sizes)}): items per dataset (limit / limit_by_dataset), max new tokens per answer"]
            + [f"#   {n:<{width}}  {items:>11}  {tokens} tokens" for n, items, tokens in sizes])


@app.command("plan")
def presets_plan(
    name: Annotated[str, typer.Argument(help="A preset (see `haldet presets list`).")],
    model: Annotated[str, typer.Option("--model", "-m", help="The model under test (its size is read from the "
                                                             "name; nothing is loaded).")],
    judge_model: Annotated[str | None, typer.Option(help="The judge model (default: the preset's).")] = None,
    limit: Annotated[int | None, typer.Option(help="Cap every dataset at this many items.")] = None,
    params: Annotated[float | None, typer.Option(help="Parameters of the model, e.g. 8e9, when its name does not "
                                                      "say.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="The plan as JSON.")] = False,
) -> None:
    """What `haldet run --preset NAME --model M` will run, before any work: datasets and items, detectors and the
    stages they need, the calls and tokens each endpoint gets, and the estimated GPU-hours and disk (with the
    assumptions of the estimate). Loads no model and no data."""
    from dataclasses import asdict

    from haldet.flow.layers import load_config  # lazy: sklearn, scipy
    from haldet.papers.plan import Assumptions, build_plan, plan_lines  # lazy: start-up

    config = load_config(None, preset=name, models=[model], judge__model=judge_model, limit=limit)
    stages, verdicts = detector_stages(config)
    plan = build_plan(name, config, model, stages, verdict_detectors=verdicts, given_answers=bool(config.suite),
                      assumptions=Assumptions(params=params))
    if as_json:
        print_json(asdict(plan))
        return
    out_console.print("\n".join(plan_lines(plan)), markup=False, highlight=False, soft_wrap=True)


def detector_stages(config: RunConfig) -> tuple[dict[str, list[str]], list[str]]:
    """Each detector's stages (as the run plans them, from what the detector reads) and the detectors that ask the
    verdict model."""
    from haldet.flow.scoring import make_detector  # lazy: sklearn, scipy
    from haldet.stages.plan import plan  # lazy: h5py

    stages: dict[str, list[str]] = {}
    for det in config.detectors:
        stages[det] = [stage.name for stage in plan(make_detector(det, config).signals())]
    return stages, [d for d, s in stages.items() if "verdict" in s]
