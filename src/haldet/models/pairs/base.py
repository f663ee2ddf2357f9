"""The pair-model interface (`PairModel.compute(pairs) -> [N, width]`), its column constants and what every
local pair model needs to load: local-only when offline, the device, one error naming a model that cannot load.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from haldet.errors import HaldetError
from haldet.util.assets import hub_reachable

NLI_COLUMNS = ("entailment", "neutral", "contradiction")
ENTAILMENT, NEUTRAL, CONTRADICTION = 0, 1, 2
Pair = tuple[str, str]
Progress = Callable[[int], None]


def local_only(name: str) -> bool:
    """Load from local files only: a local path, or any hub id when the hub cannot be reached."""
    return Path(name).expanduser().exists() or not hub_reachable()


def device_name(device: str) -> str:
    """`device`, or for "auto" cuda when there is a GPU, else cpu."""
    if device != "auto":
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def load_error(name: str, exc: Exception, what: str) -> HaldetError:
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return HaldetError(f"cannot load {what} {name!r}: {first}", where="detector_params",
                       hint="offline? give a local model directory, or keep the fallback parameter set")


class PairModel:
    """Scores (a, b) text pairs; `id` names exactly what produced the numbers (recorded with the scores)."""

    kind = ""           # "nli", "similarity" or "bertscore"
    width = 1           # values per pair
    columns: tuple[str, ...] = ("score",)
    abstains = False    # may return NaN rows (a pair it could not score); `why(pair)` then says why
    remote = False      # served behind an endpoint: no local files to fingerprint

    def __init__(self, name: str, *, batch_size: int = 16) -> None:
        self.name = name
        self.batch_size = max(1, int(batch_size))
        self.pairs_per_call = self.batch_size  # pairs `PairCache` hands to one `compute` call
        self.id = f"{self.kind}:{name}"

    def compute(self, pairs: Sequence[Pair]) -> np.ndarray:
        """[len(pairs), width] float64 for one batch (callers batch; see `PairCache`)."""
        raise NotImplementedError

    def prepare(self, pairs: Sequence[Pair]) -> None:
        """Called by `PairCache` with every pair it is about to compute (before batching them into `compute`
        calls): a model whose work is per text rather than per pair does that work once here."""

    def use_cell(self, root: Path | None) -> None:
        """Called by `PairCache` before `prepare` with its cell directory (None: process memory only): a model
        that keeps per-text evidence of its own there (a bi-encoder's embeddings) keeps it in that cell."""

    def why(self, pair: Pair) -> str:
        """Why an abstaining model gave `pair` no value in its last `compute` ("" when it gave one)."""
        return ""


def sequence_classifier(name: str, what: str, device: str) -> tuple[Any, Any, Any]:
    """Tokenizer, sequence-classification model (in eval mode, on its device) and that device; a model that
    cannot be loaded is one error naming it as `what`."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    local = local_only(name)
    try:
        tokenizer = AutoTokenizer.from_pretrained(name, local_files_only=local)
        model = AutoModelForSequenceClassification.from_pretrained(name, local_files_only=local)
    except (OSError, ValueError) as exc:
        raise load_error(name, exc, what) from None
    placed = torch.device(device_name(device))
    model.to(placed).eval()
    return tokenizer, model, placed


def pair_id(a: str, b: str) -> str:
    return hashlib.sha256(json.dumps([a, b]).encode()).hexdigest()[:24]


def unanswered(where: str, option: str, n_failed: int, n: int, last_error: str) -> HaldetError:
    """The error of a pair model at an endpoint that left requests unanswered after its retries (the pairs
    answered in earlier batches stay cached)."""
    return HaldetError(f"{where} gave no answer to {n_failed} of {n} requests: {last_error}", where=option,
                       hint="start the server or correct base_url (it usually ends in /v1); the pairs answered in "
                            "earlier batches are kept and not asked again")


def keep_value(why: dict[str, str], out: np.ndarray, row: int, pair: Pair, value: float | None, reason: str) -> None:
    """An abstaining pair model's answer for one pair: its value in `out`, or, when it has none, the reason
    remembered for `why(pair)` (a later value for the pair clears it)."""
    if value is None:
        why[pair_id(*pair)] = reason
    else:
        out[row, 0] = value
        why.pop(pair_id(*pair), None)
