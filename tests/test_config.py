"""Config: resolution from YAML + flags, hashing, clear errors."""

import pytest

from haldet.config import RunConfig, split_names, stage_key
from haldet.config_files import compose_config
from haldet.errors import HaldetError


def _leaves(data, prefix=()):
    """(path, value) of every leaf setting of a canonical config dict."""
    for key, value in data.items():
        if isinstance(value, dict) and value:
            yield from _leaves(value, (*prefix, key))
        else:
            yield (*prefix, key), value


def _perturbed(value):
    """Another value of the same type (None when there is no obvious one)."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, float):
        return value / 2 if value else 0.5
    if isinstance(value, str):
        return value + "x"
    if isinstance(value, list):
        return [*value, value[-1]] if value else ["x"]
    if isinstance(value, dict):
        return {"x": {}}
    return None


def _set(data, path, value):
    import copy

    out = copy.deepcopy(data)
    node = out
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return out


def settings_the_hash_ignores(hash_of=lambda c: c.hash()):
    """Every leaf setting that changes to a valid other value without changing the hash."""
    from pydantic import ValidationError

    base = RunConfig()
    ignored, tried = [], 0
    for path, value in _leaves(base.canonical()):
        new = _perturbed(value)
        if new is None:
            continue
        try:
            changed = RunConfig.model_validate(_set(base.canonical(), path, new))
        except (ValidationError, ValueError):
            continue  # a constrained setting (enum, range): no generic other value
        if changed.canonical() == base.canonical():
            continue
        tried += 1
        if hash_of(changed) == hash_of(base):
            ignored.append(".".join(path))
    return ignored, tried


def test_hash_covers_every_setting():
    """Each setting, changed on its own to another valid value, changes the hash (and `diff` names it)."""
    assert RunConfig().hash() == RunConfig().hash()
    ignored, tried = settings_the_hash_ignores()
    assert tried >= 30 and ignored == []
    assert RunConfig(limit=201).diff(RunConfig()) == ["limit"]
    assert RunConfig(generation={"batch_size": 2}).diff(RunConfig()) == ["generation.batch_size"]


def test_hash_check_catches_a_hash_that_drops_a_setting():
    """Negative control: a hash that leaves out the generation section is caught, every generation field named."""
    from haldet.config import digest

    ignored, _ = settings_the_hash_ignores(
        lambda c: digest({k: v for k, v in c.canonical().items() if k != "generation"}))
    assert ignored and all(p.startswith("generation.") for p in ignored)


def test_stage_key_covers_every_part():
    assert stage_key("generate", {"m": 1}, "prompt", 64) == stage_key("generate", {"m": 1}, "prompt", 64)
    assert stage_key("generate", {"m": 1}, "prompt", 64) != stage_key("generate", {"m": 1}, "prompt!", 64)
    assert stage_key("generate", {"m": 1}, "prompt", 64) != stage_key("sample", {"m": 1}, "prompt", 64)


def test_yaml_plus_flags(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("datasets: [halueval_qa]\nlimit: 10\ngeneration:\n  max_new_tokens: 12\n")
    cfg = compose_config(path, limit=5, detectors=["perplexity"], generation__batch_size=3)
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
        compose_config(path)
    assert str(path) in info.value.message


def test_unreadable_config(tmp_path):
    with pytest.raises(HaldetError, match="cannot read config file"):
        compose_config(tmp_path / "missing.yaml")
