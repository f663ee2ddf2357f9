"""Paper presets (`haldet.presets`): each loads and validates with the paper's values, `presets show` round-trips,
the config file and the flags override a preset key by key; the never-ranked `auroc_max_orientation` row; the
suites' evaluation scope (`evaluate_on`)."""

from __future__ import annotations

from pathlib import Path

import pytest

import haldet.flow.cell
from haldet.cli.presets import resolved_yaml
from haldet.cli.run import RunOptions, run_config
from haldet.config import RunConfig
from haldet.detectors.base import DETECTORS
from haldet.errors import HaldetError
from haldet.evaluation.aggregate import backbone_summary, cost_table, dataset_table, scenario_table
from haldet.evaluation.metrics import MAX_ORIENTATION, MAX_ORIENTATION_NOTE, MetricValue
from haldet.flow.layers import load_config
from haldet.flow.protocol import SuiteProcedure
from haldet.flow.results import result_rows
from haldet.flow.scoring import DetectorRun, make_detector
from haldet.presets import load_preset, preset_names
from haldet.report.tables import all_markdown, table_cells
from haldet.suites.base import get_suite
from terminal_table import results_table

PAPERS = ("halluentity", "hallulens", "openhaldet", "triviaplus", "verigray")


@pytest.mark.parametrize("name", PAPERS)
def test_each_preset_loads_and_validates(name: str) -> None:
    assert tuple(preset_names()) == PAPERS
    config = load_config(None, preset=name)
    preset = load_preset(name)
    # the paper by title (an arXiv id where its text gives one), never a path outside the package
    assert config.preset == name and len(preset.hash) == 16 and "seeds/" not in preset.paper and ":" in preset.paper
    for det in config.detectors:  # every named detector exists and takes every parameter the preset gives it
        make_detector(det, config)
    assert set(config.detector_params) <= set(config.detectors), "parameters for a detector the preset does not run"
    if config.suite:
        get_suite(config.suite).options(config)  # suite options are known ones
        assert set(get_suite(config.suite).datasets) == set(config.datasets)


def test_presets_hold_the_papers_values() -> None:
    oh = load_config(None, preset="openhaldet")
    assert oh.judge.kind == "llm" and oh.judge.few_shot and oh.report.max_orientation
    assert (oh.sample.k, oh.sample.temperature, oh.sample.top_p) == (5, 1.0, 0.9)
    variants = {n: p.get("variant") for n, p in oh.detector_params.items() if "variant" in p}
    # E.1-E.3: the queries are separate evaluator chats, self-evaluation read at the Correct/Incorrect decision
    assert (oh.auxiliary.procedure, oh.auxiliary.evaluator_max_new_tokens) == ("evaluator", 2048)
    assert variants == {"verbalized": "paper", "self_eval": "decision", "selfcheck_nli": "paper", "sep": "accuracy",
                        "mind": "paper", "ln_entropy": "paper", "haloscope": "label_guided"}
    assert oh.detector_params["prism"]["checkpoint_on"] == "internal" and oh.evaluation.evaluate_on == "test"
    assert oh.detector_params["saplma"]["pooling"] == "mean" and oh.chat_template_kwargs == {"enable_thinking": False}
    he = load_config(None, preset="halluentity")
    assert he.evaluation.evaluate_on == "all" and he.limit is None and he.tokens.top_k == 10
    assert he.detector_params["ccp"]["nli_model"] == "microsoft/deberta-base-mnli"
    # Focus's IDF over 1M RedPajama documents, streamed from the hub (section 4)
    assert (he.detector_params["focus"]["idf_corpus"], he.detector_params["focus"]["idf_documents"]) == (
        "hf:togethercomputer/RedPajama-Data-1T-Sample", 1_000_000)
    vg = load_config(None, preset="verigray")
    assert vg.evaluation.evaluate_on == "all" and vg.verdict.temperature == 0.6
    params = vg.detector_params
    assert (params["llmcheck_hidden"]["layer"], params["llmcheck_attention"]["layer"]) == (20, 21)
    assert (params["llmcheck_hidden"]["threshold"], params["llmcheck_attention"]["threshold"]) == (6.3, -174.0)
    assert (params["ccp"]["aggregate"], params["ccp"]["threshold"]) == ("claim", -0.001)
    tp = load_config(None, preset="triviaplus")
    assert (tp.sample.k, tp.sample.temperature) == (3, 1.0)
    assert tp.detector_params["selfcheck_nli"] == {"variant": "selfcheckgpt",
                                                   "nli_model": "potsawee/deberta-v3-large-mnli"}
    # the judges' own window and think-first reply budget: the preset's over the suite's own 256-token setting
    assert (tp.verdict.context_window, tp.verdict.context_unit, tp.verdict.max_new_tokens) == (200000, "tokens", 1024)
    assert get_suite("triviaplus").config_base()["verdict"] == {"max_new_tokens": 256}
    assert load_preset("hallulens").hallulens_commands["build"]["trials"] == 3


