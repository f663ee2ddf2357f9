"""Template files: the packaged ones under `haldet/templates/`, each replaceable by a file of the same name in a
user's template folder (answer prompts, the LLM judge, the VeriGray classifier; HalluLens reads its packaged YAML
here too). Texts are read unchanged (UTF-8): the callers' digests of them are part of cache keys.
"""

from __future__ import annotations

from collections.abc import Sequence
from importlib import resources
from pathlib import Path

from haldet.errors import HaldetError


def packaged_template(name: str) -> str:
    """The text of the packaged template `name` (a file under `haldet/templates/`)."""
    return (resources.files("haldet") / "templates" / name).read_text(encoding="utf-8")


def template_folder(template_dir: str | Path | None, *, what: str, option: str,
                    names: Sequence[str]) -> Path | None:
    """The user's template folder (None without one); a `HaldetError` naming `option` when it is not a folder."""
    if not template_dir:
        return None
    folder = Path(template_dir)
    if not folder.is_dir():
        raise HaldetError(f"{what} template directory not found: {folder}", where=option,
                          hint=f"a folder holding any of {', '.join(names)} (copies of the packaged ones, edited)")
    return folder


def user_template(folder: Path | None, name: str) -> str | None:
    """The text of `folder/name` when the user's folder holds that file, else None."""
    if folder is None or not (folder / name).is_file():
        return None
    return (folder / name).read_text(encoding="utf-8")


def read_template(name: str, folder: Path | None) -> str:
    """`folder/name` when the user's folder holds it, else the packaged template `name`."""
    text = user_template(folder, name)
    return text if text is not None else packaged_template(name)
