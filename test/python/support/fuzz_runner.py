"""Running the fuzz's cases (fuzz/test_fuzz.py) in worker processes (fuzz_worker.py) with a time
budget each, and judging the outcomes: crashes, hangs, unclear errors, and messages that do not name
the offending value. Knobs (environment): see fuzz/test_fuzz.py's docstring."""

from __future__ import annotations

import json
import os
import re
import select
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from conftest import EXT_PATH, require_extension

from support.fuzz_cases import LAKE_FUNCS, MUTATING, TEXT_FUNCS, Case
from support.fuzz_env import Env, drop_dac_capabilities

WORKER = Path(__file__).resolve().with_name("fuzz_worker.py")  # run by path in each worker process
CASE_TIMEOUT = float(os.environ.get("FUZZ_CASE_TIMEOUT", "4"))
TIME_BUDGET = float(os.environ.get("FUZZ_SECONDS", "0")) or None  # stop running random cases after this
# Address-space cap of a worker: a read that never ends (a table file linked to /dev/zero) must
# not take the machine down with it; hitting the cap shows as a crash of that case.
WORKER_MEMORY = int(os.environ.get("FUZZ_WORKER_MEMORY_MB", "6144")) * 2**20
PROGRESS = os.environ.get("FUZZ_PROGRESS") == "1"
HANG_CAP = int(os.environ.get("FUZZ_HANG_CAP", "1"))  # hangs per (function, hazard) before skipping the rest

# ------------------------------------------------------------------------------------------------
# Running cases in workers.
# ------------------------------------------------------------------------------------------------


@dataclass
class Result:
    case: Case
    res: dict | None  # the worker's answer, None when it died or hung
    problem: str | None = None  # crash / hang description
    seconds: float = 0.0


class Runner:
    def __init__(self, env: Env, lane: str, log_dir: Path):
        self.env = env
        self.lane = lane
        self.log_dir = log_dir
        self.proc = None
        self.n_started = 0

    def start(self):
        self.n_started += 1
        self.stderr_path = self.log_dir / f"worker-{self.lane}-{self.n_started}.stderr"
        # open for the worker's whole life (it is the child's stderr), closed in kill()
        self.stderr = open(self.stderr_path, "wb")  # noqa: SIM115
        mode = "sandbox" if self.lane == "sandbox" else "plain"
        cmd = [
            sys.executable,
            str(WORKER),
            "--ext",
            require_extension(),
            "--root",
            str(self.env.root),
            "--mode",
            mode,
        ]
        drop = self.lane == "unpriv" and self.env.can_drop

        def preexec():
            import resource

            os.setsid()
            resource.setrlimit(resource.RLIMIT_AS, (WORKER_MEMORY, WORKER_MEMORY))
            if drop:
                drop_dac_capabilities()

        env = dict(os.environ)
        env.setdefault("FUZZ_THREADS", "1")  # DuckDB threads per worker; 0 = DuckDB's default
        self.proc = subprocess.Popen(
            cmd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            cwd=str(self.env.root),
            preexec_fn=preexec,
            env=env,
        )
        line = self._readline(120)
        if line is None or not json.loads(line).get("ready"):
            self.kill()
            raise RuntimeError(f"fuzz worker ({self.lane}) did not start: {line!r}\n{self.stderr_tail()}")

    def _readline(self, timeout: float):
        out = self.proc.stdout
        buf = b""
        deadline = time.monotonic() + timeout
        fd = out.fileno()
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            r, _, _ = select.select([fd], [], [], left)
            if not r:
                return None
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                return buf.decode() if buf else ""
            buf += chunk
            if buf.endswith(b"\n"):
                return buf.decode()

    def stderr_tail(self) -> str:
        try:
            self.stderr.flush()
            data = self.stderr_path.read_bytes()
            return data[-3000:].decode(errors="replace")
        except OSError:
            return ""

    def kill(self):
        if self.proc and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)  # the worker's own session (setsid)
            except ProcessLookupError:
                pass
        if self.proc:
            self.proc.wait()
            for f in (self.proc.stdin, self.proc.stdout):
                try:
                    f.close()
                except OSError:
                    pass
        self.stderr.close()
        self.proc = None

    def run(self, case: Case) -> Result:
        if self.proc is None:
            self.start()
        t0 = time.monotonic()
        timeout = CASE_TIMEOUT * (3 if case.kind in ("lake_refresh", "lake_follow") or case.big else 1)
        try:
            self.proc.stdin.write((json.dumps(case.wire()) + "\n").encode())
            self.proc.stdin.flush()
            line = self._readline(timeout)
        except BrokenPipeError:
            line = ""
        dt = time.monotonic() - t0
        if line:
            return Result(case, json.loads(line), seconds=dt)
        if line is None:
            self.kill()
            return Result(case, None, f"HANG: no answer within {timeout:.0f} s (worker killed)", dt)
        rc = self.proc.wait()
        tail = self.stderr_tail()
        self.kill()
        how = f"killed by signal {-rc} ({signal.Signals(-rc).name})" if rc < 0 else f"exited with code {rc}"
        return Result(case, None, f"CRASH: worker {how}; stderr tail:\n{tail}", dt)

    def close(self):
        if self.proc:
            try:
                self.proc.stdin.close()
                self.proc.wait(timeout=10)
            except (subprocess.TimeoutExpired, OSError):
                pass
            self.kill()


