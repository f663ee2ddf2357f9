"""Which stages a set of signals needs, in which order: derived from what each registered stage declares.

Each stage class says which signals it `provides` and which stages it runs `after`; `plan(signals)` takes the
stages that provide the signals (and the primary stage, which provides the answer every item has whether or not
a detector reads it), then orders them topologically by `after`. A signal no stage provides, two stages providing
the same signal, or stages that run after each other are refused with one clear error, never a silent guess.
"""

from __future__ import annotations

from collections.abc import Iterable

from haldet.errors import HaldetError
from haldet.signals import Signal
from haldet.stages.base import STAGES, Stage

PRIMARY = Signal.RESPONSE  # the answer: its stage runs for every item, read or not


def stage_class(name: str) -> type[Stage]:
    """The registered stage class called `name`."""
    return STAGES.get(name, where="stage")


def providers(stages: Iterable[type[Stage]] | None = None) -> dict[Signal, type[Stage]]:
    """Signal -> the stage class that provides it (of `stages`, default every registered stage)."""
    out: dict[Signal, type[Stage]] = {}
    for cls in (stages if stages is not None else [cls for _, cls in STAGES]):
        for signal in cls.provides:
            if signal in out and out[signal] is not cls:
                raise HaldetError(f"signal {signal.value!r} is provided by two stages, {out[signal].name!r} and "
                                  f"{cls.name!r}", where="stage registry",
                                  hint="a signal must have exactly one stage: drop it from one `provides`")
            out[signal] = cls
    return out


def plan(signals: Iterable[Signal], stages: Iterable[type[Stage]] | None = None) -> list[type[Stage]]:
    """The stage classes these signals need (the primary stage always), ordered so that each runs after the
    planned stages named in its `after` (ties by name). `stages`: the candidates (default: the registry)."""
    provided = providers(stages)
    wanted = {PRIMARY, *signals}
    missing = sorted(s.value for s in wanted if s not in provided)
    if missing:
        raise HaldetError(f"no stage provides {', '.join(missing)}", where="stage plan",
                          hint="declare the signal in a registered stage's `provides`")
    chosen = {provided[s].name: provided[s] for s in wanted}
    return _ordered(chosen)


def _ordered(chosen: dict[str, type[Stage]]) -> list[type[Stage]]:
    """Topological order by `after` restricted to the chosen stages (Kahn, ready stages by name)."""
    before = {name: {b for b in cls.after if b in chosen} for name, cls in chosen.items()}
    order: list[type[Stage]] = []
    while before:
        ready = sorted(name for name, deps in before.items() if not deps)
        if not ready:
            cycle = ", ".join(f"{n} after {'+'.join(sorted(d))}" for n, d in sorted(before.items()))
            raise HaldetError(f"the stages run after each other in a cycle: {cycle}", where="stage plan",
                              hint="drop one of these names from the stages' `after`")
        name = ready[0]
        order.append(chosen[name])
        del before[name]
        for deps in before.values():
            deps.discard(name)
    return order


def stage_provides() -> dict[str, frozenset[Signal]]:
    """Every signal-providing stage in run order -> the signals it provides: the map that layers below the stages
    (`haldet.evaluation.cost`) are handed, since they may not import the stages."""
    every = [cls for _, cls in STAGES if cls.provides]
    return {cls.name: cls.provides for cls in plan(set().union(*(c.provides for c in every)), every)}
