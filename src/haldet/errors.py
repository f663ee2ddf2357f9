"""User-facing errors: one clear message (what, where, what to do), shown without a traceback."""

from __future__ import annotations


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


class UnknownNameError(HaldetError):
    """A name that is not in a registry; the message lists the known names."""

    def __init__(self, kind: str, name: str, known: list[str], *, where: str = "") -> None:
        super().__init__(
            f"unknown {kind} {name!r}",
            where=where,
            hint=f"known {kind}s: {', '.join(sorted(known)) or '(none)'}",
        )


class SignalUnavailableError(HaldetError):
    """A stage or backend cannot provide a signal a detector asked for (e.g. hidden states from an API)."""