# ------------------------------------------------------------------------------------------------
# Judging outcomes.
# ------------------------------------------------------------------------------------------------

BAD_MESSAGE_MARKERS = [
    "INTERNAL",
    "panicked at",
    "DuckDB API not initialized",
    "RUST_BACKTRACE",
    "database has been invalidated",
    "FATAL",
]
OUR_PREFIXES = ("serving", "paimon_", "streamhouse", "__streamhouse")


def judge(r: Result) -> tuple[list[str], list[str]]:
    """(hard failures, soft findings) of one result."""
    hard, soft = [], []
    if r.problem:
        return [r.problem], []
    res = r.res
    outcome = res.get("outcome")
    msg = res.get("msg") or ""
    if outcome == "pyerror":
        hard.append(f"not a DuckDB error: {res.get('etype')}: {msg[:500]}")
    elif outcome == "error":
        if not msg.strip():
            hard.append(f"empty error message ({res.get('etype')})")
        if res.get("etype") in ("InternalException", "FatalException"):
            hard.append(f"{res.get('etype')}: {short_msg(msg)}")
        else:
            for m in BAD_MESSAGE_MARKERS:
                if m in msg:
                    hard.append(f"unclear error ({res.get('etype')}, contains {m!r}): {short_msg(msg)}")
                    break
        soft += message_findings(r.case, msg)
    for step in res.get("steps") or []:
        smsg = step.get("msg") or ""
        if step.get("outcome") == "pyerror":
            hard.append(f"{step['step']}: not a DuckDB error: {step.get('etype')}: {smsg[:500]}")
        elif step.get("outcome") == "error":
            if not smsg.strip():
                hard.append(f"{step['step']}: empty error message ({step.get('etype')})")
            elif step.get("etype") in ("InternalException", "FatalException") or any(
                m in smsg for m in BAD_MESSAGE_MARKERS
            ):
                hard.append(
                    f"{step['step']} after the corruption: unclear error ({step.get('etype')}): {short_msg(smsg)}"
                )
    for key in ("wrong", "changed", "broken"):
        if res.get(key):
            hard.append(f"{key.upper()}: {res[key]}")
    if (
        outcome == "ok"
        and isinstance(r.case.value, str)
        and "\x00" in r.case.value
        and r.case.func in (TEXT_FUNCS + LAKE_FUNCS)
        and r.case.kind == "sql"
        and not r.case.check
    ):
        # A NUL-bearing argument that still succeeded: was it silently cut at the NUL?
        soft.append("accepted an argument containing NUL (was it truncated at the NUL?)")
    return hard, soft


def message_findings(case: Case, msg: str) -> list[str]:
    out = []
    body = msg.split(": ", 1)[1] if msg.split(": ", 1)[0].endswith("Error") else msg
    ours = body.startswith(OUR_PREFIXES)
    if len(msg) > 64 * 1024:
        out.append(f"error message is {len(msg)} characters long (echoes a huge argument?)")
    if "Error code" in msg:
        out.append(f"message carries C API noise: {msg[:300]}")
    v = case.value
    if ours and isinstance(v, str) and 0 < len(v) <= 200 and v.isprintable() and v.strip() == v and v not in body:
        # Parts of a dotted name or a path are fine too, and "paimon:" is a prefix, not the path.
        shown = v[len("paimon:") :] if v.startswith("paimon:") else v
        if shown not in body and not any(p and p in body for p in shown.split(".") if len(p) > 2):
            out.append(f"message does not name the value {v!r}: {msg[:400]}")
    path = v[len("paimon:") :] if isinstance(v, str) and v.startswith("paimon:") and case.func in MUTATING else v
    if (
        ours
        and isinstance(path, str)
        and "\x00" not in path
        and len(path) < 4096
        and os.path.isdir(path)
        and os.path.isdir(os.path.join(path, "schema"))
        and ("no schema/" in msg or "no such directory" in msg)
    ):
        out.append(
            f"message says the Paimon table is missing, but {path!r} exists (it cannot be read): {short_msg(msg, 300)}"
        )
    if (
        ours
        and isinstance(v, str)
        and "\x00" in v
        and v.split("\x00")[0]
        and v.split("\x00")[0] in body
        and v.replace("\x00", "\\0") not in body
        and v.split("\x00")[0] + "\\0" not in body  # shown up to the NUL, and the cut marked
        and v not in body
    ):
        out.append(f"message shows the value cut at its NUL character, as if whole: {msg[:300]}")
    return out


