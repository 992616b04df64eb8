"""Flink SQL for the tests: one JVM running jvm/src/main/java/streamhouse/flink/FlinkSqlRunner.java
(Flink 1.20 on one local MiniCluster, Paimon's Flink connector), driven over its stdin/stdout
protocol: SQL scripts as Flink's SQL client runs them, queries and bounded streaming reads.
The process (heap cap, process group, timeouts, teardown) is support/jvm_runner.py's.

The class path is `make jvm`'s build/jvm/flink-sql/ (jvm/pom.xml's profile `flink-sql`) with the
runner compiled into build/jvm/flink-sql/classes/. The JVM is started in a process group of its own
with a capped heap, and `close()` ends the group (a `quit` first, SIGKILL if it does not end), so a
test that fails leaves no JVM behind. Each request is answered within its timeout or the JVM is
killed and the request fails, naming the tail of the JVM's log.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from support.jvm_runner import JvmRunner, java_command

ROOT = Path(__file__).resolve().parents[3]
JVM_DIR = ROOT / "build" / "jvm" / "flink-sql"
RUNNER = "streamhouse.flink.FlinkSqlRunner"
# The versions jvm/pom.xml's flink-sql profile resolves (the README names them): the class path must
# hold exactly these, or the tests would claim versions they did not run.
FLINK_VERSION = "1.20.3"
PAIMON_VERSION = "1.3.1"


class FlinkError(Exception):
    """Flink (or the runner) refused a request: the message is Flink's, with every cause."""


def classpath() -> str:
    jars = sorted(JVM_DIR.glob("*.jar"))
    classes = JVM_DIR / "classes"
    if not jars or not (classes / "streamhouse" / "flink" / "FlinkSqlRunner.class").is_file():
        pytest.fail(
            f"the Flink SQL class path is not built: {JVM_DIR} (run `make jvm`)",
            pytrace=False,
        )
    names = {j.name for j in jars}
    for want in (f"flink-table-runtime-{FLINK_VERSION}.jar", f"paimon-flink-1.20-{PAIMON_VERSION}.jar"):
        assert want in names, f"{want} is not in {JVM_DIR}: rerun `make jvm`"
    return os.pathsep.join([str(classes), *map(str, jars)])


def sql_string(text: str) -> str:
    """A Flink SQL string literal."""
    return "'" + text.replace("'", "''") + "'"


class FlinkSql(JvmRunner):
    """One runner JVM. `exec` runs a script (statements split at `;` like Flink's SQL client),
    `query` one SELECT, `stream` a bounded streaming read; every answer is JSON."""

    def __init__(self, workdir: Path, heap_mb: int = 768, checkpoint_ms: int | None = None):
        workdir.mkdir(parents=True, exist_ok=True)
        (workdir / "io").mkdir(exist_ok=True)
        args = java_command(heap_mb, classpath(), RUNNER, "--tmp", str(workdir / "io"))
        if checkpoint_ms is not None:
            args += ["--checkpoint-ms", str(checkpoint_ms)]
        self.catalogs: list[str] = []
        super().__init__("Flink SQL runner", args, workdir / "flink-sql.log", b"@@ quit\n@@end\n", 120)

    def request(self, op: str, text: str = "", timeout: float = 180, **opts) -> dict:
        header = " ".join([f"@@ {op}", *(f"{k}={v}" for k, v in opts.items())])
        assert "\n@@end\n" not in f"\n{text}\n", text
        self._send(f"{header}\n{text}\n@@end\n".encode())
        got = self._answer(timeout, f"{op} {text[:200]!r}")
        if not got["ok"]:
            raise FlinkError(got["error"])
        return got

    def exec(self, script: str, mode: str = "batch", detach: bool = False, timeout: float = 180) -> list[dict]:
        """Runs a script in a session that starts in `mode`; one result per statement."""
        opts = {"mode": mode}
        if detach:
            opts["detach"] = "true"
        return self.request("exec", script, timeout=timeout, **opts)["results"]

    def query(self, sql: str, mode: str = "batch", timeout: float = 180) -> list[list]:
        """One query's rows, each `[row kind, values...]`."""
        (result,) = self.exec(sql, mode=mode, timeout=timeout)
        return result["rows"]

    def stream(self, sql: str, consumer: Path, until: int, timeout: float = 180) -> list[list]:
        """A bounded streaming read: the rows of a streaming SELECT (naming consumer-id) until the
        consumer has read snapshot `until`. The session must have a checkpoint interval."""
        return self.request(
            "stream", sql, timeout=timeout, consumer=str(consumer), until=until, timeout_ms=int(timeout * 1000 - 5000)
        )["rows"]

    def use_catalog(self, name: str, warehouse: Path) -> None:
        """A Paimon filesystem catalog in both of the session's environments. Its cache is off: a
        table altered by one statement (the mart job's ALTER TABLE) is seen by the next writer."""
        ddl = (
            f"CREATE CATALOG `{name}` WITH ('type' = 'paimon', 'warehouse' = {sql_string(warehouse.as_uri())}, "
            "'cache-enabled' = 'false');\n"
            f"USE CATALOG `{name}`"
        )
        for mode in ("batch", "streaming"):
            self.exec(ddl, mode=mode)
        self.catalogs.append(name)

    def cancel_jobs(self) -> None:
        self.request("cancel", timeout=90)

    def new_session(self) -> None:
        """A fresh session, as a new SQL client's: running jobs cancelled, no settings, no catalogs."""
        self.request("session", timeout=90)
        self.catalogs.clear()


def latest_snapshot(table_dir: Path) -> int:
    """The highest snapshot id of a Paimon table, from its snapshot files (not the LATEST hint)."""
    ids = [int(p.name.split("-", 1)[1]) for p in (table_dir / "snapshot").glob("snapshot-*")]
    return max(ids, default=0)
