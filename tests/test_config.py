"""Config: resolution from YAML + flags, hashing, clear errors."""

import pytest

from haldet.config import RunConfig, load_config, split_names, stage_key
from haldet.errors import HaldetError


def test_hash_is_stable_and_sensitive(tmp_path):
    a, b = RunConfig(), RunConfig()
    assert a.hash() == b.hash()
    assert RunConfig(limit=201).hash() != a.hash()
    assert RunConfig(generation={"max_new_tokens": 65}).hash() != a.hash()
    assert RunConfig(prompt={"n_shots": 1}).hash() != a.hash()
    assert RunConfig(detector_params={"perplexity": {"nll_cap": 40}}).hash() != a.hash()
    assert RunConfig(limit=201).diff(a) == ["limit"]
    assert RunConfig(generation={"batch_size": 2}).diff(a) == ["generation.batch_size"]


def test_stage_key_covers_every_part():
    assert stage_key("generate", {"m": 1}, "prompt", 64) == stage_key("generate", {"m": 1}, "prompt", 64)
    assert stage_key("generate", {"m": 1}, "prompt", 64) != stage_key("generate", {"m": 1}, "prompt!", 64)
    assert stage_key("generate", {"m": 1}, "prompt", 64) != stage_key("sample", {"m": 1}, "prompt", 64)


def test_yaml_plus_flags(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("datasets: [halueval_qa]\nlimit: 10\ngeneration:\n  max_new_tokens: 12\n")
    cfg = load_config(path, limit=5, detectors=["perplexity"], generation__batch_size=3)
    assert (cfg.limit, cfg.generation.max_new_tokens, cfg.generation.batch_size) == (5, 12, 3)
    assert cfg.detectors == ["perplexity"]


def test_split_names_accepts_repeats_and_commas():
    assert split_names(["a,b", "c", " d , "]) == ["a", "b", "c", "d"]
    assert split_names(None) == []


@pytest.mark.parametrize("text,match", [
    ("limit: [oops", "not valid YAML"),
    ("generaton:\n  max_new_tokens: 3\n", "generaton"),
    ("limit: -3\n", "limit"),
    ("- a\n- b\n", "mapping"),
])
def test_bad_config_files_name_the_problem(tmp_path, text, match):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(HaldetError, match=match) as info:
        load_config(path)
    assert str(path) in info.value.message


def test_unreadable_config(tmp_path):
    with pytest.raises(HaldetError, match="cannot read config file"):
        load_config(tmp_path / "missing.yaml")
