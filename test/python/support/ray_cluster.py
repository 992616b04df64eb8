"""A real Ray cluster for the tests and the benchmark: a head and more nodes (`ray start`), with
streamhouse.ray's driver (support/ray_mart_driver.py) beside them, all inside a namespace of their
own (`unshare`: network, so that Ray can only bind and dial loopback, and pid, so that nothing of
the cluster can outlive it). Commands go to the driver as JSON lines; `stop()` ends it all."""

from __future__ import annotations

import json
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
DRIVER = Path(__file__).resolve().parent / "ray_mart_driver.py"
PORT = 6390  # the namespace has its own loopback: no port of the machine is touched
# Ray's own start and stop in the namespace; the driver answers build_mart commands on stdin.
CLUSTER = """
set -u
ip link set lo up || exit 90
common="--node-ip-address=127.0.0.1 --num-cpus=1 --object-store-memory=$STORE --disable-usage-stats"
timeout 120 "$RAY" start --head --port=$PORT --include-dashboard=false --temp-dir="$RAY_TMP" $common >&2 || exit 91
for _ in $(seq 2 "$NODES"); do
    timeout 120 "$RAY" start --address=127.0.0.1:$PORT $common >&2 || exit 92
done
timeout 3600 "$PY" "$DRIVER" 127.0.0.1:$PORT
rc=$?
timeout 60 "$RAY" stop --force >&2
exit $rc
"""


class Cluster:
    """The namespace's bash (its pid 1), Ray's head and `nodes - 1` more nodes of one CPU each,
    and the driver. `object_store_mb` per node."""

    def __init__(self, nodes: int = 2, object_store_mb: int = 200):
        self.tmp = tempfile.mkdtemp(prefix="shray")  # short: Ray's socket paths live under it
        self.log = open(os.path.join(self.tmp, "cluster.log"), "w+")  # noqa: SIM115
        env = {
            **os.environ,
            "RAY": str(Path(sys.executable).parent / "ray"),
            "PY": sys.executable,
            "DRIVER": str(DRIVER),
            "PORT": str(PORT),
            "NODES": str(nodes),
            "STORE": str(object_store_mb * 1_000_000),
            "RAY_TMP": os.path.join(self.tmp, "ray"),
            "PYTHONPATH": os.pathsep.join([str(ROOT / "python"), os.environ.get("PYTHONPATH", "")]),
            "RAY_USAGE_STATS_ENABLED": "0",
        }
        self.proc = subprocess.Popen(
            ["unshare", "--net", "--pid", "--fork", "--mount-proc", "--kill-child", "bash", "-c", CLUSTER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
            env=env,
        )
        self.pid_ns = self._pid_namespace()
        self.lines: queue.Queue = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()
        self.ready = self._answer(180)

    def _pid_namespace(self) -> str:
        """The pid namespace of unshare's child (the namespace's pid 1), once it exists."""
        own = os.readlink(f"/proc/{self.proc.pid}/ns/pid")
        for _ in range(200):
            try:
                with open(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children") as f:
                    children = f.read().split()
                if children and (ns := os.readlink(f"/proc/{children[0]}/ns/pid")) != own:
                    return ns
            except OSError:
                pass
            threading.Event().wait(0.05)
        raise AssertionError("unshare did not start its namespace")

    def _pump(self):
        for line in self.proc.stdout:
            if line.startswith("@@answer "):
                self.lines.put(json.loads(line[len("@@answer ") :]))
        self.lines.put(None)

    def _answer(self, timeout: float) -> dict:
        try:
            got = self.lines.get(timeout=timeout)
        except queue.Empty:
            got = None
        if got is None:
            self.log.seek(0)
            raise AssertionError(f"the Ray cluster or its driver gave no answer; its log:\n{self.log.read()[-6000:]}")
        return got

    def build(self, fact: str, mart: str, options=None, pythonpath=None, workers_only=False) -> dict:
        cmd = {"fact": fact, "mart": mart, "options": options, "pythonpath": pythonpath, "workers_only": workers_only}
        return self.call(cmd)

    def call(self, cmd: dict, timeout: float = 240) -> dict:
        """One command to the driver (a build, or its S3 side: support/ray_mart_driver.py)."""
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()
        return self._answer(timeout)

    def members(self) -> list[int]:
        """Processes of the namespace still alive (by pid namespace, the machine's view)."""
        alive = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                if os.readlink(f"/proc/{pid}/ns/pid") == self.pid_ns:
                    alive.append(int(pid))
            except OSError:
                pass
        return alive

    def stop(self) -> int:
        self.proc.stdin.close()
        try:
            rc = self.proc.wait(timeout=90)
        except subprocess.TimeoutExpired:
            self.proc.kill()  # --kill-child: the namespace's pid 1 goes, and the kernel ends the rest
            rc = self.proc.wait()
        self.log.close()
        shutil.rmtree(self.tmp, ignore_errors=True)
        return rc