@pytest.mark.parametrize("name", PAPERS)
def test_presets_show_round_trips(name: str, tmp_path: Path) -> None:
    shown = tmp_path / f"{name}.yaml"
    shown.write_text(resolved_yaml(name))
    assert shown.read_text().startswith(f"# preset {name} (hash {load_preset(name).hash}")
    from_file = load_config(shown)
    assert from_file.preset is None  # an edited copy is the user's own config
    assert from_file.model_copy(update={"preset": name}) == load_config(None, preset=name)


def test_flags_and_config_file_override_a_preset_key_by_key(tmp_path: Path) -> None:
    file = tmp_path / "mine.yaml"
    file.write_text("sample: {k: 7}\ndetector_params:\n  prism: {layer: 5}\n")
    config = run_config(RunOptions(preset="openhaldet", config_file=file, judge="rule", detector=["prism"]))
    assert config.judge.kind == "rule" and config.detectors == ["prism"]  # flags win
    assert config.sample.k == 7 and config.sample.top_p == 0.9  # the file wins where it speaks, nowhere else
    assert config.detector_params["prism"] == {**load_preset("openhaldet").settings["detector_params"]["prism"],
                                               "layer": 5}
    assert config.detector_params["verbalized"] == {"variant": "paper"}
    # a preset named in the config file applies the same way
    file.write_text("preset: verigray\nverdict: {temperature: 0.0}\n")
    named = run_config(RunOptions(config_file=file))
    assert named.preset == "verigray" and named.suite == "verigray" and named.verdict.temperature == 0.0
    assert named.detector_params["llmcheck_hidden"] == {"layer": 20, "threshold": 6.3, "direction": "above"}


def test_unknown_preset_and_suite_conflict_are_one_clear_error() -> None:
    with pytest.raises(HaldetError, match="unknown preset 'openhaldt'") as bad:
        run_config(RunOptions(preset="openhaldt"))
    assert "openhaldet" in (bad.value.hint or "")
    with pytest.raises(HaldetError, match="made for suite 'verigray'"):
        run_config(RunOptions(preset="verigray", suite="halluentity"))


# --- the orientation column --------------------------------------------------------------------------------------
def _cell(dataset: str, aurocs: dict[str, float]) -> haldet.flow.cell.CellResult:
    cell = haldet.flow.cell.CellResult(dataset=dataset, scenario="qa_open", model="m")
    for name, value in aurocs.items():
        run = DetectorRun(name=name, family=str(DETECTORS.get(name).family()), n_scored=10)
        run.metrics = [MetricValue("auroc", value, value - 0.1, value + 0.1, 10, 4, 1.0)]
        cell.detectors.append(run)
    return cell


def test_max_orientation_row_only_when_asked() -> None:
    cell = _cell("halueval_qa", {"perplexity": 0.3, "self_eval": 0.6})
    assert all(r["metric"] == "auroc" and r["scope"] == "test" for r in result_rows(cell))
    rows = result_rows(cell, max_orientation=True)
    oriented = {r["detector"]: r for r in rows if r["metric"] == MAX_ORIENTATION}
    assert oriented["perplexity"]["value"] == pytest.approx(0.7) and oriented["self_eval"]["value"] == 0.6
    assert oriented["perplexity"]["ci_low"] is None and oriented["perplexity"]["note"] == MAX_ORIENTATION_NOTE
    honest = {r["detector"]: r["value"] for r in rows if r["metric"] == "auroc"}
    assert honest == {"perplexity": 0.3, "self_eval": 0.6}  # the honest AUROC is untouched


