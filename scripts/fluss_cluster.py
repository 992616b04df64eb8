#!/usr/bin/env python3
"""A local Apache Fluss 0.9.1 cluster: ZooKeeper, one coordinator, one tablet server and Fluss's lake
tiering service (its Flink job, in a local Flink MiniCluster) tiering into a Paimon warehouse on local
disk. Every server listens on 127.0.0.1 only, on free ports. The jars come from jvm/pom.xml
(`make jvm`: build/jvm/fluss-server, lake-plugin, tiering).

    scripts/fluss_cluster.py up [DIR]     start it (DIR defaults to build/fluss; its old data is wiped)
    scripts/fluss_cluster.py down [DIR]   stop everything `up` started there
    scripts/fluss_cluster.py status [DIR] the state and which of its processes are alive

`up` prints the bootstrap address and the warehouse path and writes them, with the PIDs, to
DIR/cluster.json; logs go to DIR/logs/. Each JVM runs in a session (process group) of its own and
carries -Dstreamhouse.fluss.dir=DIR, so `down` stops exactly the processes of this cluster: each
group gets SIGTERM, then SIGKILL if it has not ended in time, and a last sweep of /proc kills
anything left with the marker. The tests import this module (start/stop/alive; kill/restart for a
server crashed and started again on its data) and pass die_with_parent=True: then the JVMs are also
killed by the kernel if the test process dies. Scripts (make demo-fluss, bench/bench_fluss.py) use
`running`, which stops the cluster however the script ends.

Facts behind the settings (shared/notes/fluss-on-this-machine.md): the coordinator loads the Paimon
lake plugin from FLUSS_PLUGINS_DIR/paimon; JDK 17 needs java.nio opened to Arrow; the tiering job
runs as a plain program (FlussLakeTieringEntrypoint) and polls the coordinator for tables to tier
every `tiering.poll.table.interval` (30 s by default, 1 s here).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
JVM_DIR = ROOT / "build" / "jvm"
DEFAULT_DIR = ROOT / "build" / "fluss"
STATE = "cluster.json"
MARKER = "-Dstreamhouse.fluss.dir="
# What `up` owns under DIR (and so wipes first); nothing else there is touched.
OWNED = ("conf", "data", "logs", "plugins", "remote", "tmp", "warehouse", STATE)
# Start order; `down` stops in reverse.
ROLES = ("zookeeper", "coordinator", "tablet-server", "tiering")
HEAP = {"zookeeper": "256m", "coordinator": "512m", "tablet-server": "1g", "tiering": "1g"}
JAVA_OPTS = [
    "-XX:+UseSerialGC",
    "--add-opens=java.base/java.nio=org.apache.arrow.memory.core,ALL-UNNAMED",
    *(
        f"--add-opens=java.base/{package}=ALL-UNNAMED"
        for package in (
            "java.lang",
            "java.lang.reflect",
            "java.io",
            "java.net",
            "java.text",
            "java.time",
            "java.util",
            "java.util.concurrent",
            "java.util.concurrent.atomic",
            "java.util.concurrent.locks",
            "sun.nio.ch",
        )
    ),
    "--add-exports=java.base/sun.net.util=ALL-UNNAMED",
    "-Dorg.slf4j.simpleLogger.showDateTime=true",
    "-Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS",
    "-Dzookeeper.admin.enableServer=false",
]
MAIN = {
    "zookeeper": "org.apache.fluss.shaded.zookeeper3.org.apache.zookeeper.server.quorum.QuorumPeerMain",
    "coordinator": "org.apache.fluss.server.coordinator.CoordinatorServer",
    "tablet-server": "org.apache.fluss.server.tablet.TabletServer",
    # FlussLakeTieringEntrypoint with its Flink MiniCluster bound to 127.0.0.1 (the file says why), compiled
    # at start by the JDK's single-file source launcher.
    "tiering": str(ROOT / "jvm" / "LoopbackTiering.java"),
}
# The processes this one started (kept so that none is reported as "still running" when collected).
_CHILDREN: list[subprocess.Popen] = []
# The tiering job's source task is running: from here on it asks the coordinator for tables to tier.
TIERING_RUNNING = re.compile(r"TieringSource.* switched from INITIALIZING to RUNNING")


class ClusterError(RuntimeError):
    pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _die_with_parent() -> None:
    """In the child before exec: the kernel sends SIGKILL when the parent (thread) dies."""
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def log_tail(directory: Path, role: str, lines: int = 40) -> str:
    path = directory / "logs" / f"{role}.log"
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return f"(no log at {path})"
    return f"--- last lines of {path}:\n" + "\n".join(text[-lines:])


def _server_yaml(directory: Path, zk_port: int, port: int, data: str, extra: dict) -> str:
    options = {
        "zookeeper.address": f"127.0.0.1:{zk_port}",
        "bind.listeners": f"FLUSS://127.0.0.1:{port}",
        "data.dir": str(directory / "data" / data),
        "remote.data.dir": str(directory / "remote"),
        "default.replication.factor": "1",
        "datalake.format": "paimon",
        "datalake.paimon.metastore": "filesystem",
        "datalake.paimon.warehouse": str(directory / "warehouse"),
        **extra,
    }
    return "".join(f"{k}: {v}\n" for k, v in options.items())


def _write_config(directory: Path, ports: dict, options: dict) -> None:
    conf = directory / "conf"
    for role in ("coordinator", "tablet-server"):
        (conf / role).mkdir(parents=True)
    (conf / "zookeeper.properties").write_text(
        f"dataDir={directory / 'data' / 'zookeeper'}\n"
        f"clientPort={ports['zookeeper']}\n"
        "clientPortAddress=127.0.0.1\n"
        "maxClientCnxns=0\n"
        "admin.enableServer=false\n"
    )
    (conf / "coordinator" / "server.yaml").write_text(
        _server_yaml(directory, ports["zookeeper"], ports["coordinator"], "coordinator", options)
    )
    (conf / "tablet-server" / "server.yaml").write_text(
        _server_yaml(
            directory, ports["zookeeper"], ports["tablet-server"], "tablet-server", {"tablet-server.id": "0", **options}
        )
    )
    # The coordinator and the tablet server find the Paimon lake plugin in FLUSS_PLUGINS_DIR/paimon.
    (directory / "plugins").mkdir()
    (directory / "plugins" / "paimon").symlink_to(JVM_DIR / "lake-plugin", target_is_directory=True)


def _command(directory: Path, role: str, ports: dict) -> list[str]:
    java_home = os.environ.get("JAVA_HOME")
    java = (java_home and shutil.which("java", path=os.path.join(java_home, "bin"))) or shutil.which("java")
    if java is None:
        raise ClusterError("`java` is not on PATH (Java 17 is needed for the Fluss cluster)")
    jars = "fluss-server" if role != "tiering" else "tiering"
    head = [
        java,
        f"-Xmx{HEAP[role]}",
        *JAVA_OPTS,
        f"-Djava.io.tmpdir={directory / 'tmp' / role}",
        f"{MARKER}{directory}",
        "-cp",
        str(JVM_DIR / jars / "*"),
        MAIN[role],
    ]
    if role == "zookeeper":
        return [*head, str(directory / "conf" / "zookeeper.properties")]
    if role in ("coordinator", "tablet-server"):
        return [*head, "--configDir", str(directory / "conf" / role)]
    options = {
        "fluss.bootstrap.servers": f"127.0.0.1:{ports['coordinator']}",
        "fluss.tiering.poll.table.interval": "1s",
        "datalake.format": "paimon",
        "datalake.paimon.metastore": "filesystem",
        "datalake.paimon.warehouse": str(directory / "warehouse"),
    }
    return [*head, *(x for k, v in options.items() for x in (f"--{k}", v))]


def _save(directory: Path, state: dict) -> None:
    tmp = directory / (STATE + ".tmp")
    tmp.write_text(json.dumps(state, indent=2) + "\n")
    tmp.replace(directory / STATE)


def load(directory: Path | str = DEFAULT_DIR) -> dict | None:
    try:
        return json.loads((Path(directory) / STATE).read_text())
    except (OSError, ValueError):
        return None


def alive(directory: Path | str = DEFAULT_DIR) -> dict[int, str]:
    """Every running process (pid -> command line) that carries this cluster's marker."""
    want = f"{MARKER}{Path(directory).resolve()}".encode()
    found = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                args = f.read().split(b"\0")
        except OSError:
            continue
        if want in args:
            found[int(pid)] = b" ".join(args).decode(errors="replace")
    return found


