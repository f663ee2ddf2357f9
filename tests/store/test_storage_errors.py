"""The run directory under hostile conditions: a read-only or full disk gives one message (no traceback, nothing
written lost), a damaged HDF5 shard is found and recomputed, a failed run says so in its manifest, and temporary
files left by a killed writer are removed on the next run."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conftest import run_cli
from haldet.config import RunConfig
from haldet.schema import Instance
from haldet.stages.base import CellContext, Item, Stage
from haldet.store import CellStore, RunStore, clean_stale_temps, temp_path
from haldet.util import locking

RUN_ARGS = ("run", "--dataset", "halueval_qa", "--limit", "3", "--detector", "perplexity")


def _tmpfs(path: Path, options: str) -> Iterator[Path]:
    """A small tmpfs mounted at `path` (root only); skips the test where mounting is not permitted."""
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root")
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)], capture_output=True)
    if res.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {res.stderr.decode().strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


@pytest.fixture
def full_disk(tmp_path: Path) -> Iterator[Path]:
    yield from _tmpfs(tmp_path / "full", "size=256k")


def _existing_run(root: Path) -> dict[str, bytes]:
    """A run directory as an earlier `haldet run` (same config as RUN_ARGS) left it; returns its files' bytes."""
    config = RunConfig(datasets=["halueval_qa"], limit=3, detectors=["perplexity"],
                       evaluation={"min_per_class": 0})  # as run_cli's tiny runs set it
    RunStore(root).write_manifest({"config": config.canonical(), "config_hash": config.hash(), "status": "done"})
    cell = RunStore(root).cell("halueval_qa", "smollm2-135m")
    cell.log("generate").append([{"id": f"halueval_qa/x/{i}", "key": "k", "response": "r"} for i in range(3)])
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def _assert_one_message(res: subprocess.CompletedProcess[str], *words: str) -> None:
    assert res.returncode == 2, res.stderr[-2000:]
    assert "Traceback" not in res.stderr and "error:" in res.stderr
    for word in words:
        assert word in res.stderr, res.stderr[-2000:]


def test_full_disk_is_one_message_and_loses_nothing(full_disk: Path) -> None:
    run_dir = full_disk / "run"
    before = _existing_run(run_dir)
    fd = os.open(full_disk / "filler", os.O_WRONLY | os.O_CREAT)
    try:  # fill the tmpfs to the last byte
        while os.write(fd, b"\0" * 512):
            pass
    except OSError:
        pass
    finally:
        os.close(fd)
    res = run_cli(*RUN_ARGS, "--out", str(run_dir))
    _assert_one_message(res, "disk is full", str(run_dir))
    after = {str(p.relative_to(run_dir)): p.read_bytes() for p in run_dir.rglob("*") if p.is_file()
             and not p.name.endswith(".lock")}
    assert after == before  # the manifest and the records are untouched, and no temporary file is left


@pytest.fixture
def read_only_dir(tmp_path: Path) -> Iterator[Path]:
    """A directory nobody may write to: a read-only tmpfs for root (who writes through permission bits), else
    mode 555."""
    if os.geteuid() == 0:
        yield from _tmpfs(tmp_path / "ro", "size=64k,ro")
        return
    path = tmp_path / "ro"
    path.mkdir()
    path.chmod(0o555)
    yield path
    path.chmod(0o755)


def test_read_only_out_is_one_message(read_only_dir: Path) -> None:
    res = run_cli(*RUN_ARGS, "--out", str(read_only_dir / "run"))
    _assert_one_message(res, "read-only" if os.geteuid() == 0 else "permission denied", str(read_only_dir))


class ArrayStage(Stage):
    """A stage that stores one small array per item in HDF5 shards of two items, like `features`."""

    name = "arrays"

    def key(self, item: Item) -> str:
        return "k1"

    def items_per_batch(self) -> int:
        return 2

    def compute(self, batch: list[Item]) -> list[dict[str, Any]]:
        shard = self.ctx.store.arrays(self.name).write({i.id: {"v": np.full(4, float(i.id[-1]))} for i in batch})
        return [{"id": i.id, "shard": shard, "arrays": {"v": [4]}} for i in batch]


