"""The lifecycle matrix's own rules (test/python/support/matrix_util.py), on known inputs: which
crash at interpreter exit is the documented one, and which functions the README documents. Both
decide whether a matrix test may pass or xfail, so each must refuse what it is not."""

from __future__ import annotations

import signal

from support.matrix_util import documented_abort, documented_functions

ABRT = -signal.SIGABRT


def test_the_documented_abort_words_are_accepted():
    # 2.0.1 with streamhouse (README), and 1.5.6 / 2.0.0's own abort without it (their control).
    assert documented_abort(ABRT, "RESULT {}\nterminate called after throwing an instance of ''\n")
    assert documented_abort(ABRT, "FATAL: exception not rethrown\n")
    assert documented_abort(ABRT, "terminate called without an active exception\n")
    # 2.0.0 with streamhouse: the nameless type printed as a stray byte.
    stray = "terminate called after throwing an instance of '\x04'\nFATAL: exception not rethrown\n"
    assert documented_abort(ABRT, stray)


def test_an_escaping_exception_or_another_signal_is_not_documented():
    # A C++ exception escaping a callback of ours names its type: never the documented abort.
    escaped = "terminate called after throwing an instance of 'duckdb::InvalidInputException'\n  what():  x\n"
    assert not documented_abort(ABRT, escaped)
    assert not documented_abort(ABRT, escaped + "FATAL: exception not rethrown\n")
    assert not documented_abort(ABRT, "terminate called recursively\n")
    assert not documented_abort(ABRT, "Aborted\n")  # an abort with no words at all
    assert not documented_abort(ABRT, "xterminate called without an active exception (quoted)\n")
    assert not documented_abort(-signal.SIGSEGV, "terminate called without an active exception\n")
    assert not documented_abort(1, "FATAL: exception not rethrown\n")


def test_every_function_of_the_function_table_is_found():
    names = documented_functions()
    # The ones an older hand-written list missed (issue 39, finding 4), and the first and last rows.
    for name in ["serving_layers", "serving_publish", "paimon_read_plan", "paimon_mart_ddl", "paimon_mart_job"]:
        assert name in names
    assert {"serving_build", "paimon_tier_upsert", "fluss_scan", "fluss_tier_ddl"} <= names
    # `FROM 'paimon:<dir>'` and `columns := MAP {...}` are rows of the table but no functions.
    assert all(n.startswith(("serving_", "paimon_", "fluss_")) for n in names), names
