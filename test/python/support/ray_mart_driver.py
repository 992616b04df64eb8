"""The Ray driver of lake/test_ray_mart.py: runs inside the test cluster's own namespaces, beside
the cluster's processes. Usage: ray_mart_driver.py ADDRESS

Says `ready` with the cluster's alive nodes, then answers each JSON command line on stdin by
running streamhouse.ray.build_mart(fact, mart, options=..., address=ADDRESS): one JSON line per
answer on stdout, prefixed with ANSWER (Ray may print lines of its own); with "connected": true
the driver connects to ADDRESS itself and calls build_mart with address=None. A command with "pythonpath"
runs in a child driver whose Ray workers' PYTHONPATH starts with that directory, and its own too
unless "workers_only".

Tables on S3 live behind the namespace's loopback too, so the driver also serves the test's S3
side: {"op": "s3"} starts the local S3 server (support/s3_server.py) in the namespace and answers
its endpoint and keys; {"op": "write"} creates a fact table of support.lake_util.ORDERS there and
commits each list of rows (order_day as ISO text) with pypaimon; {"op": "read_mart"} reads a mart
table back with pypaimon ({"mart": null} when there is no table)."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

ANSWER = "@@answer "
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # test/python: the support package


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
        # "connected": the driver connects first and build_mart gets address=None (the cluster
        # this process is connected to), which it must leave connected.
        connected = cmd.get("connected", False)
        if connected and not ray.is_initialized():
            ray.init(address=address, log_to_driver=False, logging_level="ERROR")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            result = build_mart(
                cmd["fact"], cmd["mart"], options=cmd.get("options"), address=None if connected else address
            )
        said = [str(w.message) for w in caught if "build_mart" in str(w.message)]
        return {"result": dataclasses.asdict(result), "warnings": said, "still_connected": ray.is_initialized()}
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


def start_s3(servers: list) -> dict:
    server = subprocess.Popen(
        [sys.executable, str(HERE / "s3_server.py"), "lake"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    servers.append(server)  # it serves until its stdin closes: when this driver ends
    return {"s3": json.loads(server.stdout.readline())}


def write_fact(cmd: dict) -> dict:
    import datetime

    from support.lake_util import ORDERS, commit, create_table, open_warehouse

    catalog = open_warehouse(cmd["warehouse"], cmd.get("options"))
    table = create_table(catalog, cmd["table"], ORDERS, ["order_id"], cmd["table_options"])
    for rows in cmd["commits"]:
        day = datetime.date.fromisoformat
        commit(table, ORDERS, [{**r, "order_day": r["order_day"] and day(r["order_day"])} for r in rows])
    return {"written": len(cmd["commits"])}


def read_mart(cmd: dict) -> dict:
    from pypaimon.catalog.catalog_exception import TableNotExistException

    from support.lake_util import open_warehouse
    from support.lake_util import read_mart as read

    try:
        mart = read(open_warehouse(cmd["warehouse"], cmd.get("options")), cmd["table"])
    except TableNotExistException:
        return {"mart": None}
    return {"mart": sorted([c, d.isoformat(), rev, n] for (c, d), (rev, n) in mart.items())}


def serve(address: str, cmd: dict, servers: list) -> dict:
    op = cmd.get("op", "build")
    try:
        if op == "s3":
            return start_s3(servers)
        if op == "write":
            return write_fact(cmd)
        if op == "read_mart":
            return read_mart(cmd)
    except Exception as e:
        return {"error": type(e).__name__, "message": str(e)}
    return child(address, cmd) if cmd.get("pythonpath") else build(address, cmd)


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
    servers: list = []
    for line in sys.stdin:
        answer(serve(address, json.loads(line), servers))
    for server in servers:
        server.stdin.close()
        server.wait(timeout=30)


if __name__ == "__main__":
    main()
