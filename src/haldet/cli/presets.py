"""`haldet presets list|show`: the packaged paper presets (`haldet.presets`) and the config each one resolves to."""

from __future__ import annotations

from typing import Annotated

import typer
import yaml

from haldet.util.console import out_console, print_json, print_table

app = typer.Typer(help="The papers' settings as presets (`haldet run --preset NAME`); docs/replication.md lists "
                       "what each still differs in.")


@app.command("list")
def presets_list(as_json: Annotated[bool, typer.Option("--json", help="A JSON list of objects.")] = False) -> None:
    """Every packaged preset: its paper, suite, hash and what it is for."""
    from haldet.presets import load_preset, preset_names

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
    from haldet.flow.layers import load_config
    from haldet.presets import load_preset

    preset = load_preset(name, where="haldet presets show")
    head = [f"# preset {preset.name} (hash {preset.hash}, haldet/presets/{preset.path.name})",
            f"# paper: {preset.paper}" if preset.paper else "", f"# {preset.about}" if preset.about else "",
            "# what still differs from the paper and why: docs/replication.md"]
    if layer:
        return "\n".join(h for h in head if h) + "\n" + preset.text
    data = load_config(None, preset=name).canonical()
    data.pop("preset", None)  # an edited copy is the user's own config, not the packaged preset
    body = yaml.safe_dump(data, sort_keys=False, allow_unicode=True)
    if preset.hallulens_commands:
        commands = yaml.safe_dump({"hallulens_commands": preset.hallulens_commands}, sort_keys=False)
        head.append("# `haldet hallulens build|evaluate --preset " + name + "` defaults (not run settings):")
        head += [f"#   {line}" for line in commands.splitlines()]
    return "\n".join(h for h in head if h) + "\n" + body
