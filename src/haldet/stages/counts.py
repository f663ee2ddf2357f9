"""What the stages of one cell did, typed: per stage, items computed, failed, recovered from damaged shards and
computed by shard workers.

The run manifest keeps these as one flat JSON object (`"computed": {"generate_computed": 3, "sample_failed": 1}`),
a file format: `StageTally` reads as exactly that mapping, while code writes and reads the typed fields. A count
never set stays absent from the flat form (None here), so the manifest says only what happened.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, fields


@dataclass
class StageCounts:
    """One stage's counts in one cell (None: not counted in this run)."""

    computed: int | None = None  # items computed by this process (0: all were cached)
    failed: int | None = None    # items whose evidence could not be obtained (`<stage>.failed.jsonl`)
    damaged: int | None = None   # records dropped with a damaged HDF5 shard, recomputed
    sharded: int | None = None   # items computed by shard workers (haldet.flow.ray_executor)

    def add_failed(self, n: int) -> None:
        self.failed = (self.failed or 0) + n

    def add_damaged(self, n: int) -> None:
        self.damaged = (self.damaged or 0) + n

    def add_sharded(self, n: int) -> None:
        self.sharded = (self.sharded or 0) + n


COUNT_FIELDS = tuple(f.name for f in fields(StageCounts))


class StageTally(Mapping[str, int]):
    """Stage name -> `StageCounts` for one cell; as a mapping, the manifest's flat `<stage>_<count>` form."""

    def __init__(self) -> None:
        self.stages: dict[str, StageCounts] = {}

    def stage(self, name: str) -> StageCounts:
        """The counts of stage `name` (created empty on first use)."""
        return self.stages.setdefault(name, StageCounts())

    def clear(self) -> None:
        self.stages.clear()

    def flat(self) -> dict[str, int]:
        return {f"{stage}_{field}": value for stage, counts in self.stages.items() for field in COUNT_FIELDS
                if (value := getattr(counts, field)) is not None}

    @classmethod
    def from_flat(cls, flat: Mapping[str, int]) -> StageTally:
        """The tally of a manifest's flat counts (keys of another form are not counts and are skipped)."""
        tally = cls()
        for key, value in flat.items():
            stage, _, field = key.rpartition("_")
            if stage and field in COUNT_FIELDS:
                setattr(tally.stage(stage), field, value)
        return tally

    def __getitem__(self, key: str) -> int:
        return self.flat()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.flat())

    def __len__(self) -> int:
        return len(self.flat())

    def __repr__(self) -> str:
        return f"StageTally({self.flat()!r})"
