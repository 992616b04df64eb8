"""The verdicts of one `make bench` run, gathered, so a missed target is never lost in the scroll.

Every benchmark prints each target's verdict as one of these words (upper case, a word of its own)
on the line that gives the figure:
  PASS                    the target is met
  MISSED (or OVER TARGET) the target is missed
  FAILED (or MISMATCH)    a wrong answer: the benchmark also exits non-zero
A figure without a target prints none of them ("(reported)"), and a --quick run judges nothing.

This lists every miss and failure, and counts the verdicts. With --strict it exits 1 when there
is a miss or a failure, or when the log holds no verdict at all (a benchmark that stopped judging
is a rotten one) — `make bench-strict`.

Usage: python bench/summary.py build/bench.log [--strict]
"""

import re
import sys

PASS = re.compile(r"\bPASS\b")
MISS = re.compile(r"\b(MISSED|OVER TARGET)\b")
FAIL = re.compile(r"\b(FAILED|MISMATCH)\b")


def verdicts(lines) -> dict:
    """{'pass': [...], 'miss': [...], 'fail': [...]}: the lines carrying each kind of verdict (a
    line with a failure and a miss counts as a failure)."""
    out = {"pass": [], "miss": [], "fail": []}
    for line in lines:
        line = line.strip()
        if FAIL.search(line):
            out["fail"].append(line)
        elif MISS.search(line):
            out["miss"].append(line)
        elif PASS.search(line):
            out["pass"].append(line)
    return out


def main() -> int:
    path = sys.argv[1]
    strict = "--strict" in sys.argv[2:]
    with open(path, encoding="utf-8", errors="replace") as f:
        found = verdicts(f)
    print(
        f"\n== bench summary ({path}): {len(found['pass'])} verdict line(s) PASS, "
        f"{len(found['miss'])} missed target(s), {len(found['fail'])} wrong answer(s)"
    )
    for kind in ("fail", "miss"):
        for line in found[kind]:
            print("  " + line)
    if not any(found.values()):
        print("  no verdict at all: a benchmark printed nothing to judge")
        return 1 if strict else 0
    return 1 if strict and (found["miss"] or found["fail"]) else 0


if __name__ == "__main__":
    sys.exit(main())
