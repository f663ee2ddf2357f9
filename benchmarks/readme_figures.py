"""The speed figures the README quotes, as benchmarks/results/*.json gives them today.

The README's "Benchmarks" section says a few measured figures in its own sentences (the protocol's ratio, what a
decoded token costs, ...). Those sentences cannot be generated like docs/speed.md's tables, so `missing` lists
every quoted figure, worded as the README words it, that the README no longer says: a figure re-stored with a
benchmark's `--store` without the README following, or one typed by hand. `python benchmarks/render_docs.py
--check` runs it beside the tables' check, and so does tests/project/test_docs_tables.py.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import render_docs  # benchmarks/render_docs.py: the priced protocol, the stored figures' folder

README = render_docs.ROOT / "README.md"


def quoted() -> list[str]:
    """Each figure the README quotes, in the README's words, from the stored figures in `render_docs.RESULTS`."""
    def load(name: str) -> dict[str, Any]:
        return json.loads((render_docs.RESULTS / f"{name}.json").read_text())

    generation = load("generation")["data"]
    new, sampling = generation["modes"]["new"], generation["sampling"]
    protocol = load("protocol")
    data = protocol["data"]
    default = data["modes"]["haldet"]
    costs = load("forward_costs")["data"]
    fewest, prompt = costs["steps"][0], costs["passes"][0]["ms_per_position"]
    figures = [
        f"{new['speedup_wall_vs_batched_today']:.2f}x faster greedy with "
        f"{new['identical_greedy_answers_vs_batched_today']} identical answers",
        f"K={sampling['k']} sampling {sampling['speedup_cpu_per_item']:.2f}x less CPU per item with "
        f"{sampling['identical_samples']} identical samples",
        f"the run takes {data['ratio_over_decoding_alone']:.2f}x the decoding alone in wall time "
        f"({default['wall_s']:.1f} s against {data['decoding_alone_s']:.1f} s",
        f"computes {data['ratio_positions_over_decoding_alone']:.2f}x its positions",
        f"costs {costs['step_over_prompt_position']:.1f}x one read in a prompt pass, in a step of {fewest['rows']} "
        f"rows {fewest['ms_per_position'] / prompt:.1f}x"]
    if (reread := data.get("reread")) is not None:  # a protocol stored with its haldet-reread mode
        figures.append(f"again, {reread['wall_s']:.1f} s ({100 * reread['wall_s'] / default['wall_s']:.0f}%) slower")
    priced = render_docs.protocol_priced(protocol)
    if "unpriced" not in priced:
        alone = priced["runs"][0]
        figures += [f"account for {alone['steps_s'] + alone['passes_s']:.1f} of the decoding alone's "
                    f"{alone['measured_s']:.1f} s", f"the run would still be {priced['no_steps']:.2f}x it"]
    return figures


def missing(readme: Path = README) -> list[str]:
    """The quoted figures the README does not say (its line breaks read as spaces)."""
    text = re.sub(r"\s+", " ", readme.read_text())
    return [figure for figure in quoted() if figure not in text]


if __name__ == "__main__":
    gone = missing()
    print("\n".join(gone) if gone else "the README quotes every stored figure as stored")
    raise SystemExit(1 if gone else 0)
