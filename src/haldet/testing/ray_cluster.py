"""A real multi-node Ray cluster on one machine, for the multi-node test and benchmark: `ray start --head` and
worker nodes joined with `ray start --address`, each node its own raylet process with its own declared resources
(logical GPUs via `--num-gpus` stand in for real ones: Ray schedules on the declared count, so a task asking for
`num_gpus=1` lands only on a node that declared one). A node can be killed (its raylet and every worker process
under it, SIGKILL), as a machine that dies would be.

Every process of the cluster carries the cluster's own temp dir on its command line, so `stop` ends exactly
these processes and nothing else on the machine (never `ray stop`, which ends every Ray on the machine). Its
nodes and drivers (`env`) run without token authentication and never read `~/.ray/auth_token` (which a local
`ray.init` elsewhere on the machine may have written, and which made `ray start --address` fail to join).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

OBJECT_STORE_BYTES = 100_000_000  # the smallest Ray accepts comfortably; the tasks pass configs and ids only


@dataclass
class Node:
    name: str
    node_manager_port: int
    cpus: int
    gpus: int
    resources: dict[str, float] = field(default_factory=dict)
    alive: bool = True


class LocalCluster:
    """`with LocalCluster([(cpus, gpus), ...]) as c:` starts a head (no CPUs or GPUs for tasks: it only
    coordinates) and one worker node per entry; `c.address` is what `--ray-address` takes."""

    def __init__(self, workers: list[tuple[int, int]], *, port: int = 6390, env: dict[str, str] | None = None):
        self.port = port
        self.temp_dir = Path(tempfile.mkdtemp(prefix="haldet-ray-"))
        self.env = {**os.environ, **(env or {}), "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled",
                    "RAY_AUTH_TOKEN_PATH": str(self.temp_dir / "no_auth_token")}
        self.ray = str(Path(sys.executable).with_name("ray"))
        self.head = Node("head", port + 1, 0, 0)
        self.workers = [Node(f"worker{i}", port + 2 + i, c, g, {f"node_worker{i}": 1.0})
                        for i, (c, g) in enumerate(workers)]

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def __enter__(self) -> LocalCluster:
        try:
            self._start(self.head, ["--head", "--port", str(self.port), "--include-dashboard", "false"])
            for node in self.workers:
                self._start(node, ["--address", self.address])
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _start(self, node: Node, args: list[str]) -> None:
        import json

        cmd = [self.ray, "start", *args, "--num-cpus", str(node.cpus), "--num-gpus", str(node.gpus),
               "--node-manager-port", str(node.node_manager_port), "--object-store-memory",
               str(OBJECT_STORE_BYTES), "--temp-dir", str(self.temp_dir), "--disable-usage-stats"]
        if node.resources:
            cmd += ["--resources", json.dumps(node.resources)]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=self.env, timeout=180)
        if proc.returncode:
            raise RuntimeError(f"`{' '.join(cmd)}` failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")

    def processes(self) -> list[Any]:
        """Every process of this cluster (its temp dir on the command line, or a child of its raylets)."""
        import psutil

        mine = set()
        for proc in psutil.process_iter(["pid", "cmdline"]):
            if any(str(self.temp_dir) in part for part in proc.info["cmdline"] or []):
                mine.add(proc.pid)
                with contextlib.suppress(psutil.Error):
                    mine.update(c.pid for c in proc.children(recursive=True))
        return [psutil.Process(p) for p in mine if psutil.pid_exists(p)]

    def raylet_of(self, pid: int) -> Node | None:
        """The node whose raylet `pid` runs under (a task's worker process is a child of its node's raylet)."""
        import psutil

        try:
            chain = [psutil.Process(pid), *psutil.Process(pid).parents()]
        except psutil.Error:
            return None
        for proc in chain:
            cmdline = " ".join(proc.cmdline())
            for node in [self.head, *self.workers]:
                if "raylet" in cmdline and f"--node_manager_port={node.node_manager_port}" in cmdline:
                    return node
        return None

    def kill_node(self, node: Node) -> list[int]:
        """SIGKILL the node's raylet and every process under it (the machine dies); returns the pids killed."""
        import psutil

        raylet = next(p for p in psutil.process_iter(["cmdline"])
                      if any(f"--node_manager_port={node.node_manager_port}" in c for c in p.info["cmdline"] or [])
                      and str(self.temp_dir) in " ".join(p.info["cmdline"] or []))
        victims = [*raylet.children(recursive=True), raylet]
        for proc in victims:
            with contextlib.suppress(psutil.Error):
                proc.send_signal(signal.SIGKILL)
        node.alive = False
        return [p.pid for p in victims]

    def stop(self) -> None:
        """End every process of this cluster, and remove its temp dir."""
        import psutil

        procs = self.processes()
        for proc in procs:
            with contextlib.suppress(psutil.Error):
                proc.terminate()
        _, alive = psutil.wait_procs(procs, timeout=3)
        for proc in alive:
            with contextlib.suppress(psutil.Error):
                proc.kill()
        time.sleep(0.5)
        shutil.rmtree(self.temp_dir, ignore_errors=True)
