"""`haldet run --executor ray` on a local Ray cluster (skipped without the `ray` extra): the same records and results
as the serial executor on a two-dataset matrix whose evidence stages are split into item shards, and a shard whose
worker is SIGKILLed mid-shard is retried by Ray and computes only what the dead worker had not written.

The target model is the mock OpenAI endpoint (tests/mock_openai.py), so answers are deterministic and cheap and the
test can see which worker process sent which request."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from haldet.config import EndpointConfig, RunConfig, SampleConfig
from mock_openai import FakeOpenAI
from repo_paths import REPO

ray = pytest.importorskip("ray")
psutil = pytest.importorskip("psutil")

STAGES = ("generate", "sample", "auxiliary")
VOLATILE = {"seconds", "shard"}  # wall times differ between runs; HDF5 shard names are random


def content(arg: str, body: dict[str, Any], j: int) -> str:
    """A deterministic reply per prompt: the answer depends on the prompt text, samples on their index."""
    text = " ".join(m["content"] for m in body["messages"])  # a follow-up question comes after the answer
    question = body["messages"][-1]["content"]
    if "one number between 0 and 1" in question:
        return "0.2" if len(text) % 2 else "0.8"
    if "Reply True or False" in question:
        return "True" if len(text) % 3 else "False"
    return f"answer {len(text) % 7} variant {j % 3}"


@pytest.fixture(scope="module")
def cluster() -> Iterator[None]:
    src = str(REPO / "src")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": src, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}})
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def server() -> Iterator[FakeOpenAI]:
    with FakeOpenAI(content=content, default="ok:", hang_seconds=60) as srv:
        yield srv


def config(server: FakeOpenAI, datasets: list[str], limit: int) -> RunConfig:
    return RunConfig(datasets=datasets, models=["openai:mock"], limit=limit,
                     detectors=["perplexity", "lexical_similarity", "verbalized"],
                     sample=SampleConfig(k=2, batch_size=2),
                     endpoint=EndpointConfig(base_url=server.base_url, backoff=0.01, timeout=90, n_samples="n"))


def records(run: Path, stage: str) -> list[dict[str, Any]]:
    out = []
    for path in sorted(run.glob(f"*/*/{stage}.jsonl")):
        out += [{k: v for k, v in json.loads(line).items() if k not in VOLATILE} for line in path.open()]
    return out


def test_ray_equals_serial_on_a_two_dataset_matrix(tmp_path: Path, cluster: None, server: FakeOpenAI,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    import haldet

    monkeypatch.setenv("HALDET_RAY_SHARD_SIZE", "2")  # 4 items per cell -> 2 generate shard tasks per cell
    cfg = config(server, ["halueval_qa", "halueval_dialogue"], limit=4)
    rows_s, _ = haldet.run(cfg, tmp_path / "serial")
    rows_r, cells_r = haldet.run(cfg, tmp_path / "ray", executor="ray")
    assert [c.error for c in cells_r] == ["", ""]
    assert sum(c.counts.get("generate_sharded", 0) for c in cells_r) == 8  # really computed by shard tasks
    for stage in STAGES:
        serial, sharded = records(tmp_path / "serial", stage), records(tmp_path / "ray", stage)
        assert serial and len({r["id"] for r in sharded}) == len(sharded)  # no duplicates
        assert sorted(sharded, key=lambda r: r["id"]) == sorted(serial, key=lambda r: r["id"]), stage
    assert len(records(tmp_path / "ray", "generate")) == 8
    assert [(r["dataset"], r["detector"], r["metric"], r["value"], r["n"]) for r in rows_r] == \
        [(r["dataset"], r["detector"], r["metric"], r["value"], r["n"]) for r in rows_s] and rows_s


def test_a_worker_killed_mid_shard_is_retried_without_duplicates(tmp_path: Path, cluster: None,
                                                                 server: FakeOpenAI,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Shard = 3 items, sample batches of 1 item: the third item's sample request hangs; the worker that sent it is
    killed after the first two items' samples were written. Ray re-runs the shard, which asks only for the third."""
    import haldet
    from haldet.datasets.base import get_adapter
    from haldet.text.prompts import PromptBuilder

    monkeypatch.setenv("HALDET_RAY_SHARD_SIZE", "3")
    cfg = config(server, ["halueval_qa"], limit=6).model_copy(update={"sample": SampleConfig(k=2, batch_size=1)})
    items, _ = get_adapter("halueval_qa", None, None).load(limit=6, seed=42, on_bad_row="fail")
    builder = PromptBuilder(cfg.prompt)
    keys = [builder.messages(inst)[-1]["content"] for inst in items]
    server.reset()
    victim = keys[2]
    server.plans[victim] = ["ok:", "hang", "ok:"]  # generate answers; the first sample request never returns
    killed: list[int] = []

    def kill_the_asker() -> None:
        deadline = time.time() + 120
        while time.time() < deadline and server.calls[victim] < 2:
            time.sleep(0.1)
        port = next(addr[1] for key, addr in reversed(server.clients) if key == victim)
        for conn in psutil.net_connections(kind="tcp"):
            if conn.laddr and conn.laddr.port == port and conn.pid and conn.pid != os.getpid():
                killed.append(conn.pid)
                os.kill(conn.pid, signal.SIGKILL)
                return

    watcher = threading.Thread(target=kill_the_asker, daemon=True)
    watcher.start()
    rows, cells = haldet.run(cfg, tmp_path / "run", executor="ray")
    watcher.join(timeout=5)
    assert killed, "the hanging request's worker was not found"
    assert cells[0].error == "" and rows
    samples = records(tmp_path / "run", "sample")
    assert Counter(r["id"] for r in samples) == Counter({inst.id: 1 for inst in items})  # each once
    # the dead worker's finished items were not asked again; the victim was asked once more after the kill
    assert [server.calls[k] for k in keys[:2]] == [2, 2] and server.calls[victim] == 3
