"""One JVM a test drives over stdin/stdout, answering each request with one JSON line: the process
handling the Flink SQL runner (flink_sql.py) and the Java Paimon runner (java_paimon.py) share.

The JVM is started in a process group of its own (its command line sets the heap cap), its stderr
goes to a log file, and `close()` ends the group (the runner's quit request first, SIGKILL if it
does not end), so a test that fails leaves no JVM behind. An answer that does not come within its
timeout kills the JVM and fails the test, naming the tail of the JVM's log.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import threading
from pathlib import Path

import pytest


def java_command(heap_mb: int, classpath: str, main: str, *args: str, flags: tuple[str, ...] = ()) -> list[str]:
    """`java` with the heap (and direct memory) capped, the serial collector (2 cores), out of
    memory an exit, then `main` and its arguments."""
    return [
        "java",
        f"-Xmx{heap_mb}m",
        f"-XX:MaxDirectMemorySize={heap_mb // 2}m",
        "-XX:+UseSerialGC",
        *flags,
        "-XX:+ExitOnOutOfMemoryError",
        "-cp",
        classpath,
        main,
        *args,
    ]


class JvmRunner:
    def __init__(self, name: str, args: list[str], log_path: Path, quit_request: bytes, start_timeout: float):
        self.name = name
        self.log_path = log_path
        self._quit = quit_request
        self._log = open(log_path, "wb")  # noqa: SIM115 (closed in close())
        self.proc = subprocess.Popen(
            args,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            start_new_session=True,  # its own process group: close() ends all of it
        )
        self._lines: queue.Queue = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        ready = self._answer(start_timeout, "start")
        assert ready.get("ready"), ready

    def _read(self) -> None:
        for line in self.proc.stdout:
            self._lines.put(line.decode())
        self._lines.put(None)

    def log_tail(self, n: int = 40) -> str:
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(lines[-n:])

    def _send(self, data: bytes) -> None:
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def _answer(self, timeout: float, what: str) -> dict:
        try:
            line = self._lines.get(timeout=timeout)
        except queue.Empty:
            self.kill()
            pytest.fail(f"{self.name}: no answer to {what} within {timeout} s; log:\n{self.log_tail()}")
        if line is None:
            code = self.proc.wait(timeout=10)
            pytest.fail(f"{self.name} ended (exit {code}) during {what}; log:\n{self.log_tail()}")
        return json.loads(line)

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def close(self, quit_timeout: float = 45) -> None:
        if self.proc.poll() is None:
            try:
                self._send(self._quit)
                self.proc.wait(timeout=quit_timeout)
            except (OSError, subprocess.TimeoutExpired):
                pass
        self.kill()
        self.proc.wait(timeout=30)
        self._log.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()