def test_max_orientation_never_ranked_bolded_or_aggregated() -> None:
    """Negative control: perplexity's oriented 0.8 would beat self_eval's 0.6; the honest 0.2 must not."""
    plain = [r for c in (_cell("halueval_qa", {"perplexity": 0.2, "self_eval": 0.6}),)
             for r in result_rows(c)]
    both = [r for c in (_cell("halueval_qa", {"perplexity": 0.2, "self_eval": 0.6}),)
            for r in result_rows(c, max_orientation=True)]
    for make in (scenario_table, dataset_table):
        assert table_cells(make(both), str, "")[0] == table_cells(make(plain), str, "")[0]
        assert [c[3] for c in table_cells(make(both), lambda s: f"**{s}**", "")] == [
            c[3] for c in table_cells(make(plain), lambda s: f"**{s}**", "")]
        with pytest.raises(ValueError, match="never ranked"):
            make(both, MAX_ORIENTATION)
    assert backbone_summary(both)[0]["best_detector"] == "self_eval"
    for refuse in (backbone_summary, cost_table):
        with pytest.raises(ValueError, match="never ranked"):
            refuse(both, MAX_ORIENTATION)
    md = all_markdown(both, header=["preset openhaldet (hash x)"])
    assert md.startswith("preset openhaldet (hash x)")
    oriented = md[md.index("**AUROC oriented on the test labels**"):]
    assert "| m | halueval_qa | perplexity | 20.00 | 80.00 |" in oriented and "**80.00**" not in oriented
    assert MAX_ORIENTATION_NOTE in oriented
    assert "oriented on the test labels" not in all_markdown(plain)
    from rich.console import Console

    console = Console(width=200, record=True)
    console.print(results_table(both))
    text = console.export_text()
    assert "max-or.*" in text and MAX_ORIENTATION_NOTE in text
    console = Console(width=200, record=True)
    console.print(results_table(plain))
    assert "max-or." not in console.export_text()


# --- evaluation scope ---------------------------------------------------------------------------------------------
def test_scope_all_scores_training_free_detectors_everywhere_and_trained_ones_on_test() -> None:
    config = RunConfig(suite="halluentity", evaluation={"evaluate_on": "all"})
    protocol = SuiteProcedure(config, get_suite("halluentity"))
    free, trained = make_detector("likelihood", config), make_detector("saplma", config)
    assert protocol.scope(free) == "all" and protocol.parts_scored(free) == ("train", "val", "test")
    assert protocol.scope(trained) == "test" and protocol.parts_scored(trained) == ("val", "test")
    test_only = SuiteProcedure(RunConfig(suite="halluentity"), get_suite("halluentity"))
    assert test_only.scope(free) == "test" and test_only.parts_scored(free) == ("val", "test")


def test_hallulens_commands_take_preset_defaults_under_the_flags() -> None:
    import typer

    from haldet.suites.hallulens import commands as hallulens

    group = typer.main.get_command(hallulens.app)
    build = group.commands["build"]  # type: ignore[attr-defined]
    ctx = build.make_context("build", ["--out", "x", "--trials", "2", "--preset", "hallulens"])
    given = hallulens.preset_defaults(ctx, "hallulens", "build")
    assert given == {"qa_size": 5000, "long_size": 250, "generated": "300,300,50"}  # --trials 2 was given: it wins
    evaluate = group.commands["evaluate"]  # type: ignore[attr-defined]
    ctx = evaluate.make_context("evaluate", ["--set", "s", "--out", "o", "--model", "m"])
    assert hallulens.preset_defaults(ctx, "hallulens", "evaluate") == {"k": 32, "judges": "llm"}  # the paper's judges
    assert hallulens.preset_defaults(ctx, None, "evaluate") == {}
