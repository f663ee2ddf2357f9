"""User-facing errors: one clear message (what, where, what to do), shown without a traceback."""

from __future__ import annotations

import difflib
import errno
from collections.abc import Iterable


class HaldetError(Exception):
    """A problem the user can fix: bad input, missing model, unreachable endpoint, ...

    `what` says what went wrong, `where` names the file, line, field or option, `hint` says what to do.
    The CLI prints these as one message and exits with status 2; nothing already written is touched.
    """

    def __init__(self, what: str, *, where: str = "", hint: str = "") -> None:
        self.what = what
        self.where = where
        self.hint = hint
        super().__init__(self.message)

    @property
    def message(self) -> str:
        parts = [self.what]
        if self.where:
            parts.append(f"(in {self.where})")
        text = " ".join(parts)
        if self.hint:
            text += f"\n  -> {self.hint}"
        return text


def close_matches(name: str, known: Iterable[str], n: int = 3) -> list[str]:
    """The known names a misspelling of `name` most likely meant (closest first; none when nothing is close): those
    about as close as the closest one, so a clear best guess is not diluted by a far one ('limt': 'limit', not
    also 'claims')."""
    found = difflib.get_close_matches(name, list(known), n=n, cutoff=0.6)
    ratio = [difflib.SequenceMatcher(None, name, m).ratio() for m in found]
    return [m for m, r in zip(found, ratio, strict=True) if r >= ratio[0] - 0.15]


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """`did you mean 'x'?` (or 'x' or 'y'), or "" when no known name is close to `name`."""
    matches = close_matches(name, known)
    return f"did you mean {' or '.join(repr(m) for m in matches)}?" if matches else ""


def unknown_keys(kinds: str, unknown: list[str], known: Iterable[str]) -> str:
    """`unknown option(s) a, b` (`kinds` in the plural) plus a guess for each misspelt one
    (`'lang': did you mean 'languages'?`)."""
    known = list(known)
    guesses = [f"{name!r}: {guess}" for name in unknown if (guess := did_you_mean(name, known))]
    return f"unknown {kinds} {', '.join(unknown)}" + (f" ({'; '.join(guesses)})" if guesses else "")


class UnknownNameError(HaldetError):
    """A name that is not in a registry; the message suggests the closest known names and lists them all."""

    def __init__(self, kind: str, name: str, known: list[str], *, where: str = "") -> None:
        guess = did_you_mean(name, known)
        super().__init__(
            f"unknown {kind} {name!r}" + (f"; {guess}" if guess else ""),
            where=where,
            hint=f"known {kind}s: {', '.join(sorted(known)) or '(none)'}",
        )


class SignalUnavailableError(HaldetError):
    """A stage or backend cannot provide a signal a detector asked for (e.g. hidden states from an API)."""


# OS errors about where haldet reads and writes (not bugs): each gets one message and a hint of what to do
_STORAGE_HINTS = {
    errno.EROFS: "the file system is read-only: pass a writable --out DIR (or remount it read-write)",
    errno.ENOSPC: "the disk is full: free some space (or use --out on another disk) and run the same command "
                  "again; everything written so far is kept and the run resumes from it",
    errno.EDQUOT: "the disk quota is exhausted: free some space and run the same command again; everything "
                  "written so far is kept and the run resumes from it",
    errno.EACCES: "permission denied: make the directory writable for this user, or pass another --out DIR",
    errno.EPERM: "operation not permitted: make the directory writable for this user, or pass another --out DIR",
    errno.EIO: "an input/output error from the disk: check the device, then run again",
    errno.ENOTDIR: "a path component is a file, not a directory: pass another --out DIR",
    errno.EISDIR: "a directory stands where haldet expects a file: move it away or pass another --out DIR",
}


def is_storage_error(exc: BaseException) -> bool:
    """An OSError about the file system (read-only, full, no permission, ...), as opposed to a network error."""
    return isinstance(exc, OSError) and exc.errno in _STORAGE_HINTS


def storage_error(exc: OSError) -> HaldetError:
    """One user-facing message for an OS error: what failed, on which path, what to do."""
    path = exc.filename if exc.filename is not None else ""
    if exc.filename2 is not None:
        path = f"{path} -> {exc.filename2}"
    if not is_storage_error(exc) and not path:  # e.g. a refused connection: say what it was
        return HaldetError(f"{type(exc).__name__}: {exc}", hint="check the address or resource named above, then "
                           "run the same command again (everything written so far is kept)")
    what = exc.strerror or str(exc) or type(exc).__name__
    hint = _STORAGE_HINTS.get(exc.errno or 0, "check the path and its permissions, then run the same command again")
    return HaldetError(f"cannot read or write a file: {what}", where=str(path) if path else "", hint=hint)


class ThinCellWarning(UserWarning):
    """A cell whose test split holds too few labelled answers of a class to rank detectors: its numbers exist (and
    say so in their `note`), but the Python API warns, as the CLI prints it and exits 1, so no caller reads them
    as a ranking by accident."""
