"""The openhaldet preset runs the paper's whole matrix (17 datasets at Table 12's sizes, 2,048-token answers,
the GPT-4o-mini judge), `presets show` lists it, `RunConfig.limit_for` caps per dataset, and `haldet presets plan`
prints each preset's plan and estimate without loading a model or data."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from haldet.cli.presets import dataset_sizes, resolved_yaml
from haldet.config import RunConfig
from haldet.datasets.base import DATASETS
from haldet.flow.layers import load_config
from haldet.papers.plan import SPLITS, build_plan, model_size
from haldet.schema import Instance
from haldet.util.limits import max_new_tokens

PAPER17 = {"arc_challenge", "commonsenseqa", "triviaqa", "truthfulqa", "squad_v2", "hotpotqa", "coqa", "halueval_qa",
           "ragtruth", "xsum", "gsm8k", "svamp", "theoremqa", "humaneval", "mbpp", "xlam", "belebele"}


def test_openhaldet_preset_is_the_whole_matrix() -> None:
    config = load_config(None, preset="openhaldet")
    assert set(config.datasets) == PAPER17 and len(config.datasets) == 17 and len(config.detectors) == 17
    assert all(DATASETS.get(name) for name in config.datasets)  # registered names
    # Table 12's N (test answers, 20% of the items): TriviaQA 1,964 of 10,000; HotpotQA 996 of 5,000; XSum 200 of
    # 1,000; TruthfulQA, HaluEval-QA, SVAMP (train split) and HumanEval whole
    sizes = {d: config.limit_for(d) for d in ("triviaqa", "hotpotqa", "xsum", "truthfulqa", "halueval_qa", "svamp",
                                              "humaneval")}
    assert sizes == {"triviaqa": 10000, "hotpotqa": 5000, "xsum": 1000, "truthfulqa": None, "halueval_qa": None,
                     "svamp": None, "humaneval": None}
    assert config.dataset_params["svamp"] == {"split": "train"}
    assert config.judge.model == "gpt-4o-mini" and config.judge.kind == "llm"  # section 2.3
    gsm = Instance(id="gsm8k/test/1", dataset="gsm8k", scenario="math", task_type="reasoning", question="q")
    assert max_new_tokens(config, gsm) == 2048  # appendix G, not haldet's 512 for reasoning
    assert max_new_tokens(RunConfig(), gsm) == 512  # negative control: without the preset the task limit holds


def test_limit_for_takes_the_smaller_cap() -> None:
    config = RunConfig(limit=24, limit_by_dataset={"xsum": 10, "triviaqa": 1000, "gsm8k": None})
    assert (config.limit_for("xsum"), config.limit_for("triviaqa"), config.limit_for("gsm8k")) == (10, 24, 24)
    assert config.limit_for("other") == 24
    whole = RunConfig(limit=None, limit_by_dataset={"xsum": 10})
    assert (whole.limit_for("xsum"), whole.limit_for("gsm8k")) == (10, None)
    flag = load_config(None, preset="openhaldet", limit=24)  # --limit caps every dataset of the preset
    assert {flag.limit_for(d) for d in flag.datasets} == {24}


def test_presets_show_lists_datasets_sizes_and_lengths() -> None:
    text = resolved_yaml("openhaldet")
    lines = [line for line in text.splitlines() if line.startswith("#   ")]
    assert len(lines) == 17 and text.count("2048 tokens") == 17
    assert any(line.split()[1:3] == ["triviaqa", "10,000"] for line in lines)
    assert any(line.split()[1:4] == ["truthfulqa", "whole", "split"] for line in lines)
    default = dict((n, t) for n, _, t in dataset_sizes(load_config(None, preset="halluentity")))
    assert default == {"halluentity": 512}  # long_form task limit: the preset sets none


NAMES = ("openhaldet", "halluentity", "verigray", "triviaplus", "hallulens")


@pytest.fixture(scope="module")
def plans() -> dict[str, object]:
    """`haldet presets plan NAME --model nowhere/NoSuch-8B --json` for every preset, in one fresh process that
    reports which model and data libraries got imported."""
    code = ("import json, sys\nfrom typer.testing import CliRunner\nfrom haldet.cli import app\nplans = {}\n"
            f"for name in {NAMES!r}:\n"
            "    r = CliRunner().invoke(app, ['presets', 'plan', name, '--model', 'nowhere/NoSuch-8B', '--json'])\n"
            "    assert r.exit_code == 0, r.output\n"
            "    plans[name] = json.loads(r.output)\n"
            "print(json.dumps({'plans': plans, 'loaded': [m for m in ('transformers', 'datasets', 'vllm') "
            "if m in sys.modules]}))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("name", NAMES)
def test_plan_prints_without_a_model_and_counts_the_presets_items(name: str, plans: dict) -> None:
    assert plans["loaded"] == []  # no model library, no dataset library
    out = {"plan": plans["plans"][name]}
    plan, config = out["plan"], load_config(None, preset=name)
    want = {d: config.limit_for(d) or SPLITS[d][0] for d in config.datasets}
    assert {d["dataset"]: d["items"] for d in plan["datasets"]} == want
    assert plan["gpu_hours"] > 0 and plan["disk_gb"] > 0 and plan["assumptions"]
    target = plan["endpoints"][0]
    assert target["model"] == "nowhere/NoSuch-8B"
    if name == "openhaldet":  # answer + 5 samples + 2 follow-ups per item; one judge call per item
        assert target["calls"] == 8 * sum(want.values())
        assert plan["endpoints"][1] == {**plan["endpoints"][1], "model": "gpt-4o-mini", "calls": sum(want.values())}
    else:  # a suite's answers are given: one teacher-forced pass per item
        assert target["forward_passes"] >= sum(want.values())


def test_the_estimate_follows_the_model_size() -> None:
    assert model_size("meta-llama/Llama-3.2-3B-Instruct") == (3.21e9, 28, 3072)
    assert model_size("org/Thing-1.5B")[0] == pytest.approx(1.5e9) and model_size("mystery") is None
    config = load_config(None, preset="openhaldet")
    small = build_plan("openhaldet", config, "x-3B", {"perplexity": ["generate"]})
    large = build_plan("openhaldet", config, "x-30B", {"perplexity": ["generate"]})
    assert large.gpu_hours == pytest.approx(10 * small.gpu_hours)  # linear in the parameters
    unknown = build_plan("openhaldet", config, "mystery", {"perplexity": ["generate"]})
    assert unknown.gpu_hours is None and "cannot be read from its name" in unknown.notes[0]


def test_a_runs_items_follow_limit_by_dataset() -> None:
    """The explorer loads a cell's items as the run did (`RunConfig.limit_for`), here on the packaged HaluEval QA."""
    from haldet.explorer.data import load_instances

    capped = {"config": {"datasets": ["halueval_qa"], "limit": 5, "limit_by_dataset": {"halueval_qa": 3}}}
    assert len(load_instances(capped, "halueval_qa")) == 3
    other = {"config": {"datasets": ["halueval_qa"], "limit": 5, "limit_by_dataset": {"xsum": 3}}}
    first = load_instances(other, "halueval_qa")
    assert len(first) == 5 and [i.id for i in first[:3]] == [i.id for i in load_instances(capped, "halueval_qa")]


