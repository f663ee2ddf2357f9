"""Every code block of README.md and docs/ is checked, so a documented example that stops working fails `make test`.

Every line of any block that calls `haldet` (bash, or a plain synopsis block) must name a command that exists and only
options that command declares (options in `[...]` of a synopsis too), checked against the CLI itself. Beyond that,
each code block says by a marker on the line just before its fence how it is checked:
- `<!-- docs-test: run -->`: its `haldet` lines are executed, in a scratch directory holding stored runs at
  `runs/a`, `runs/b`, `runs/matrix`, `runs/llama` and `runs/qwen` (synthetic, known contents, detectors perplexity
  and saplma), and must exit 0;
- `<!-- docs-test: config -->`: a YAML block, loaded as a run config (every key must be a known setting);
- `<!-- docs-test: covered by tests/<file>.py ... -->`: another test runs it (the file must exist);
- `<!-- docs-test: not run: REASON -->`: not executed, for a reason of a listed kind (a GPU, an API key or endpoint, a
  download, a long run of the embedded model, a placeholder a reader fills in, a sketch that is no code alone).
A code block (python, bash, yaml, toml) with no marker fails: it must say how it is checked. A plain block (a
synopsis, a layout) has its `haldet` lines checked.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from typer.main import get_command
from typer.testing import CliRunner

from haldet.cli import app
from repo_paths import REPO

ROOT = REPO
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
MARKER = re.compile(r"<!-- docs-test: (run|config|covered by (tests/\S+\.py)[^>]*|not run: (.+)) -->")
REASONS = ("a GPU", "an API key", "an endpoint", "a download", "a long run", "placeholders", "no code")
CODE = {"python", "bash", "yaml", "toml", "sh"}


@dataclass
class Block:
    where: str
    lang: str
    lines: list[str]
    marker: str | None  # "run", "config", "covered by tests/...", "not run: ..." or None
    reason: str = ""    # the reason of "not run", or the covering test file


def blocks() -> list[Block]:
    out = []
    for doc in DOCS:
        text = doc.read_text().split("\n")
        i = 0
        while i < len(text):
            fence = re.match(r"^```(\w*)\s*$", text[i])
            if not fence:
                i += 1
                continue
            end = next(j for j in range(i + 1, len(text)) if text[j].startswith("```"))
            mark = MARKER.search(text[i - 1]) if i else None
            kind = None if not mark else mark.group(1).split(":")[0].split(" tests/")[0]
            out.append(Block(f"{doc.relative_to(ROOT)}:{i + 1}", fence.group(1), text[i + 1:end], kind,
                             (mark.group(2) or mark.group(3) or "") if mark else ""))
            i = end + 1
    return out


def haldet_lines(block: Block) -> list[str]:
    """The block's `haldet ...` commands: comments cut, continuation lines joined, `a / haldet b` split."""
    joined, out = "", []
    for raw in block.lines:
        line = raw.split("  #")[0].split(" # ")[0].rstrip()
        joined += line[:-1] + " " if line.endswith("\\") else line
        if line.endswith("\\"):
            continue
        for part in re.split(r"\s/\s(?=haldet )", joined.strip()):
            if part.startswith("haldet "):
                out.append(part)
        joined = ""
    return out


def command_of(words: list[str]) -> tuple[Any, list[str]]:
    """The (typer) click command a `haldet` line names and the words after its name."""
    command: Any = get_command(app)
    rest = words[1:]
    while hasattr(command, "commands") and rest and rest[0] in command.commands:
        command, rest = command.commands[rest[0]], rest[1:]
    return command, rest


def unknown_options(line: str) -> list[str]:
    words = shlex.split(re.sub(r"[\[\]|]", " ", line).replace("...", " "))
    command, rest = command_of(words)
    if hasattr(command, "commands") and not all(w.startswith("-") for w in rest):  # a group takes options only
        return [f"no command {' '.join(words[:3])!r}"]
    declared = {"--help"} | {opt for p in command.params for opt in [*p.opts, *p.secondary_opts]}
    flags = {w.split("=")[0] for w in rest if w.startswith("-") and not re.fullmatch(r"-?\d+(\.\d+)?", w)}
    return sorted(f"{command.name}: {f}" for f in flags - declared)


ALL = blocks()


def test_the_docs_have_blocks_and_markers() -> None:
    assert len(ALL) > 30 and sum(b.marker == "run" for b in ALL) >= 1 and len(RUN) >= 3


@pytest.mark.parametrize("block", ALL, ids=[b.where for b in ALL])
def test_every_block_says_how_it_is_checked(block: Block) -> None:
    if block.marker == "not run":
        assert block.reason.startswith(REASONS), f"{block.where}: reason must start with one of {REASONS}"
        return
    if block.marker == "covered by":
        assert (ROOT / block.reason).is_file(), f"{block.where}: no {block.reason}"
        return
    if block.marker == "config":
        assert block.lang == "yaml", block.where
        return
    if block.where == "README.md:3":  # the two set-up commands: CI runs `make test`; `make run` is run by hand
        assert [line.split()[:2] for line in block.lines] == [["make", "run"], ["make", "test"]]
        return
    assert block.lang not in CODE or block.marker is not None, (
        f"{block.where}: a {block.lang} block needs a marker: run, config, covered by tests/..., not run: ...")


@pytest.mark.parametrize("block", [b for b in ALL if haldet_lines(b)],
                         ids=[b.where for b in ALL if haldet_lines(b)])
def test_documented_commands_and_options_exist(block: Block) -> None:
    problems = [p for line in haldet_lines(block) for p in unknown_options(line)]
    assert problems == [], f"{block.where}: {problems}"


def test_an_unknown_option_is_caught() -> None:
    """Negative controls: a renamed option or command in a doc would fail the check above."""
    assert unknown_options("haldet run --detektor perplexity") == ["run: --detektor"]
    assert unknown_options("haldet presets plann openhaldet") == ["no command 'haldet presets plann'"]
    assert unknown_options("haldet datasets show NAME [--limit N] [--json]") == []


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from haldet.testing.synthetic_run import write_synthetic_run

    root = tmp_path_factory.mktemp("docs")
    for name in ("a", "b", "matrix", "llama", "qwen"):  # the run names the docs use
        write_synthetic_run(root / "runs" / name, n_items=40, names=("perplexity", "saplma"))
    return root


CONFIGS = [b for b in ALL if b.marker == "config"]


@pytest.mark.parametrize("block", CONFIGS, ids=[b.where for b in CONFIGS])
def test_config_blocks_load_as_run_configs(block: Block, tmp_path: Path) -> None:
    from haldet.config_files import compose_config

    path = tmp_path / "c.yaml"
    path.write_text("\n".join(block.lines))
    compose_config(path)  # unknown keys or wrong values raise a HaldetError naming them


RUN = [(b, line) for b in ALL if b.marker == "run" for line in haldet_lines(b)]


@pytest.mark.parametrize(("block", "line"), RUN, ids=[f"{b.where}:{line[:60]}" for b, line in RUN])
def test_marked_blocks_run(block: Block, line: str, scratch: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(scratch)
    result = CliRunner().invoke(app, shlex.split(line)[1:])
    assert result.exit_code == 0, f"{block.where}: `{line}` exited {result.exit_code}:\n{result.output[-2000:]}"
