"""Bad input: one clear message (what, where, what to do), exit code 2, no traceback, nothing lost."""

import json

import pytest


def assert_clean_error(proc, *needles):
    assert proc.returncode == 2, proc.stderr + proc.stdout
    assert "Traceback" not in proc.stderr
    for needle in needles:
        assert needle in proc.stderr, proc.stderr


def test_unknown_dataset_lists_known(cli, tmp_path):
    proc = cli("run", "--dataset", "nope", "--out", str(tmp_path / "r"))
    assert_clean_error(proc, "unknown dataset 'nope'", "halueval_qa")
    assert not (tmp_path / "r").exists()


def test_unknown_detector(cli, tmp_path):
    proc = cli("run", "--detector", "perplexity,bogus", "--out", str(tmp_path / "r"))
    assert_clean_error(proc, "unknown detector 'bogus'", "perplexity")


@pytest.mark.parametrize("model,needle", [
    ("./no/such/dir", "model path does not exist"),
    ("missing.gguf", "GGUF file not found"),
])
def test_unknown_model(cli, tmp_path, model, needle):
    proc = cli("run", "--model", model, "--limit", "2", "--out", str(tmp_path / "r"))
    assert_clean_error(proc, needle, "--model")


def test_unreadable_config(cli, tmp_path):
    bad = tmp_path / "c.yaml"
    bad.write_text("limit: [1,\n")
    assert_clean_error(cli("run", "--config", str(bad)), "not valid YAML", str(bad))
    assert_clean_error(cli("run", "--config", str(tmp_path / "none.yaml")), "cannot read config file")


def test_out_dir_with_other_config_is_refused_and_untouched(cli, tmp_path):
    out = tmp_path / "r"
    out.mkdir()
    manifest = {"config": {"limit": 7}, "config_hash": "x"}
    (out / "manifest.json").write_text(json.dumps(manifest))
    proc = cli("run", "--limit", "3", "--out", str(out))
    assert_clean_error(proc, "different config", "limit", "--update")
    assert json.loads((out / "manifest.json").read_text()) == manifest


def test_version_and_help(cli):
    assert cli("--version").stdout.startswith("haldet ")
    helptext = cli("run", "--help").stdout
    for flag in ("--dataset", "--model", "--detector", "--limit", "--out", "--config"):
        assert flag in helptext