def test_the_plan_counts_the_evaluator_procedure() -> None:
    """The openhaldet preset asks its auxiliary queries as two separate evaluator chats per answer: the plan counts
    their prompts in full (no shared answered chat) and the self-evaluation's reasoning reply."""
    from haldet.papers.plan import AUX_REPLY, EVALUATOR_OVERHEAD, EVALUATOR_REASONING

    config = load_config(None, preset="openhaldet", datasets=["truthfulqa"], detectors=["self_eval"],
                         limit=10)
    plan = build_plan("openhaldet", config, "meta-llama/Llama-3.1-8B-Instruct",
                      {"self_eval": ["generate", "auxiliary"]})
    (target,) = [e for e in plan.endpoints if e.role == "model under test"]
    p, ans = SPLITS["truthfulqa"][1], plan.datasets[0]["answer_tokens"]
    assert target.calls == 10 + 2 * 10  # the answers, then two evaluator chats each
    assert target.prompt_tokens == 10 * p + 2 * 10 * (p + ans + EVALUATOR_OVERHEAD)
    assert target.generated_tokens == 10 * ans + 10 * (AUX_REPLY + EVALUATOR_REASONING)
    assert any("evaluator procedure" in a for a in plan.assumptions)


def test_the_plan_prints_the_measured_gpu_decoding_beside_its_roofline():
    """An 8B model's decoded token under the roofline constants: 2 steps' worth x 2 x 8.03e9 bytes / (3.35e12 x 0.7)
    / 96 rows = 0.1427 ms; the measured H200 figures (3.1 ms greedy, 0.79 ms sampled) stand beside it."""
    from haldet.papers.plan import Assumptions, gpu_seconds

    a = Assumptions()
    assert abs(gpu_seconds(8.03e9, 0, 1, a) - 2 * 2 * 8.03e9 / (3.35e12 * 0.7) / 96) < 1e-12
    first = a.lines()[0]
    assert "3.1 ms a greedy token" in first and "0.79 ms a sampled one" in first and "give 0.14 ms" in first


def test_the_plans_measured_gpu_figures_are_the_stored_benchmarks():
    """MEASURED_8B_H200 is benchmarks/results/gpu.json's haldet throughput (seconds per token, 2 significant
    figures): a re-stored GPU run that moves them fails here until the plan says the same."""
    import json

    from haldet.papers.plan import MEASURED_8B_H200
    from repo_paths import REPO

    runs = json.loads((REPO / "benchmarks" / "results" / "gpu.json").read_text())["data"]["throughput"]
    for key, run in (("greedy", "greedy_haldet"), ("sampling", "sample_k5_haldet")):
        per_token = runs[run]["seconds"] / runs[run]["tokens"]
        assert float(f"{per_token:.2g}") == MEASURED_8B_H200[key], (key, per_token)
