"""`haldet run --executor ray --ray-address ...` on a real multi-node Ray cluster on this machine
(haldet.testing.ray_cluster: `ray start --head`, worker nodes joined with `ray start --address`, each its own raylet
process): two GPU worker nodes declaring logical GPUs (`--num-gpus 2`, standing in for real ones; 1 CPU each) and
one CPU-only worker node with 4 CPUs (the most attractive node for any task that did not ask for a GPU). The run
uses `--device cuda`, so every cell and shard task asks for `num_gpus=1` and may only land on the GPU nodes. The
target model is the mock OpenAI endpoint (tests/mock_openai.py), so answers are deterministic.

Checks, printed as JSON (`ok` is true when all hold):
  - `equal_to_serial`: every generate/sample/auxiliary record and every result row of the Ray run equals the serial
    run's, item for item, each item exactly once;
  - `node_killed`: one item's sample request hangs; the GPU worker node whose process sent it is killed (its raylet
    and every process under it, SIGKILL) while the shard waits; the shard re-runs on the other GPU node, which asks
    only for what the dead node had not written (`victim_requests`: 3 = answer, the hung sample request, the
    retried one), nothing duplicated, nothing lost;
  - `gpu_placement`: no request ever came from the CPU-only node.
Also: seconds to start the cluster, serial and Ray run seconds. Usage:
  python benchmarks/ray_cluster.py [--items 12] [--shard-size 3] [--port 6390]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
STAGES = ("generate", "sample", "auxiliary")
VOLATILE = {"seconds", "shard"}  # wall times differ between runs; HDF5 shard names are random
DATASET = "halueval_qa"


def content(arg: str, body: dict[str, Any], j: int) -> str:
    """A deterministic reply per prompt: the answer depends on the prompt text, samples on their index."""
    text = " ".join(m["content"] for m in body["messages"])
    question = body["messages"][-1]["content"]
    if "one number between 0 and 1" in question:
        return "0.2" if len(text) % 2 else "0.8"
    return f"answer {len(text) % 7} variant {j % 3}"


def records(run: Path, stage: str) -> list[dict[str, Any]]:
    out = []
    for path in sorted(run.glob(f"*/*/{stage}.jsonl")):
        out += [{k: v for k, v in json.loads(line).items() if k not in VOLATILE} for line in path.open()]
    return out


def rows_of(run: Path) -> list[tuple[Any, ...]]:
    rows = json.loads((run / "results.json").read_text())
    return [(r["dataset"], r["detector"], r["metric"], r["value"], r["n"]) for r in rows]


def check(items: int = 12, shard_size: int = 3, port: int = 6390, workdir: Path | None = None) -> dict[str, Any]:
    """Start the cluster, run serial and Ray, kill a GPU node mid-shard; returns the measurements and checks."""
    import psutil

    from haldet.config import EndpointConfig, RunConfig, SampleConfig
    from haldet.datasets.base import get_adapter
    from haldet.testing.ray_cluster import LocalCluster
    from haldet.text.prompts import PromptBuilder
    from mock_openai import FakeOpenAI

    tmp = Path(workdir or tempfile.mkdtemp(prefix="haldet-ray-bench-"))
    env = {"PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    out: dict[str, Any] = {"items": items, "shard_size": shard_size}
    with FakeOpenAI(content=content, default="ok:", hang_seconds=120) as server:
        cfg = RunConfig(datasets=[DATASET], models=["openai:mock"], limit=items,
                        detectors=["perplexity", "lexical_similarity", "verbalized"],
                        sample=SampleConfig(k=2, batch_size=1),
                        endpoint=EndpointConfig(base_url=server.base_url, backoff=0.01, timeout=150, n_samples="n"))
        (tmp / "config.json").write_text(json.dumps(cfg.canonical()))
        import haldet as pipeline

        start = time.perf_counter()
        pipeline.run(cfg, tmp / "serial")
        out["serial_run_s"] = round(time.perf_counter() - start, 2)
        inputs, _ = get_adapter(DATASET, None, None).load(limit=items, seed=42, on_bad_row="fail")
        keys = [PromptBuilder(cfg.prompt).messages(inst)[-1]["content"] for inst in inputs]
        victim = keys[shard_size + 1]  # the second item of the second shard
        server.reset()
        server.plans[victim] = ["ok:", "hang", "ok:"]  # its answer; its first sample request never returns

        start = time.perf_counter()
        with LocalCluster([(1, 2), (1, 2), (4, 0)], port=port, env=env) as cluster:
            out["cluster_start_s"] = round(time.perf_counter() - start, 2)
            gpu_nodes, cpu_node = cluster.workers[:2], cluster.workers[2]
            seen: Counter[str] = Counter()
            killed: dict[str, Any] = {}
            done = threading.Event()

            def watch() -> None:
                """Which node each request comes from (the client's process, by its TCP port); kill the node
                that sent the hanging request once it waits."""
                server_port = int(server.base_url.rsplit(":", 1)[1].split("/")[0])
                while not done.is_set():
                    for conn in psutil.net_connections(kind="tcp"):
                        if conn.raddr and conn.raddr.port == server_port and conn.pid and conn.pid != os.getpid():
                            node = cluster.raylet_of(conn.pid)
                            if node is not None:
                                seen[node.name] += 1
                    if not killed and server.calls[victim] >= 2:
                        port_of_asker = next(a[1] for k, a in reversed(server.clients) if k == victim)
                        pid = next((c.pid for c in psutil.net_connections(kind="tcp")
                                    if c.laddr and c.laddr.port == port_of_asker and c.pid), None)
                        node = cluster.raylet_of(pid) if pid else None
                        if node is not None:
                            killed.update(node=node.name, pids=cluster.kill_node(node), at=time.perf_counter())
                    time.sleep(0.2)

            watcher = threading.Thread(target=watch, daemon=True)
            watcher.start()
            start = time.perf_counter()
            proc = subprocess.run([sys.executable, "-m", "haldet", "run", "--config", str(tmp / "config.json"),
                                   "--out", str(tmp / "ray"), "--executor", "ray", "--ray-address", cluster.address,
                                   "--device", "cuda"],
                                  capture_output=True, text=True, timeout=900,
                                  env={**cluster.env, "HALDET_RAY_SHARD_SIZE": str(shard_size)})
            out["ray_run_s"] = round(time.perf_counter() - start, 2)
            done.set()
            watcher.join(timeout=5)
        out["ray_exit_status"] = proc.returncode
        out["ray_log_tail"] = (proc.stdout + proc.stderr)[-1500:]
        out["victim_requests"] = server.calls[victim]
    equal = {}
    for stage in STAGES:
        serial, ray_run = records(tmp / "serial", stage), records(tmp / "ray", stage)
        once = Counter(r["id"] for r in ray_run) == Counter({inst.id: 1 for inst in inputs})
        equal[stage] = once and sorted(ray_run, key=lambda r: r["id"]) == sorted(serial, key=lambda r: r["id"])
    equal["results"] = (tmp / "ray" / "results.json").exists() and rows_of(tmp / "ray") == rows_of(tmp / "serial")
    manifest = json.loads((tmp / "ray" / "manifest.json").read_text()) if (tmp / "ray" / "manifest.json").exists() \
        else {}
    computed = (manifest.get("cells") or [{}])[0].get("computed") or {}
    out.update(equal_to_serial=equal, sharded=computed,
               node_killed={"node": killed.get("node"), "processes": len(killed.get("pids", []))},
               requests_by_node=dict(seen),
               gpu_placement=seen.get(cpu_node.name, 0) == 0 and any(seen.get(n.name) for n in gpu_nodes))
    out["ok"] = (proc.returncode == 0 and all(equal.values()) and bool(killed) and out["victim_requests"] == 3
                 and out["gpu_placement"])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--items", type=int, default=12)
    parser.add_argument("--shard-size", type=int, default=3)
    parser.add_argument("--port", type=int, default=6390)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="haldet-ray-bench-") as tmp:
        result = check(args.items, args.shard_size, args.port, Path(tmp))
    result.update(cpu_count=os.cpu_count(), loadavg=os.getloadavg(), python=sys.version.split()[0])
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
