"""Which auxiliary models would produce a detector's numbers, resolved before scoring.

A detector's score key includes the identity of every auxiliary model it uses (`Detector.auxiliary`): the name
requested, the name that will actually load (the requested one when it is available here, else the configured
fallback: a *substitute*), a fingerprint of its files (hub snapshot revision, config + file sizes of a local
directory, the packaged GGUF's hash) and its max_length. Scores made with a substitute therefore never answer a
later run that can load the real model. Resolution looks at files only; nothing is loaded.
"""

from __future__ import annotations

import hashlib
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Any

from haldet.backends.openai_client import OPENAI_BASE_URL
from haldet.errors import HaldetError
from haldet.text.sentences import splitter_id
from haldet.util.assets import EMBEDDING_ALIASES, MODEL_ALIASES, file_sha256, hub_reachable, resolve_embedding


def _dir_fingerprint(path: Path) -> str:
    """config.json content plus every file's relative name and size (weights are not read: too slow)."""
    h = hashlib.sha256()
    for f in sorted(p for p in path.rglob("*") if p.is_file()):
        h.update(f"{f.relative_to(path)}:{f.stat().st_size}\n".encode())
        if f.name == "config.json":
            h.update(f.read_bytes())
    return "dir:" + h.hexdigest()[:16]


def locate(name: str) -> str | None:
    """A fingerprint of `name` when it can be loaded here (None when not): an embedded alias, a local path, a
    cached hub snapshot (its revision), or a hub id while the hub is reachable. Not memoised: a model that
    appears (downloaded, copied in) later in the process is found."""
    base = name.removeprefix("llm:").removeprefix("bi:")
    if base in MODEL_ALIASES:
        try:
            return "gguf:" + file_sha256(MODEL_ALIASES[base](), limit=1 << 22)[:16]
        except HaldetError:
            return None
    if base in EMBEDDING_ALIASES:
        try:
            base = resolve_embedding(base)
        except HaldetError:
            return None
    path = Path(base).expanduser()
    if path.is_dir():
        return _dir_fingerprint(path)
    if path.is_file():
        return "file:" + file_sha256(path, limit=1 << 22)[:16]
    try:
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(base, "config.json")
    except ValueError:  # not a valid repo id
        cached = None
    if isinstance(cached, str):
        return "hub:" + Path(cached).parent.name  # snapshots/<commit>/config.json
    return "hub:latest" if hub_reachable() else None


def pair_model_identity(kind: str, name: str, fallback: str | None, max_length: int | None = None,
                        base_url: str | None = None) -> dict[str, Any]:
    """The requested pair model, the one that will run, whether that is a substitute, and its fingerprint. An
    `openai:<model>` checker is the endpoint model name at its base URL (nothing local to fingerprint)."""
    if name.startswith("openai:"):
        url = base_url or OPENAI_BASE_URL
        return {"kind": kind, "requested": name, "used": name, "substitute": False, "fingerprint": f"endpoint:{url}",
                "base_url": url}
    fingerprint = locate(name)
    used: str | None = name
    if fingerprint is None and fallback and fallback != name:
        used, fingerprint = fallback, locate(fallback)
    if fingerprint is None:
        used = None
    out: dict[str, Any] = {"kind": kind, "requested": name, "used": used, "substitute": used not in (None, name),
                           "fingerprint": fingerprint}
    if max_length is not None:
        out["max_length"] = max_length
    return out


@lru_cache(maxsize=1)
def splitter_identity() -> dict[str, Any]:
    """The sentence segmenter `haldet.text.sentences` uses here, with the spaCy and pipeline package versions."""
    used = splitter_id()
    out: dict[str, Any] = {"kind": "splitter", "used": used, "spacy": metadata.version("spacy")}
    package = used.removeprefix("spacy:")
    if package != "sentencizer":
        try:
            out["version"] = metadata.version(package)
        except metadata.PackageNotFoundError:
            out["version"] = None
    return out


def resolve_auxiliary(det: Any) -> dict[str, dict[str, Any]]:
    """Identity of every auxiliary model `det` declares (parameter -> identity)."""
    out: dict[str, dict[str, Any]] = {}
    for param, kind in getattr(det, "auxiliary", {}).items():
        if kind == "splitter":
            out[param] = splitter_identity()
            continue
        if kind == "causal_lm":  # a language model the detector fine-tunes itself (sft): loaded as named, or an error
            out[param] = {"kind": kind, "requested": str(det.params[param]), "used": str(det.params[param])}
            if "base_url" in det.params:  # an LLM asked in words (selfcheck_prompt, llm_panel): its files, or where
                out[param]["fingerprint"] = (det.params["base_url"] if det.params["base_url"] else
                                             [locate(str(m)) for m in _names(det.params[param])])
            continue
        # "outer.inner" names a model inside a dict parameter (its fallback/max_length sit beside it)
        owner, _, leaf = param.rpartition(".")
        params = det.params.get(owner) or {} if owner else det.params
        if params.get(leaf):
            out[param] = pair_model_identity(kind, str(params[leaf]), params.get("fallback"), params.get("max_length"),
                                             params.get("base_url"))
    return out


def missing_auxiliary(det: Any) -> list[tuple[str, str]]:
    """(parameter, requested name) of each auxiliary model of `det` found here neither as requested nor as its
    fallback: no local copy, no cached snapshot, the hub unreachable. Loading it would fail."""
    return [(param, str(found["requested"])) for param, found in resolve_auxiliary(det).items()
            if "requested" in found and "used" in found and found["used"] is None]


def loadable(name: str) -> bool:
    """Whether model `name` can be loaded here: `locate` finds a file, a cached snapshot, or the hub."""
    return locate(name) is not None


def _names(value: Any) -> list[Any]:
    """The model names of a parameter holding one name or a list of names / {"model": ...} entries."""
    items = value if isinstance(value, (list, tuple)) else [value]
    return [m.get("model") if isinstance(m, dict) else m for m in items]


def substitutes(identity: dict[str, Any]) -> list[str]:
    """'requested -> used' for each auxiliary model of an identity that is a substitute."""
    return [f"{m['requested']} -> {m['used']}" for m in (identity.get("models") or {}).values()
            if m.get("substitute")]
