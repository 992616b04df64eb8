"""The verdicts of one `make bench` run, gathered: every line of the benchmarks' output whose
verdict is a miss (MISSED, OVER TARGET, FAILED), so a missed target is never lost in the scroll.
With --strict it exits 1 when there is one (`make bench-strict`).

Usage: python bench/summary.py build/bench.log [--strict]
"""

import re
import sys

MISS = re.compile(r"\b(MISSED|OVER TARGET|FAILED)\b")


def main() -> int:
    path = sys.argv[1]
    strict = "--strict" in sys.argv[2:]
    with open(path, encoding="utf-8", errors="replace") as f:
        misses = [line.rstrip() for line in f if MISS.search(line)]
    print(f"\n== bench summary: {len(misses)} missed target(s) ({path})")
    for line in misses:
        print("  " + line.strip())
    return 1 if strict and misses else 0


if __name__ == "__main__":
    sys.exit(main())
