"""Template files: every prompt haldet sends is a packaged file under `haldet/templates/` (`PROMPT_TEMPLATES`).

A run config replaces any of them by name (`templates:` in `RunConfig`): inline text, or `{path: FILE}`
(`template_text`); the older per-section folders (`prompt.template_dir`, `judge.template_dir`, the VeriGray
classifier's) still replace a file by a file of the same name, and the config entry wins over both. Texts are read
unchanged (UTF-8): the callers put the texts (or, for the packaged wording, its version) into their cache keys.
HalluLens reads its packaged YAML here too (its own `--prompts FILE` replaces keys of it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from haldet.errors import HaldetError

# Every prompt a run sends, by name -> its packaged file. Overridable with `templates: {NAME: TEXT | {path: FILE}}`.
PROMPT_TEMPLATES = {
    "answer_user": "prompt_user.j2",            # the target model's user turn (Jinja2: instruction, context, ...)
    "answer_routing": "prompt_routing.yaml",    # dataset / task-type instructions, context labels, demo answers
    "verbalized": "aux_verbalized.txt",         # follow-up question: verbalized confidence (one number in [0, 1])
    "self_eval": "aux_self_eval.txt",           # follow-up question: P(True) self-evaluation (True / False)
    # the evaluator procedure (`auxiliary.procedure: evaluator`, OpenHalDet E.2/E.3): a separate chat per query
    "evaluator_verbalized_system": "evaluator_verbalized_system.txt",
    "evaluator_verbalized_user": "evaluator_verbalized_user.j2",    # Jinja2: question (the task), answer
    "evaluator_self_eval_system": "evaluator_self_eval_system.txt",
    "evaluator_self_eval_user": "evaluator_self_eval_user.j2",      # Jinja2: question (the task), answer
    "judge_system": "judge_system.txt",         # the LLM judge (OpenHalDet labels)
    "judge_user": "judge_user.txt",
    "judge_user_reasoning": "judge_user_reasoning.txt",  # the same, showing a reasoning model's reasoning too
    "judge_paper_system": "judge_paper_system.txt",  # `judge.prompt: paper`: OpenHalDet appendix D's structure
    "judge_paper_user": "judge_paper_user.txt",      # (three rules; Context, Question, Acceptable Truths, Known Traps)
    "judge_correction": "judge_correction.txt",
    "judge_examples": "judge_examples.json",    # the judge's few-shot calibration examples
    "faithfulness_system": "faithfulness_system.txt",  # TRIVIA+ LLM judge and few-shot judge (verdict stage)
    "faithfulness_user": "faithfulness_user.j2",        # its user turn (Jinja2: context, question, answer)
    "po_optimizer_system": "po_optimizer_system.txt",   # TRIVIA+ PO: the optimiser rewriting the judge's
    "po_optimizer_user": "po_optimizer_user.j2",        # instructions (Jinja2: instructions, mistakes)
    "verigray_classify": "verigray_classify.txt",       # VeriGray's 7-way sentence classifier (Jinja2)
    "verigray_lynx": "verigray_lynx.j2",                # Lynx-style PASS/FAIL sentence verifier (Jinja2)
    # ANAH-v2-style sentence annotator, its three turns (Jinja2: question, sentence, document; reference)
    "verigray_anah_facts": "verigray_anah_facts.j2",          # 1: does the sentence state checkable facts?
    "verigray_anah_reference": "verigray_anah_reference.j2",  # 2: the related information in the document
    "verigray_anah_verdict": "verigray_anah_verdict.j2",      # 3: the hallucination type given that information
    "support_check": "support_check.txt",               # MiniCheck's Yes/No question (format: premise, hypothesis)
    "claims_extract": "claims_extract.txt",             # the claims stage: split an answer into atomic claims
    "claim_verify": "claim_verify.j2",                  # longform verifier labels: a claim vs retrieved passages
    "claim_p_true": "claim_p_true.j2",                  # claim-level P(True): is this claim of your answer true?
}


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


def check_overrides(overrides: Mapping[str, Any] | None) -> None:
    """Unknown template names in a config's `templates:` are an error naming the known ones."""
    unknown = sorted(set(overrides or {}) - set(PROMPT_TEMPLATES))
    if unknown:
        raise HaldetError(f"unknown prompt template(s) {', '.join(unknown)}", where="templates",
                          hint=f"known: {', '.join(PROMPT_TEMPLATES)}")


def override_text(name: str, overrides: Mapping[str, Any] | None) -> str | None:
    """The config's replacement of template `name`: its inline text, or the text of its `path`; None without one."""
    check_overrides(overrides)
    entry = (overrides or {}).get(name)
    if entry is None:
        return None
    if isinstance(entry, str):
        return entry
    path = Path(entry["path"] if isinstance(entry, Mapping) else entry.path).expanduser()
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise HaldetError(f"cannot read prompt template {name!r}: {exc.strerror}", where=f"templates.{name}.path",
                          hint=f"give a readable file, or the text inline (packaged: {PROMPT_TEMPLATES[name]})"
                          ) from None


def template_text(name: str, overrides: Mapping[str, Any] | None = None, folder: Path | None = None) -> str:
    """Template `name`: the config's override, else `folder/<file>` when the user's folder holds it, else the
    packaged file."""
    text = override_text(name, overrides)
    return text if text is not None else read_template(PROMPT_TEMPLATES[name], folder)


def override_digest(names: Sequence[str], overrides: Mapping[str, Any] | None) -> list[str]:
    """For a cache key: the texts of the overridden templates among `names` (empty with the packaged wording, which
    the caller's prompt version already names, so default keys stay as they were)."""
    return [f"{name}={text}" for name in names if (text := override_text(name, overrides)) is not None]
