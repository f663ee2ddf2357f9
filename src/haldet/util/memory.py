"""Give memory back to the operating system between stages.

A decoding stage frees gigabytes of KV cache and hidden states at its end, but the C allocator keeps much of it
in its heap, so the resident size a user sees stays at the stage's peak and the next stage's peak lands on top
(the default run measured 2.9 GB resident during the label stage, which needs almost none; benchmarks/memory.py).
`release_memory` collects the young generations of Python garbage (a full collection takes a second once torch
is loaded; tensors are freed by reference counting anyway) and asks glibc to trim its heaps (`malloc_trim`,
microseconds); elsewhere it only collects.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
from functools import cache
from typing import Any


@cache
def _libc() -> Any:
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
    except OSError:
        return None
    return libc if libc is not None and hasattr(libc, "malloc_trim") else None


def release_memory() -> bool:
    """Collect garbage and return free heap pages to the OS; True when the allocator could be trimmed."""
    gc.collect(1)
    libc = _libc()
    if libc is None:
        return False
    libc.malloc_trim(0)
    return True