def run_all(env: Env, cases: list[Case], log_dir: Path, parallel: int = 2, first_random: int | None = None):
    lanes: dict[str, list[Case]] = {}
    for c in cases:
        lanes.setdefault(c.lane, []).append(c)
    skipped = lanes.pop("skip", [])
    if skipped:
        # Counted and shown in pytest's summary, never dropped silently: as root without a way to
        # drop the permission override (CAP_DAC_OVERRIDE), a chmod-000 file is readable anyway.
        import warnings

        warnings.warn(
            f"fuzz: {len(skipped)} permission cases (chmod 000 files) not run: this process is root "
            "and cannot drop its permission override here",
            stacklevel=2,
        )
    # Plain cases are split over `parallel` workers; the unpriv / sandbox lanes get one each.
    shards = []
    plain = lanes.pop("plain", [])
    for i in range(parallel):
        shards.append(("plain", plain[i::parallel]))
    for lane, cs in lanes.items():
        shards.append((lane, cs))
    results: list[Result] = []
    t_start = time.monotonic()
    lock = threading.Lock()
    errors = []
    hangs: dict = {}  # (function, hazard) -> cases that hung or crashed

    def drive(lane, cs):
        runner = Runner(env, lane, log_dir)
        try:
            for i, c in enumerate(cs):
                if PROGRESS and i % 200 == 0:
                    print(f"fuzz: {lane} {i}/{len(cs)}", flush=True)
                if (
                    TIME_BUDGET
                    and first_random is not None
                    and c.id >= first_random
                    and time.monotonic() - t_start > TIME_BUDGET
                ):
                    break
                key = (c.func, c.hazard)
                with lock:
                    capped = c.hazard is not None and len(hangs.get(key, [])) >= HANG_CAP
                if capped:
                    # Enough proof that this hazard hangs this function: do not spend another
                    # time budget on it; the case is reported with the group.
                    r = Result(
                        c,
                        None,
                        f"SKIPPED: {c.func} already hung/crashed {HANG_CAP} times on a "
                        f"{c.hazard!r} argument (cases {hangs[key]})",
                    )
                else:
                    r = runner.run(c)
                with lock:
                    if r.problem and not r.problem.startswith("SKIPPED") and c.hazard is not None:
                        hangs.setdefault(key, []).append(c.id)
                    results.append(r)
        except Exception as e:  # harness failure: report, do not hide
            errors.append(f"{lane}: {e!r}")
        finally:
            runner.close()

    threads = [threading.Thread(target=drive, args=s) for s in shards if s[1]]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results, errors


def summarize(results: list[Result]):
    hard, soft = [], []
    for r in results:
        h, s = judge(r)
        for x in h:
            hard.append((r, x))
        for x in s:
            soft.append((r, x))
    return hard, soft


def short_msg(msg: str, limit: int = 500) -> str:
    msg = msg[: limit + 1000].split("\nStack Trace")[0].strip()
    msg = "".join(ch if ch.isprintable() or ch == "\n" else repr(ch)[1:-1] for ch in msg)
    return msg if len(msg) <= limit else msg[:limit] + f"... <{len(msg)} chars>"


def group_key(r: Result, problem: str):
    first = problem.splitlines()[0]
    if first.startswith(("HANG", "CRASH", "SKIPPED")):
        return ("hang/crash", r.case.func, r.case.hazard or " ".join(r.case.labels)[:80])
    return (re.sub(r"\d{3,}", "N", first[:100]), r.case.func)


def format_findings(items, limit=60) -> str:
    """Problems grouped (50 identical hangs read as one), each with a reproducer."""
    groups: dict = {}
    for r, problem in items:
        groups.setdefault(group_key(r, problem), []).append((r, problem))
    lines = []
    for _key, members in list(groups.items())[:limit]:
        ran = [m for m in members if not m[1].startswith("SKIPPED")] or members
        r, problem = ran[0]
        skipped = len(members) - len(ran) if ran is not members else 0
        head = short_msg(problem, 1500).replace(str(EXT_PATH), "<ext>")
        lines.append(
            f"* {head}\n  function {r.case.func}, lane {r.case.lane}: {len(ran)} case(s)"
            + (f" (+{skipped} more with the same hazard not run)" if skipped else "")
            + f", e.g. case {r.case.id}:\n    "
            + r.case.repro().replace("\n", "\n    ")
        )
        if r.res and r.res.get("msg"):
            lines.append(f"    -> {r.res.get('etype')}: {short_msg(r.res['msg'], 400)}")
    if len(groups) > limit:
        lines.append(f"... and {len(groups) - limit} more groups")
    return "\n".join(lines)
