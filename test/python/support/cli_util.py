"""The duckdb CLI's output, shared by the tests that run the CLI (bindings/test_cli.py,
bindings/test_description.py, host/test_versions.py, host/test_lifecycle_matrix.py)."""

from __future__ import annotations

import json


def json_results(text: str) -> list:
    """The CLI's -json mode prints one JSON array per result set."""
    dec = json.JSONDecoder()
    out, i = [], 0
    while True:
        while i < len(text) and text[i].isspace():
            i += 1
        if i >= len(text):
            return out
        value, i = dec.raw_decode(text, i)
        out.append(value)
