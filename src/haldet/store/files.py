"""The files of a run directory: atomic writes, the append-only JSONL stage log and the HDF5 array shards.

Crash safety. A JSONL line is appended with one `write` on an O_APPEND descriptor and fsynced; a line cut by a
kill has no trailing newline and is dropped (and truncated away before the next append), so a record is either
complete or absent. Array shards are written to a temporary file and renamed, and their JSONL records are
appended only after the rename, so a record marks an item "done" only once all its parts exist.
Records carry a `key` (the stage's cache key for that item); reads keep only records with the wanted key, so a
changed setting recomputes exactly the affected items and older records stay on disk untouched.

Concurrency (haldet.util.locking). Every command that writes into a run holds `RUN/run.lock`; every writer of one log
takes `CellStore.lock(<log name>)` around its read-then-append. Temporary files of atomic writes are named
`.<name>.<pid>-<random>.tmp`; `clean_stale_temps` removes those whose writer is gone (left by a kill).
A shard that no longer opens or lacks a recorded array is "damaged": `ArrayStore.check` finds it, and the stage
drops its records (`StageLog.drop`) and moves the shard aside so the items are recomputed (stages/base.py).
"""

from __future__ import annotations

import json
import os
import re
import secrets
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from haldet.errors import HaldetError

_TEMP = re.compile(r"^\..+\.tmp$")
_TEMP_PID = re.compile(r"\.(\d+)-[0-9a-f]+\.tmp$")


def temp_path(path: Path) -> Path:
    """The temporary name an atomic write of `path` uses: hidden, tagged with the writer's pid (so a later run
    can tell a leftover of a killed writer from a write in flight), renamed over `path` when complete."""
    return path.with_name(f".{path.name}.{os.getpid()}-{secrets.token_hex(4)}.tmp")


@contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """Yield a temporary path to write `path` to; renamed into place on success, removed on any failure."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_path(path)
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException as exc:
        tmp.unlink(missing_ok=True)
        _name_path(exc, path)
        raise


def _name_path(exc: BaseException, path: Path) -> None:
    """A failed write() names no file; attach the path so the user's message says which file (errors.py)."""
    if isinstance(exc, OSError) and exc.filename is None:
        exc.filename = str(path)


def atomic_write_text(path: Path, text: str) -> None:
    """Write a whole file so readers see the old or the new content, never a mix."""
    with atomic_path(path) as tmp, open(tmp, "w") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def clean_stale_temps(root: Path) -> list[Path]:
    """Remove temporary files of atomic writes under `root` whose writer is gone (killed mid-write).

    A temp name carrying a live pid is a write in flight and is kept; one without a pid predates that naming
    and is removed (callers hold the run lock, so no haldet writer of this run is in flight)."""
    removed: list[Path] = []
    if not root.is_dir():
        return removed
    for dirpath, _, files in os.walk(root):
        for name in files:
            if not _TEMP.match(name):
                continue
            match = _TEMP_PID.search(name)
            if match and _alive(int(match.group(1))):
                continue
            path = Path(dirpath) / name
            try:
                path.unlink()
                removed.append(path)
            except FileNotFoundError:
                continue
    return removed


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise HaldetError(f"malformed JSON at line {exc.lineno}: {exc.msg}", where=str(path),
                          hint="restore the file or remove it to recompute") from None


