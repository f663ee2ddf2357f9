"""The full default protocol (`haldet run` with no detector options) on the same N items, before and after in one
process. Modes: `transformers` (`decoder="transformers"`: transformers `generate`, auxiliary replies decoded in
full, evidence from its own passes), `haldet-separate` (the lean loop, the features and auxiliary stages reading
prompt + answer again: `evidence_in_decoding=False`) and `haldet` (the default: that evidence read while the
greedy answers are decoded, inside the generate stage).

Each mode runs `haldet.run` in a fresh run directory, so every stage computes. Per mode: wall seconds of
each stage (load_data, generate, annotate, sample, auxiliary, features), the detectors' fit + score seconds, the
whole run, and the ratio (whole run) / (generate + sample): how close the protocol is to the decoding it cannot
avoid. In `haldet` mode the generate stage also reads the evidence, so its generate time is not decoding alone:
with `haldet-separate` in the same run, `ratio_over_decoding_alone` divides `haldet`'s whole run by
`haldet-separate`'s generate + sample less its teacher-forced token pass (timed apart, `token_pass_s`): the same
decoding, nothing else in it; `ratio_over_decoding_alone_own_samples` puts `haldet`'s own sample stage in that
denominator (the same work in both modes, whose wall time still moves between runs). `model_positions` counts the
token positions the target model computes per stage (rows x width of its forward calls; the token pass apart), and
`ratio_positions_over_decoding_alone` is the first ratio in that work instead of seconds: noise-free, and what no
scheduling can lower without reading fewer tokens; `model_call_kinds` splits each stage's calls into decoding steps
(one token a row: calls and rows) and passes of several tokens a row (calls and positions), whose costs per token
differ (benchmarks/forward_costs.py). Also CPU seconds of this process
per mode (robust to other processes on a shared machine) and `os.getloadavg()`. `--repeat R` runs the modes R
times in turn (each time in a fresh run directory) and reports, per mode, the run with the smallest wall time
(`runs_wall_s` lists them all): on a shared machine the fastest run is the one least disturbed by others, and
the ratios are computed from these.

What each part of the default table costs: a mode `haldet-without-GROUP` runs the default with the detectors of
one group of `GROUPS` left out (those that need one kind of evidence beyond the decoding and the samples: ICR's
prompt states, the statements after each answer, the follow-up questions, the prompt-free pass, the pooled hidden
states; `haldet-without-all` leaves every group out). Beside `haldet` and `haldet-separate`, `groups` then says
per group the seconds and token positions the default spends on it (the default's whole run less the mode's) and
the ratio over the decoding alone without it. A mode `haldet-reread` runs the default with the samples reading
their prompts again (no `PromptStates` kept by the greedy decoding); beside `haldet`, `reread` then says what
starting the samples from the greedy answers' read prompts saves (sample stage seconds, token positions, calls).
Prints JSON. Usage:
  python benchmarks/protocol.py [--n 50] [--modes transformers,haldet-separate,haldet] [--threads N] [--repeat R]
                                [--store NAME] [--check NAME]
  python benchmarks/protocol.py --modes haldet-separate,haldet,haldet-without-icr,...,haldet-without-all
`--store NAME` writes benchmarks/results/NAME.json (machine, load average, commit, date), from which
benchmarks/render_docs.py renders docs/speed.md's protocol table; `--check NAME` exits 1 when a figure drifted.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from results import finish  # benchmarks/results.py: stored figures, --store and --check

from haldet.config import RunConfig
from haldet.util.threads import available_cores, configure_threads

STAGES = ("load_data", "generate", "annotate", "sample", "auxiliary", "features", "unconditional")
# the default table's detectors that need evidence beyond the decoding's tokens and distributions and the samples,
# grouped by that evidence (each group's evidence is read for it alone): group -> (detectors, what they need)
GROUPS = {
    "icr": (("icr_probe",), "every layer's state of each prompt and answer token, kept until the answer ends"),
    "statements": (("ccs", "prism"), "the statements read after each answer"),
    "questions": (("verbalized", "self_eval"), "the two follow-up questions after each answer, and the verbalized "
                  "replies decoded"),
    "prompt_free": (("pmi", "cpmi"), "a pass over each answer without its prompt"),
    "pooled_states": (("saplma", "mind", "haloscope", "mahalanobis", "relative_mahalanobis"),
                      "pooled hidden states of prompt and answer, and their trainings"),
}
WITHOUT = "haldet-without-"
REREAD = "haldet-reread"  # the default with the samples reading their prompts again
MODES = ("transformers", "haldet-separate", "haldet", REREAD)


def left_out(mode: str) -> tuple[str, ...]:
    """The detectors a `haldet-without-GROUP` mode leaves out of the default table (none for the other modes)."""
    if not mode.startswith(WITHOUT):
        return ()
    group = mode[len(WITHOUT):]
    if group == "all":
        return tuple(name for names, _ in GROUPS.values() for name in names)
    if group not in GROUPS:
        raise SystemExit(f"unknown mode {mode!r}: the groups are {', '.join(GROUPS)} and all")
    return GROUPS[group][0]


class Positions:
    """Token positions the target model computes (rows x width of each of its forward calls, padding included), by
    the stage running: the work the run asks of the model, free of the machine's noise (seeded, so the same in
    every run of the same code)."""

    def __init__(self) -> None:
        self.stage = "other"
        self.counted: Counter[str] = Counter()
        self.calls: Counter[str] = Counter()  # forward calls: each has a fixed part (a step of 8 rows ~30% of 96's)
        # the calls that feed one token a row (decoding steps) apart, with their rows: a token decoded in a step costs
        # 2.7-11 times one read in a pass of several tokens a row (benchmarks/forward_costs.py)
        self.steps: Counter[str] = Counter()
        self.step_rows: Counter[str] = Counter()
        self.hooked: set[int] = set()

    def hook(self, model: Any) -> None:
        if id(model) not in self.hooked:
            self.hooked.add(id(model))
            model.register_forward_pre_hook(self._count, with_kwargs=True)

    def _count(self, _module: Any, args: Any, kwargs: Any) -> None:
        ids = kwargs.get("input_ids") if kwargs.get("input_ids") is not None else (args[0] if args else None)
        if ids is not None:
            self.counted[self.stage] += int(ids.numel())
            self.calls[self.stage] += 1
            if ids.shape[-1] == 1:
                self.steps[self.stage] += 1
                self.step_rows[self.stage] += int(ids.shape[0])

    def kinds(self) -> dict[str, dict[str, int]]:
        """Per stage, its decoding steps (calls, rows) and its passes of several tokens a row (calls, positions)."""
        return {stage: {"steps": self.steps[stage], "step_rows": self.step_rows[stage],
                        "passes": self.calls[stage] - self.steps[stage],
                        "pass_positions": self.counted[stage] - self.step_rows[stage]}
                for stage in sorted(self.calls)}

    @contextlib.contextmanager
    def during(self, stage: str) -> Iterator[None]:
        before, self.stage = self.stage, stage
        try:
            yield
        finally:
            self.stage = before


def run_mode(decoder: str, n: int, max_new_tokens: int | None, root: Path,
             extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """One mode's run; `extra` overrides the config further (benchmarks/gpu.py: another model, device and judge)."""
    import haldet as pipeline
    import haldet.backends.hf.backend as hf_backend
    import haldet.flow.cell as cell_flow
    import haldet.stages.base as stage_base

    overrides: dict[str, Any] = {"limit": n, "decoder": "transformers" if decoder == "transformers" else "haldet",
                                 "evidence_in_decoding": decoder in ("haldet", REREAD) or decoder.startswith(WITHOUT)}
    if left_out(decoder):
        overrides["detectors"] = [name for name in RunConfig().detectors if name not in left_out(decoder)]
    if max_new_tokens is not None:
        overrides.update(generation={"max_new_tokens": max_new_tokens}, sample={"max_new_tokens": max_new_tokens})
    config = RunConfig.model_validate({**overrides, **(extra or {})})
    # the generate stage's teacher-forced token pass (made when the token parts are not read while decoding) is
    # timed apart, so that "the decoding alone" is the decoding and nothing else
    import haldet.stages.generate as generate_stage

    token_pass_s = [0.0]
    real_pass = generate_stage.run_token_pass
    positions = Positions()

    def timed_pass(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            with positions.during("token_pass"):
                return real_pass(*args, **kwargs)
        finally:
            token_pass_s[0] += time.perf_counter() - start

    real_compute, real_model = stage_base.Stage._compute_missing, hf_backend.HFBackend.model

    def compute_missing(stage: Any, *args: Any, **kwargs: Any) -> Any:
        with positions.during(stage.name):
            return real_compute(stage, *args, **kwargs)

    def model(backend: Any) -> Any:
        loaded = real_model.fget(backend)
        positions.hook(loaded)
        return loaded

    real_follow = cell_flow.samples_follow
    generate_stage.run_token_pass = timed_pass
    stage_base.Stage._compute_missing = compute_missing
    hf_backend.HFBackend.model = property(model)
    if decoder == REREAD:
        cell_flow.samples_follow = lambda ctx: False
    wall, cpu = time.perf_counter(), time.process_time()
    try:
        _, cells = pipeline.run(config, root / decoder)
    finally:
        generate_stage.run_token_pass = real_pass
        stage_base.Stage._compute_missing = real_compute
        hf_backend.HFBackend.model = real_model
        cell_flow.samples_follow = real_follow
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    cell = cells[0]
    if cell.error:
        raise SystemExit(f"{decoder}: the cell failed: {cell.error}")
    stages = {name: round(cell.timings.get(name, 0.0), 2) for name in STAGES}
    detectors = {d.name: round(d.fit_seconds + d.score_seconds, 3) for d in cell.detectors}
    decoding = stages["generate"] + stages["sample"]
    return {
        "decoder": decoder, "wall_s": round(wall, 2), "cpu_s": round(cpu, 2), "stage_wall_s": stages,
        "token_pass_s": round(token_pass_s[0], 2),  # inside generate: a second pass over prompt + answer
        "model_positions": dict(sorted(positions.counted.items())),
        "model_calls": dict(sorted(positions.calls.items())),
        "model_call_kinds": positions.kinds(),
        "detectors_fit_score_s": round(sum(detectors.values()), 2), "per_detector_s": detectors,
        "ratio_all_over_generate_plus_sample": round(wall / decoding, 3) if decoding else None,
        "detector_errors": {d.name: d.error for d in cell.detectors if d.error},
        "labels": cell.label_counts,
    }


def decoding_ratios(modes: dict[str, Any]) -> dict[str, Any]:
    """The default run (`haldet`) over the decoding alone (`haldet-separate`'s generate + sample, less its
    teacher-forced token pass), in wall seconds and in token positions; empty without both modes."""
    if "haldet-separate" not in modes or "haldet" not in modes:
        return {}
    alone = modes["haldet-separate"]["stage_wall_s"]
    decoding_alone = alone["generate"] - modes["haldet-separate"]["token_pass_s"] + alone["sample"]
    out: dict[str, Any] = {"decoding_alone_s": round(decoding_alone, 2),
                           "ratio_over_decoding_alone": round(modes["haldet"]["wall_s"] / decoding_alone, 3)}
    # the sample stage is the same work in both modes, yet its wall time moves by several seconds between runs:
    # with `haldet`'s own sample time on both sides, only the greedy decoding is compared across runs
    own = alone["generate"] - modes["haldet-separate"]["token_pass_s"] + modes["haldet"]["stage_wall_s"]["sample"]
    out["decoding_alone_own_samples_s"] = round(own, 2)
    out["ratio_over_decoding_alone_own_samples"] = round(modes["haldet"]["wall_s"] / own, 3)
    # the same comparison in the model's work: token positions computed, not seconds
    counted = modes["haldet-separate"]["model_positions"]
    floor = counted.get("generate", 0) + counted.get("sample", 0)
    if floor:
        out["decoding_alone_positions"] = floor
        out["ratio_positions_over_decoding_alone"] = round(sum(modes["haldet"]["model_positions"].values()) / floor, 3)
    return out


def group_costs(modes: dict[str, Any], decoding_alone: float, floor: int) -> dict[str, Any]:
    """Per `haldet-without-GROUP` mode run: the detectors left out, the seconds, token positions and forward calls
    the default run spends on them (its whole run less the mode's; the seconds without the sample stage, the same
    work in every mode, whose wall time moves by seconds between runs), and the mode's whole run over the decoding
    alone, in seconds and in positions (`floor`: the decoding alone's)."""
    default = modes["haldet"]

    def besides_samples(r: dict[str, Any]) -> float:
        return float(r["wall_s"] - r["stage_wall_s"]["sample"])

    def total(r: dict[str, Any], counted: str) -> int:
        return int(sum(r[counted].values()))

    out = {}
    for mode, r in modes.items():
        if not mode.startswith(WITHOUT):
            continue
        group = mode[len(WITHOUT):]
        out[group] = {
            "detectors": list(left_out(mode)), "wall_s": r["wall_s"],
            "needs": GROUPS[group][1] if group in GROUPS else "all of the above",
            "default_spends_s": round(besides_samples(default) - besides_samples(r), 2),
            "default_spends_positions": total(default, "model_positions") - total(r, "model_positions"),
            "default_spends_calls": total(default, "model_calls") - total(r, "model_calls"),
            "ratio_positions_over_decoding_alone": round(total(r, "model_positions") / floor, 3),
            "ratio_over_decoding_alone": round(r["wall_s"] / decoding_alone, 3)}
    return out


def reread_costs(default: dict[str, Any], reread: dict[str, Any]) -> dict[str, Any]:
    """What the samples' reading their prompts again costs: the `haldet-reread` run less the default's, in the
    sample stage's seconds, token positions and forward calls, and in the whole run."""
    return {"sample_s": round(reread["stage_wall_s"]["sample"] - default["stage_wall_s"]["sample"], 2),
            "sample_positions": reread["model_positions"]["sample"] - default["model_positions"]["sample"],
            "sample_calls": reread["model_calls"]["sample"] - default["model_calls"]["sample"],
            "wall_s": round(reread["wall_s"] - default["wall_s"], 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=50)
    parser.add_argument("--modes", default="transformers,haldet-separate,haldet")
    parser.add_argument("--max-new-tokens", type=int, default=None, help="Override generation and sample limits.")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--repeat", type=int, default=1, help="Run the modes this many times in turn; keep each "
                        "mode's fastest run.")
    parser.add_argument("--store", metavar="NAME", help="write the result to benchmarks/results/NAME.json")
    parser.add_argument("--check", metavar="NAME", help="exit 1 when a figure drifted from "
                        "benchmarks/results/NAME.json")
    args = parser.parse_args()
    threads = configure_threads(args.threads)
    report: dict[str, Any] = {"n_items": args.n, "dataset": "halueval_qa", "model": "smollm2-135m",
                              "threads": threads, "available_cores": available_cores(),
                              "loadavg_before": [round(x, 2) for x in os.getloadavg()], "modes": {}}
    runs: dict[str, list[dict[str, Any]]] = {decoder: [] for decoder in args.modes.split(",")}
    for mode in runs:  # an unknown mode fails before any run, not after the first ones
        if mode not in MODES and not left_out(mode):
            raise SystemExit(f"unknown mode {mode!r}: {', '.join(MODES)} or {WITHOUT}GROUP")
    for attempt in range(args.repeat):
        for decoder, done in runs.items():
            with tempfile.TemporaryDirectory() as tmp:
                result = run_mode(decoder, args.n, args.max_new_tokens, Path(tmp))
            print(f"{decoder} (run {attempt + 1}/{args.repeat}): {result['wall_s']} s", file=sys.stderr, flush=True)
            done.append(result)
    for decoder, done in runs.items():
        report["modes"][decoder] = {**min(done, key=lambda r: r["wall_s"]),
                                    "runs_wall_s": [r["wall_s"] for r in done]}
    report["loadavg_after"] = [round(x, 2) for x in os.getloadavg()]
    modes = report["modes"]
    report.update(decoding_ratios(modes))
    if "transformers" in modes and "haldet" in modes:
        before, after = modes["transformers"], modes["haldet"]
        report["speedup_wall"] = round(before["wall_s"] / after["wall_s"], 2)
        report["speedup_cpu"] = round(before["cpu_s"] / after["cpu_s"], 2)
        report["stage_speedup_wall"] = {s: round(before["stage_wall_s"][s] / after["stage_wall_s"][s], 2)
                                        for s in STAGES if after["stage_wall_s"][s] > 0}
    if "haldet" in modes and REREAD in modes:
        report["reread"] = reread_costs(modes["haldet"], modes[REREAD])
    if "haldet" in modes and "decoding_alone_positions" in report:
        report["groups"] = group_costs(modes, report["decoding_alone_s"], report["decoding_alone_positions"])
    print(json.dumps(report, indent=2))
    finish("protocol", report, args.store, args.check)


if __name__ == "__main__":
    main()