def pid_alive(pid: int) -> bool:
    """Running (a zombie is not); reaps the pid first when it is a child of this process."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _wait(check, timeout: float, what: str, directory: Path, role: str, pid: int | None = None) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if pid is not None and not pid_alive(pid):
            raise ClusterError(f"{role} (pid {pid}) exited while waiting for {what}\n{log_tail(directory, role)}")
        if time.monotonic() > deadline:
            raise ClusterError(f"{role}: no {what} within {timeout:.0f} s\n{log_tail(directory, role)}")
        time.sleep(0.2)


def _launch(directory: Path, role: str, state: dict, die_with_parent: bool) -> int:
    """Starts `role` of the cluster described by `state` (its own session, its log appended to) and
    records its pid in DIR/cluster.json."""
    with open(directory / "logs" / f"{role}.log", "ab") as log:
        proc = subprocess.Popen(
            _command(directory, role, state["ports"]),
            cwd=directory / "tmp" / role,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "FLUSS_PLUGINS_DIR": str(directory / "plugins")},
            start_new_session=True,
            preexec_fn=_die_with_parent if die_with_parent else None,
        )
    _CHILDREN.append(proc)
    state["pids"][role] = proc.pid
    _save(directory, state)
    return proc.pid


def start(
    directory: Path | str = DEFAULT_DIR,
    timeout: float = 120,
    die_with_parent: bool = False,
    say=print,
    options: dict | None = None,
) -> dict:
    """Starts the cluster in `directory` (its previous data wiped) and returns its state: bootstrap,
    warehouse, pids, ports. `options` are added to both servers' server.yaml. On any failure
    everything started so far is stopped again."""
    directory = Path(directory).resolve()
    running = alive(directory)
    if running:
        raise ClusterError(f"a Fluss cluster of {directory} is running (pids {sorted(running)}): stop it first")
    missing = [d for d in ("fluss-server", "lake-plugin", "tiering") if not any((JVM_DIR / d).glob("*.jar"))]
    if missing:
        raise ClusterError(f"no jars in {', '.join(str(JVM_DIR / d) for d in missing)}: run `make jvm` first")
    directory.mkdir(parents=True, exist_ok=True)
    for name in OWNED:
        path = directory / name
        if path.is_symlink() or path.is_file():
            path.unlink()
        elif path.is_dir():
            shutil.rmtree(path)
    for sub in ("logs", "remote", "warehouse", *(f"tmp/{role}" for role in ROLES)):
        (directory / sub).mkdir(parents=True, exist_ok=True)
    ports = {role: free_port() for role in ("zookeeper", "coordinator", "tablet-server")}
    _write_config(directory, ports, options or {})
    state = {
        "dir": str(directory),
        "bootstrap": f"127.0.0.1:{ports['coordinator']}",
        "warehouse": str(directory / "warehouse"),
        "ports": ports,
        "pids": {},
        "logs": str(directory / "logs"),
    }
    began = time.monotonic()

    def launch(role: str) -> int:
        return _launch(directory, role, state, die_with_parent)

    def remaining() -> float:
        return max(1.0, timeout - (time.monotonic() - began))

    try:
        pid = launch("zookeeper")
        _wait(lambda: listening(ports["zookeeper"]), remaining(), "client port", directory, "zookeeper", pid)
        # The coordinator and the tablet server only meet through ZooKeeper: they start side by side.
        servers = {role: launch(role) for role in ("coordinator", "tablet-server")}
        for role, pid in servers.items():
            _wait(lambda role=role: listening(ports[role]), remaining(), "listener", directory, role, pid)
        # The tiering job has no restart strategy: it starts once the servers answer.
        pid = launch("tiering")
        log = directory / "logs" / "tiering.log"
        _wait(
            lambda: bool(TIERING_RUNNING.search(log.read_text(errors="replace"))),
            remaining(),
            "running job",
            directory,
            "tiering",
            pid,
        )
    except BaseException:
        stop(directory, say=lambda _m: None)
        raise
    state["up_seconds"] = round(time.monotonic() - began, 1)
    _save(directory, state)
    say(f"Fluss is up in {state['up_seconds']} s: bootstrap {state['bootstrap']}, warehouse {state['warehouse']}")
    say(f"  pids {state['pids']}, logs {state['logs']}, state {directory / STATE}")
    return state


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def stop(directory: Path | str = DEFAULT_DIR, grace: float = 15, say=print) -> list[int]:
    """Stops every process of the cluster in `directory`, newest first: SIGTERM to its process group,
    SIGKILL after `grace` seconds; then kills whatever still carries the cluster's marker. Returns the
    pids that had to be killed. Safe to call twice, or on a cluster that never fully started."""
    directory = Path(directory).resolve()
    state = load(directory) or {"pids": {}}
    mine = alive(directory)
    killed = []
    for role in reversed(ROLES):
        pid = state["pids"].get(role)
        if pid is None or pid not in mine:
            continue  # never started, already gone, or the pid now names another process
        _signal_group(pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if pid_alive(pid):
            _signal_group(pid, signal.SIGKILL)
            killed.append(pid)
    for pid in alive(directory):  # strays: anything else with our marker
        try:
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + 10
    while alive(directory) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = alive(directory)
    if left:
        raise ClusterError(f"processes of the Fluss cluster in {directory} survived SIGKILL: {sorted(left)}")
    if (directory / STATE).exists():
        state["stopped"] = True
        _save(directory, state)
    say(f"Fluss in {directory} is down" + (f" (killed after {grace:.0f} s: {killed})" if killed else ""))
    return killed


def kill(directory: Path | str, role: str, timeout: float = 10) -> int:
    """SIGKILL to one server of the running cluster in `directory` (its process group), as a crash
    would end it; returns once it is gone. Its data stays: `restart` starts it again on it."""
    directory = Path(directory).resolve()
    pid = (load(directory) or {"pids": {}})["pids"].get(role)
    if pid is None or pid not in alive(directory):
        raise ClusterError(f"{role} of the cluster in {directory} is not running")
    _signal_group(pid, signal.SIGKILL)
    _wait(lambda: not pid_alive(pid), timeout, "exit after SIGKILL", directory, role)
    return pid


def restart(directory: Path | str, role: str, timeout: float = 120, die_with_parent: bool = False) -> int:
    """Starts `role` again in the cluster in `directory` after it died (`kill`): the same
    configuration, ports and data directory; returns its new pid once it listens again."""
    directory = Path(directory).resolve()
    state = load(directory)
    if state is None or state.get("stopped"):
        raise ClusterError(f"no running Fluss cluster in {directory}")
    old = state["pids"].get(role)
    if old is not None and old in alive(directory):
        raise ClusterError(f"{role} (pid {old}) of the cluster in {directory} is still running")
    pid = _launch(directory, role, state, die_with_parent)
    port = state["ports"].get(role)
    if port is not None:
        _wait(lambda: listening(port), timeout, "listener", directory, role, pid)
    return pid


def _exit_on_signal(signum, _frame) -> None:
    raise SystemExit(128 + signum)


@contextlib.contextmanager
def running(directory: Path | str = DEFAULT_DIR, say=print, options: dict | None = None):
    """A cluster for the length of a `with` block (make demo-fluss, bench/bench_fluss.py, a test's
    own cluster): started with die_with_parent, and stopped when the block ends, however it ends: an
    exception, Ctrl-C, SIGTERM or SIGHUP (turned into SystemExit while the block runs); should the
    process be killed outright, the kernel kills the JVMs. Call it from the main thread."""
    handled = (signal.SIGTERM, signal.SIGHUP)
    previous = {sig: signal.signal(sig, _exit_on_signal) for sig in handled}
    try:
        yield start(directory, die_with_parent=True, say=say, options=options)
    finally:
        try:
            stop(directory, say=say)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


def main(argv: list[str]) -> int:
    if len(argv) not in (1, 2) or argv[0] not in ("up", "down", "status"):
        print(__doc__, file=sys.stderr)
        return 2
    directory = Path(argv[1]) if len(argv) == 2 else DEFAULT_DIR
    try:
        if argv[0] == "up":
            start(directory)
        elif argv[0] == "down":
            stop(directory)
        else:
            print(json.dumps({"state": load(directory), "alive": sorted(alive(directory))}, indent=2))
    except ClusterError as e:
        print(f"fluss_cluster.py {argv[0]}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
