"""Java Paimon for the tests: one JVM running jvm/src/main/java/streamhouse/paimon/PaimonTableRunner.java
(Paimon 1.3.1's own Java API, paimon-bundle) as a writer and a reader of lake tables, driven over its
stdin/stdout protocol (one JSON request per line, one JSON answer per line; see the class's javadoc).
The process (heap cap, process group, timeouts, teardown) is support/jvm_runner.py's.

The class path is five jars of `make jvm`'s build/jvm/tiering/ (jvm/pom.xml's profile `tiering`:
paimon-bundle 1.3.1, the Hadoop uber jar its Parquet writer needs, reload4j, slf4j) with the runner
compiled into build/jvm/paimon-java/classes/ (`make jvm`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from support.jvm_runner import JvmRunner, java_command

ROOT = Path(__file__).resolve().parents[3]
JARS_DIR = ROOT / "build" / "jvm" / "tiering"
CLASSES = ROOT / "build" / "jvm" / "paimon-java" / "classes"
RUNNER = "streamhouse.paimon.PaimonTableRunner"
PAIMON_VERSION = "1.3.1"
# Exactly these jars of build/jvm/tiering: Paimon, and what its Parquet writer and logging need.
JARS = (
    f"paimon-bundle-{PAIMON_VERSION}.jar",
    "flink-shaded-hadoop-2-uber-2.8.3-10.0.jar",
    "reload4j-1.2.25.jar",
    "slf4j-api-1.7.36.jar",
    "slf4j-simple-1.7.36.jar",
)


class JavaPaimonError(Exception):
    """Java Paimon (or the runner) refused a request: the message is Paimon's, with every cause."""


def classpath() -> str:
    if not (CLASSES / "streamhouse" / "paimon" / "PaimonTableRunner.class").is_file():
        pytest.fail(f"the Java Paimon runner is not built: {CLASSES} (run `make jvm`)", pytrace=False)
    jars = [JARS_DIR / j for j in JARS]
    missing = [j.name for j in jars if not j.is_file()]
    assert not missing, f"{missing} not in {JARS_DIR}: rerun `make jvm`"
    return os.pathsep.join([str(CLASSES), *map(str, jars)])


class JavaPaimon(JvmRunner):
    """One runner JVM; `request(op, **fields)` sends one request and returns its answer."""

    def __init__(self, workdir: Path, heap_mb: int = 512):
        workdir.mkdir(parents=True, exist_ok=True)
        (workdir / "io").mkdir(exist_ok=True)
        # a short-lived JVM: C1 alone answers sooner
        args = java_command(
            heap_mb, classpath(), RUNNER, "--tmp", str(workdir / "io"), flags=("-XX:TieredStopAtLevel=1",)
        )
        super().__init__("Java Paimon runner", args, workdir / "java-paimon.log", b'{"op":"quit"}\n', 60)

    def request(self, op: str, timeout: float = 120, **fields) -> dict:
        self._send((json.dumps({"op": op, **fields}) + "\n").encode())
        got = self._answer(timeout, f"{op} {json.dumps(fields)[:200]}")
        if not got["ok"]:
            raise JavaPaimonError(got["error"])
        return got
