"""`haldet run --level claim,response`: which suite scores those levels of the run's datasets.

A level below `response` needs units, and units come with a suite that knows them (the `longform` suite's claims,
the `responses` suite's own units). The flag picks the suite named with --suite, else the one registered suite
with selectable levels (a `levels` option) whose datasets hold every --dataset; the levels go to its options.
"""

from __future__ import annotations

from typing import Any

from haldet.errors import HaldetError
from haldet.suites.base import SUITES


def suite_with_levels(suite: str | None, datasets: list[str], levels: list[str]) -> tuple[str, dict[str, Any]]:
    """`haldet run --level ...`: the suite that scores these levels (the one named, else the registered suite with
    selectable levels whose datasets hold every --dataset) and its `suite_params` entry."""
    if suite is None:
        found = [name for name, cls in SUITES if "levels" in cls.params and datasets
                 and set(datasets) <= set(cls.datasets)]
        if len(found) != 1:
            raise HaldetError(f"--level {','.join(levels)} needs a suite that scores units of "
                              f"{', '.join(datasets) or 'the run'}", where="--level",
                              hint="name it with --suite (e.g. longform for factscore_bio; `haldet suites list`)")
        suite = found[0]
    cls = SUITES.get(suite, where="--suite")
    if "levels" not in cls.params:
        raise HaldetError(f"suite {suite!r} has fixed levels {', '.join(cls.levels)}", where="--level",
                          hint="leave --level out, or use a suite with selectable levels (longform, responses)")
    return suite, {"levels": levels}
