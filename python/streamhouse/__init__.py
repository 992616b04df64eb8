"""streamhouse: the DuckDB extension, packaged for Python.

    import duckdb, streamhouse
    con = duckdb.connect(config={"allow_unsigned_extensions": "true"})
    streamhouse.load(con)
    con.execute("CREATE TABLE orders AS SELECT * FROM (VALUES (1, 'acme', DATE '2026-11-01', 1200), "
                "(2, 'acme', DATE '2026-11-02', 300)) t(order_id, company, order_day, revenue)")
    print(con.execute("SELECT fct_rows, mart_rows FROM serving_build('orders')").fetchall())
    print(con.execute("SELECT * FROM serving_dashboard('acme')").fetchall())

Run the serving functions with `con.execute(...)`: `con.sql(...)` makes a lazy relation, which runs
nothing until its rows are fetched or shown and runs again each time, so a `serving_build` through
it builds nothing in a script, and a `serving_refresh` applies again at every `show()`.

The wheel carries the extension binary (`extension_path()`); `load` runs DuckDB's `LOAD` of it on
a connection. The binary is not signed by DuckDB, so the connection must allow unsigned extensions.
"""

from __future__ import annotations

import os

try:
    from ._version import __version__  # written by scripts/build_wheel.py
except ImportError:  # a source checkout, not an installed wheel
    __version__ = "0+unknown"

__all__ = ["LoadError", "__version__", "extension_path", "load"]

_ARTIFACT = "streamhouse.duckdb_extension"


class LoadError(RuntimeError):
    """DuckDB refused to load the packaged extension; the message says what to change."""


def extension_path() -> str:
    """Absolute path of the packaged extension binary."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), _ARTIFACT)


def _sql_literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def load(con) -> None:
    """LOADs the packaged extension into a DuckDB connection (`duckdb.connect(...)`).

    Raises LoadError when DuckDB refuses it: the connection does not allow unsigned extensions, or
    the DuckDB is older than the C API version the extension needs (1.5.6)."""
    path = extension_path()
    if not os.path.isfile(path):
        raise LoadError(f"the streamhouse extension binary is missing: {path} (reinstall the wheel)")
    try:
        con.execute("LOAD " + _sql_literal(path))
    except Exception as e:  # duckdb.Error subclasses; not imported so any DuckDB client works
        message = str(e)
        if "allow_unsigned_extensions" in message or "signature is either missing or invalid" in message:
            raise LoadError(
                "DuckDB refused to load streamhouse because this connection does not allow unsigned "
                "extensions (streamhouse is not signed by DuckDB). Connect with "
                "duckdb.connect(config={'allow_unsigned_extensions': 'true'}) and call "
                f"streamhouse.load(con) again. DuckDB said: {message}"
            ) from e
        if "C API version" in message:
            raise LoadError(
                f"this DuckDB cannot load streamhouse {__version__}: it needs DuckDB 1.5.6 or newer "
                "(pip install 'duckdb>=1.5.6'); DuckDB 1.4.5 loads the separate 1.4 LTS build of the "
                f"extension (`make release-1.4`), which this wheel does not carry. DuckDB said: {message}"
            ) from e
        raise
