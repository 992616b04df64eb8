"""The benchmarks cannot rot (issue 39): each bench/*.py script runs once in its --quick mode
(correctness only, tiny sizes, no target judged) and must exit 0 with its own correctness checks
passed; and bench/summary.py reads the verdict words the scripts print.

A --quick run judges no target, so its output holds no MISSED (a miss is not a failure there) and
no FAILED (a wrong answer is, and exits non-zero)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import ROOT

# bench_fluss.py starts a Fluss cluster of its own: with the other JVM tests (conftest.py).
pytestmark = pytest.mark.xdist_group("jvm")

BENCH = ROOT / "bench"
SCRIPTS = ["bench.py", "bench_lake.py", "bench_live.py", "bench_scale.py", "bench_scaleout.py", "bench_fluss.py"]
# bench_fluss.py starts and stops a local Fluss cluster (~15-30 s of the ~40-60 s it takes quick).
TIMEOUT = {"bench_fluss.py": 400}


def run(args: list, timeout: int) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *[str(a) for a in args]], cwd=ROOT, capture_output=True, text=True, timeout=timeout
    )


@pytest.mark.parametrize(
    "script", [pytest.param(s, marks=pytest.mark.timeout(TIMEOUT.get(s, 170) + 10)) for s in SCRIPTS]
)
def test_bench_script_runs_quick(script, ext_path, tmp_path):
    p = run([BENCH / script, ext_path, "--quick"], timeout=TIMEOUT.get(script, 170))
    out = p.stdout + p.stderr
    assert p.returncode == 0, f"{script} --quick exited {p.returncode}:\n{out[-4000:]}"
    assert "quick" in p.stdout.lower(), f"{script} --quick did not say it ran quick:\n{p.stdout[-2000:]}"
    for word in ("MISSED", "OVER TARGET", "FAILED", "MISMATCH", "Traceback"):
        assert word not in out, f"{script} --quick printed {word}:\n{out[-4000:]}"
    # Its log, as `make bench` would gather it: nothing missed, nothing wrong.
    log = tmp_path / "bench.log"
    log.write_text(out)
    summary = run([BENCH / "summary.py", log], timeout=30)
    assert summary.returncode == 0, summary.stdout + summary.stderr
    assert "0 missed target(s), 0 wrong answer(s)" in summary.stdout, summary.stdout


SAMPLE = """\
build      streamhouse   150.000 ms   native   120.000 ms   ratio  1.25x  (target <= 1.1x: MISSED)
dashboard  streamhouse     1.000 ms   native     1.000 ms   ratio  1.00x  (target <= 1.2x: PASS)
refresh     10,000  recent changes: speed-up   32.0x  (target >= 50x: MISSED)   == source of truth
refresh      1,000 uniform changes: speed-up   12.0x  (no target)   == source of truth
  replica build vs fact build (10,000,000)  0.017x  target (reported)
  replica at 1,000,000: the replica's mart differs from the fact build's FAILED
lake read: passed the time
"""


def summarize(tmp_path, text: str, *flags) -> subprocess.CompletedProcess:
    log = tmp_path / "bench.log"
    log.write_text(text)
    return run([BENCH / "summary.py", log, *flags], timeout=30)


def test_summary_counts_every_verdict_and_strict_fails_on_a_miss_or_a_wrong_answer(tmp_path):
    p = summarize(tmp_path, SAMPLE)
    assert p.returncode == 0, p.stdout
    assert "1 verdict line(s) PASS, 2 missed target(s), 1 wrong answer(s)" in p.stdout, p.stdout
    listed = [line.strip() for line in p.stdout.splitlines()[2:]]
    assert listed == [
        "replica at 1,000,000: the replica's mart differs from the fact build's FAILED",
        "build      streamhouse   150.000 ms   native   120.000 ms   ratio  1.25x  (target <= 1.1x: MISSED)",
        "refresh     10,000  recent changes: speed-up   32.0x  (target >= 50x: MISSED)   == source of truth",
    ], p.stdout
    assert summarize(tmp_path, SAMPLE, "--strict").returncode == 1
    only_failed = SAMPLE.splitlines()[1] + "\n" + SAMPLE.splitlines()[5] + "\n"
    assert summarize(tmp_path, only_failed, "--strict").returncode == 1
    assert summarize(tmp_path, SAMPLE.splitlines()[1] + "\n", "--strict").returncode == 0


def test_summary_strict_fails_when_nothing_was_judged(tmp_path):
    p = summarize(tmp_path, "lake read: 3 rows\n(reported)\n", "--strict")
    assert p.returncode == 1 and "no verdict at all" in p.stdout, p.stdout
