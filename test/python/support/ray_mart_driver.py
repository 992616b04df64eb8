"""The Ray driver of lake/test_ray_mart.py: runs inside the test cluster's own namespaces, beside
the cluster's processes. Usage: ray_mart_driver.py ADDRESS

Says `ready` with the cluster's alive nodes, then answers each JSON command line on stdin by
running streamhouse.ray.build_mart(fact, mart, options=..., address=ADDRESS): one JSON line per
answer on stdout, prefixed with ANSWER (Ray may print lines of its own). A command with "pythonpath"
runs in a child driver whose Ray workers' PYTHONPATH starts with that directory, and its own too
unless "workers_only"."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import warnings

ANSWER = "@@answer "


def answer(obj: dict) -> None:
    sys.stdout.write(ANSWER + json.dumps(obj) + "\n")
    sys.stdout.flush()


def build(address: str, cmd: dict) -> dict:
    import ray

    from streamhouse.ray import build_mart

    try:
        if os.environ.get("RAY_MART_WORKER_PATH"):  # this job's workers only
            env = {"PYTHONPATH": os.environ["RAY_MART_WORKER_PATH"]}
            ray.init(address=address, log_to_driver=False, runtime_env={"env_vars": env})
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            result = build_mart(cmd["fact"], cmd["mart"], options=cmd.get("options"), address=address)
        said = [str(w.message) for w in caught if "build_mart" in str(w.message)]
        return {"result": dataclasses.asdict(result), "warnings": said}
    except Exception as e:
        return {"error": type(e).__name__, "message": str(e)}
    finally:
        if ray.is_initialized():
            ray.shutdown()


def child(address: str, cmd: dict) -> dict:
    path = os.pathsep.join([cmd["pythonpath"], os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "RAY_MART_WORKER_PATH": path}
    if not cmd.get("workers_only"):
        env["PYTHONPATH"] = path
    done = subprocess.run(
        [sys.executable, __file__, address, "--once"],
        input=json.dumps(cmd),
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    for line in done.stdout.splitlines():
        if line.startswith(ANSWER):
            return json.loads(line[len(ANSWER) :])
    return {"error": "child", "message": f"exit {done.returncode}: {done.stderr[-3000:]}"}


def main() -> None:
    address = sys.argv[1]
    if sys.argv[2:] == ["--once"]:
        answer(build(address, json.loads(sys.stdin.read())))
        return
    import ray

    ray.init(address=address, log_to_driver=False, logging_level="ERROR")
    nodes = [n["NodeManagerAddress"] for n in ray.nodes() if n["Alive"]]
    ray.shutdown()
    answer({"ready": True, "nodes": nodes})
    for line in sys.stdin:
        cmd = json.loads(line)
        answer(child(address, cmd) if cmd.get("pythonpath") else build(address, cmd))


if __name__ == "__main__":
    main()
