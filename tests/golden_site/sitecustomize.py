"""Loaded at start-up by CLI subprocesses of a golden recording (tests/golden.py): the same results hook."""

import os
import sys
from pathlib import Path

if os.environ.get("HALDET_GOLDEN_DIR"):
    sys.path.insert(0, str(Path(__file__).parents[1]))
    import golden

    golden.install(Path(os.environ["HALDET_GOLDEN_DIR"]))