class StageLog:
    """Append-only JSONL of one stage's per-item records."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def _repair_tail(self) -> None:
        """Cut a trailing partial line left by a killed writer (it never became a record)."""
        if not self.path.exists():
            return
        with open(self.path, "rb+") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            if size == 0:
                return
            fh.seek(size - 1)
            if fh.read(1) == b"\n":
                return
            # scan back for the last newline
            pos = size - 1
            chunk = 4096
            while pos > 0:
                start = max(0, pos - chunk)
                fh.seek(start)
                data = fh.read(pos - start)
                idx = data.rfind(b"\n")
                if idx >= 0:
                    fh.truncate(start + idx + 1)
                    return
                pos = start
            fh.truncate(0)

    def append(self, records: Iterable[Mapping[str, Any]]) -> int:
        """Append complete records (each with `id` and `key`) in one write + fsync. Returns the count."""
        lines = []
        for rec in records:
            if "id" not in rec or "key" not in rec:
                raise ValueError(f"record for {self.path.name} needs 'id' and 'key': {sorted(rec)}")
            lines.append(json.dumps(rec, separators=(",", ":"), allow_nan=True) + "\n")
        if not lines:
            return 0
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._repair_tail()
        data = "".join(lines).encode()
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            view = memoryview(data)
            while view:
                written = os.write(fd, view)
                view = view[written:]
            os.fsync(fd)
        except OSError as exc:  # e.g. a full disk: a partial line is cut by the next append (_repair_tail)
            _name_path(exc, self.path)
            raise
        finally:
            os.close(fd)
        return len(lines)

    def drop(self, invalid: Callable[[dict[str, Any]], bool]) -> int:
        """Rewrite the log without the records `invalid` selects (atomically; the caller holds the log's lock).
        Returns how many were dropped."""
        if not self.path.exists():
            return 0
        with open(self.path, "rb") as fh:
            lines = fh.read().split(b"\n")[:-1]
        keep = [raw for raw in lines if raw.strip() and not invalid(json.loads(raw))]
        dropped = sum(1 for raw in lines if raw.strip()) - len(keep)
        if dropped:
            with atomic_path(self.path) as tmp:
                tmp.write_bytes(b"".join(raw + b"\n" for raw in keep))
        return dropped

    def read(self, key: str | Mapping[str, str] | None = None) -> dict[str, dict[str, Any]]:
        """Complete records by id (first matching record per id wins).

        `key` filters: one key for all records, or a mapping id -> wanted key (ids not in it are skipped, unparsed
        when the id is the record's first field, as `append` writes the stages' records: a stage checks each batch
        against its log before appending, and parsing every record each time made a run quadratic in its items).
        """
        out: dict[str, dict[str, Any]] = {}
        if not self.path.exists():
            return out
        with open(self.path, "rb") as fh:
            lines = fh.read().split(b"\n")
        # the last element is b"" for a complete file, or a partial line cut by a kill: never a record
        for lineno, raw in enumerate(lines[:-1], start=1):
            if not raw.strip():
                continue
            if isinstance(key, Mapping):
                found = _leading_id(raw)
                if found is not _UNKNOWN and found not in key:
                    continue
            try:
                rec = json.loads(raw)
            except json.JSONDecodeError as exc:
                raise HaldetError(f"corrupt record at line {lineno}: {exc.msg}", where=str(self.path),
                                  hint="delete that line (or the file) and run again to recompute it") from None
            if isinstance(key, str) and rec.get("key") != key:
                continue
            if isinstance(key, Mapping) and key.get(rec.get("id")) != rec.get("key"):
                continue
            out.setdefault(rec["id"], rec)
        return out


_ID_FIELD = b'{"id":'
_DECODER = json.JSONDecoder()
_UNKNOWN = object()


def _leading_id(raw: bytes) -> Any:
    """A record line's id when it is its first field, read alone (the rest unparsed); `_UNKNOWN` otherwise."""
    if not raw.startswith(_ID_FIELD):
        return _UNKNOWN
    try:
        found = _DECODER.raw_decode(raw.decode(), len(_ID_FIELD))[0]
    except (UnicodeDecodeError, json.JSONDecodeError):
        return _UNKNOWN  # the full parse names the damage
    return found if isinstance(found, str) else _UNKNOWN


class ArrayStore:
    """HDF5 arrays of one stage: `<stage>/<shard>.h5`, datasets at `/<item id>/<name>`.

    Each shard is written by one writer to a temporary name and renamed; arrays are float16 by default
    (ints stay ints), chunked and gzip-compressed, contiguous per item, plain numeric dtypes only.
    """

    def __init__(self, root: Path) -> None:
        self.root = root

    def write(self, items: Mapping[str, Mapping[str, np.ndarray]], *, dtype: str = "float16") -> str:
        """Write one shard holding `{item id: {array name: array}}`; returns the shard file name."""
        name = f"{uuid.uuid4().hex[:12]}.h5"
        with atomic_path(self.root / name) as tmp, h5py.File(tmp, "w") as fh:
            for item_id, arrays in items.items():
                group = fh.require_group(h5_name(item_id))
                for arr_name, arr in arrays.items():
                    arr = np.asarray(arr)
                    if np.issubdtype(arr.dtype, np.floating):
                        arr = arr.astype(dtype)
                    group.create_dataset(arr_name, data=arr, chunks=arr.shape or None,
                                         compression="gzip" if arr.size > 64 else None)
            fh.flush()
        return name

    def check(self, shard: str, expected: Mapping[str, Iterable[str]]) -> str:
        """Why a shard is damaged ('' when it is sound): it must open and hold every expected array
        (`{item id: array names}`) with a readable shape. Data inside compressed chunks is checked when read."""
        path = self.root / shard
        if not path.exists():
            return "file missing"
        try:
            with h5py.File(path, "r") as fh:
                present: set[str] = set()
                fh.visit(present.add)  # one walk over the file's metadata (5x faster than a lookup per array)
        except (OSError, KeyError, ValueError, RuntimeError) as exc:
            return f"unreadable ({type(exc).__name__}: {str(exc).splitlines()[0][:160]})"
        for item_id, names in expected.items():
            for name in names:
                if f"{h5_name(item_id)}/{name}" not in present:
                    return f"array {name!r} of item {item_id} missing"
        return ""

    def quarantine(self, shard: str) -> Path | None:
        """Move a damaged shard aside (`<shard>.damaged`) so it is never read again; kept for inspection."""
        path = self.root / shard
        if not path.exists():
            return None
        target = path.with_name(path.name + ".damaged")
        os.replace(path, target)
        return target

    def read(self, shard: str, item_id: str, name: str) -> np.ndarray:
        path = self.root / shard
        try:
            with h5py.File(path, "r") as fh:
                return np.asarray(fh[h5_name(item_id)][name][()])
        except (OSError, KeyError) as exc:
            raise HaldetError(f"array {name!r} of {item_id} is missing or unreadable: {exc}", where=str(path),
                              hint="remove the stage's records for this item to recompute them") from None

    def read_many(self, refs: Iterable[tuple[str, str]], name: str) -> list[np.ndarray]:
        """Read `name` for many (shard, item id) refs, opening each shard once."""
        refs = list(refs)
        by_shard: dict[str, list[int]] = {}
        for i, (shard, _) in enumerate(refs):
            by_shard.setdefault(shard, []).append(i)
        out: list[np.ndarray | None] = [None] * len(refs)
        for shard, idxs in by_shard.items():
            path = self.root / shard
            try:
                with h5py.File(path, "r") as fh:
                    for i in idxs:
                        out[i] = np.asarray(fh[h5_name(refs[i][1])][name][()])
            except (OSError, KeyError) as exc:
                raise HaldetError(f"array {name!r} missing or unreadable: {exc}", where=str(path),
                                  hint="remove the stage's records for these items to recompute them") from None
        return [o for o in out if o is not None]


def h5_name(item_id: str) -> str:
    """Item ids contain '/', which HDF5 reads as nesting; keep them flat and readable."""
    return item_id.replace("/", "|")