def test_damaged_shard_is_detected_invalidated_and_recomputed(tmp_path: Path, monkeypatch: Any) -> None:
    items = [Item(instance=Instance(id=f"t/x/{i}", dataset="t", scenario="qa_open", task_type="short_answer",
                                    question="q"), prompt="p") for i in range(6)]
    ctx = CellContext(config=RunConfig(), dataset="t", model="m", store=CellStore(tmp_path),
                      backend_factory=lambda: None)  # type: ignore[arg-type,return-value]
    ArrayStage(ctx).ensure(items)
    shards = sorted((tmp_path / "arrays").glob("*.h5"))
    assert len(shards) == 3
    victim = json.loads((tmp_path / "arrays.jsonl").read_text().splitlines()[2])["shard"]  # items 2 and 3
    path = tmp_path / "arrays" / victim
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])  # a truncated copy, as a full disk or a killed copy leaves it

    messages: list[str] = []
    monkeypatch.setattr(locking, "notify", messages.append)
    ctx.counts.clear()
    records = ArrayStage(ctx).ensure(items)
    assert ctx.counts["arrays_damaged"] == 2 and ctx.counts["arrays_computed"] == 2
    assert len(messages) == 1 and victim in messages[0] and "damaged" in messages[0]
    assert (tmp_path / "arrays" / f"{victim}.damaged").exists() and not path.exists()
    ids = Counter(json.loads(line)["id"] for line in (tmp_path / "arrays.jsonl").read_text().splitlines())
    assert set(ids.values()) == {1} and len(ids) == 6  # the damaged records are gone, each item once
    store = ctx.store.arrays("arrays")
    assert [float(store.read(records[f"t/x/{i}"]["shard"], f"t/x/{i}", "v")[0]) for i in range(6)] == list(range(6))

    ctx.counts.clear()
    ArrayStage(ctx).ensure(items)  # sound again: nothing recomputed, nothing reported
    assert ctx.counts.get("arrays_damaged", 0) == 0 and ctx.counts["arrays_computed"] == 0 and len(messages) == 1


def test_failed_run_is_recorded_in_the_manifest(tmp_path: Path, monkeypatch: Any) -> None:
    import haldet
    import haldet.flow.cell

    def boom(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("model exploded")

    monkeypatch.setattr(haldet.flow.cell, "run_cell", boom)
    config = RunConfig(datasets=["halueval_qa"], detectors=["perplexity"], limit=2)
    with pytest.raises(RuntimeError):
        haldet.run(config, tmp_path / "run")
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["status"] == "failed" and manifest["error"] == "RuntimeError: model exploded"

    monkeypatch.setattr(haldet.flow.cell, "run_cell", lambda *a, **k: (_ for _ in ()).throw(KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):
        haldet.run(config, tmp_path / "run")
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["status"] == "failed" and manifest["error"].startswith("interrupted")


def test_stale_temp_files_are_removed_but_writes_in_flight_kept(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead = int(done.stdout)
    (tmp_path / "cell").mkdir()
    legacy = tmp_path / ".report.html.k2j4h1.tmp"  # named by an older haldet (no pid)
    killed = tmp_path / "cell" / f".generate.jsonl.{dead}-0a1b2c3d.tmp"
    live = temp_path(tmp_path / "manifest.json")  # this process: a write in flight
    keep = tmp_path / "cell" / "notes.tmp"  # not a hidden temp of an atomic write
    for p in (legacy, killed, live, keep):
        p.write_text("x")
    removed = clean_stale_temps(tmp_path)
    assert sorted(removed) == sorted([legacy, killed])
    assert live.exists() and keep.exists() and not legacy.exists() and not killed.exists()


@pytest.mark.slow
def test_sigterm_mid_run_is_recorded_as_failed(tmp_path: Path) -> None:
    import signal
    import time

    from conftest import haldet_cmd

    run_dir = tmp_path / "run"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    proc = subprocess.Popen(haldet_cmd(*RUN_ARGS, "--out", str(run_dir)), env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    manifest = run_dir / "manifest.json"
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None and not (
            manifest.exists() and json.loads(manifest.read_text()).get("status") == "running"):
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130 and "Traceback" not in err, err[-2000:]
    recorded = json.loads(manifest.read_text())
    assert recorded["status"] == "failed" and recorded["error"].startswith("interrupted")
