"""The run flow: one cell flow for every level (`cell`), one scoring path (`scoring`), the protocol that is its only
parameter (`protocol`: OpenHalDet's by default, a suite's otherwise), result rows and manifest entries (`results`),
and the run over all cells (`run`), through an executor (`executors`: serial, or Ray's in `ray_executor`)."""
