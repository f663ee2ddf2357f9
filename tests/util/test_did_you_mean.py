"""Every unknown name or setting suggests the closest known one, and a misspelt model alias is refused before any
hub access (no offline retries)."""

from __future__ import annotations

from pathlib import Path

import pytest

from haldet.config_files import compose_config
from haldet.errors import HaldetError, did_you_mean


def test_did_you_mean_picks_close_names_only() -> None:
    assert did_you_mean("perplexty", ["perplexity", "saplma"]) == "did you mean 'perplexity'?"
    assert did_you_mean("zzz", ["perplexity", "saplma"]) == ""


@pytest.mark.parametrize("kwargs,needle", [
    ({"datasets": ["halueval_q"]}, "unknown dataset 'halueval_q'; did you mean 'halueval_qa'"),
    ({"detectors": ["perplexty"]}, "unknown detector 'perplexty'; did you mean 'perplexity'?"),
    ({"suite": "verigrey"}, "unknown suite 'verigrey'; did you mean 'verigray'?"),
    ({"models": ["smollm2-135"]}, "unknown model alias 'smollm2-135'; did you mean 'smollm2-135m'?"),
])
def test_unknown_names_suggest_before_any_work(kwargs: dict, needle: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import transformers  # a misspelt alias must be caught before anything asks the hub

    from haldet.flow.run import validate_names

    def no_hub(*args: object, **kw: object) -> None:
        raise AssertionError("the hub was asked for a misspelt alias")

    monkeypatch.setattr(transformers.AutoConfig, "from_pretrained", no_hub)
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", no_hub)
    with pytest.raises(HaldetError) as err:
        validate_names(compose_config(None, **kwargs))
    assert needle in err.value.message


def test_model_alias_check_lets_hub_ids_and_paths_through(tmp_path: Path) -> None:
    from haldet.util.assets import check_alias

    for name in ("gpt2", "HuggingFaceTB/SmolLM2-135M-Instruct", "smollm2-135m", str(tmp_path)):
        check_alias(name)                                         # no error: not a misspelt alias


@pytest.mark.parametrize("kwargs,needle", [
    ({"judge__kind": "cascde"}, "did you mean 'cascade'?"),
    ({"generation__max_new_token": 3}, "'generation.max_new_token': Extra inputs are not permitted; did you mean "
                                       "'max_new_tokens'"),
    ({"limt": 3}, "did you mean 'limit'?"),
])
def test_config_key_and_choice_suggestions(kwargs: dict, needle: str) -> None:
    with pytest.raises(HaldetError) as err:
        compose_config(None, **kwargs)
    assert needle in err.value.message


def test_dataset_option_and_detector_parameter_suggestions() -> None:
    from haldet.datasets.base import get_adapter
    from haldet.detectors.base import DETECTORS

    with pytest.raises(HaldetError, match="'spilt': did you mean 'split'"):
        get_adapter("halueval_qa", None, {"spilt": "test"})
    with pytest.raises(ValueError, match="'aggregte': did you mean 'aggregate'"):
        DETECTORS.get("likelihood")(aggregte="mean")
