"""The fuzz's edge values (fuzz/test_fuzz.py): each a label shown in reproducers, a Python value
and, when it has no Python form, its SQL literal."""

from __future__ import annotations

import datetime
from dataclasses import dataclass

from conftest import sql_literal

MB = 2**20

# ------------------------------------------------------------------------------------------------
# Values: (label shown in reproducers, Python value, SQL literal or None when there is none).
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class V:
    label: str
    value: object
    literal: str | None = None

    def sql(self) -> str:
        if self.literal is not None:
            return self.literal
        v = self.value
        if v is None:
            return "NULL"
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, (int, float)):
            return repr(v)
        if isinstance(v, datetime.date):
            return f"DATE '{v.isoformat()}'"
        if isinstance(v, bytes):
            return "'" + "".join(f"\\x{b:02X}" for b in v) + "'::BLOB"
        return sql_literal(v)


def label_str(s: str) -> str:
    if len(s) > 120:
        # Describe long strings by their shape, not their bytes.
        head = s[:16]
        return f"<{len(s)}-char string starting {head!r}>"
    return repr(s)


def S(s: str, label: str | None = None) -> V:
    return V(label or label_str(s), s)


HUGE = "x" * MB
STRINGS_STATIC = [
    S(""),
    S(" "),
    S("\t\n\r"),
    S("acme"),
    S("O'Reilly"),
    S("東京商事"),
    S("a"),
    S("a\x00b"),
    S("\x00"),
    S("x' OR '1'='1"),
    S("😀"),
    S(HUGE, "'x' * 1 MB"),
    S("\x00" * 1024, "1024 NULs"),
    S("😀" * 100_000, "'😀' * 100000"),
    S("e\u0301"),
    S("\u202egnp.x"),
    S("\ufeff"),
    S("\x01\x02\x1b[2J\x7f\x08"),
    S("%s%n%x%p"),
    S("{}"),
    S("$1"),
    S("?"),
    S(":name"),
    S("'"),
    S('"'),
    S("`"),
    S("\\"),
    S(";"),
    S("--"),
    S("/*"),
    S("a.b"),
    S("a..b"),
    S(".a"),
    S("a."),
    S("."),
    S(".."),
    S("..."),
    S("`a`.`b`"),
    S('"fz_base"'),
    S("main.fz_base"),
    S("memory.main.fz_base"),
    S("FZ_BASE"),
    S(" fz_base "),
    S("fz_base"),
    S("fz_view"),
    S("fz_changes"),
    S("fct_orders"),
    S("mart_daily"),
    S("serving_meta"),
    S("serving_mart_counts"),
    S("__streamhouse_handoff"),
    S("duckdb_tables()"),
    S("information_schema.tables"),
    S("system.main.duckdb_tables"),
    S("temp.main.x"),
    S("a" * 70_000, "'a' * 70000"),
    S(".".join(["a"] * 100_000), "'a.a.a...' (100000 parts)"),
    S("fz_base\x00; DROP TABLE fct_orders"),
    S("fz_base\x00garbage"),
    S("acme\x00"),
    S("paimon:"),
    S("paimon: "),
    S("paimon:paimon:"),
    S("PAIMON:/x"),
    S("s3://bucket/t"),
    S("s3://bucket/t.parquet"),
    S("file:///etc"),
    S("http://127.0.0.1:9/x.parquet"),
    S("gs://x/y.parquet"),
    S("hf://x/y.csv"),
    S("~"),
    S("~/x.parquet"),
    S("C:\\x.parquet"),
    S("\\\\server\\share\\x.csv"),
    S("*"),
    S("**"),
    S("[a-"),
    S("/dev/*.csv"),
    S("/proc/*/status.csv"),
    S("/proc"),
    S("/proc/self/mem"),
    S("/proc/self/fd/0"),
    S("/proc/self/environ"),
    S("/dev/zero"),
    S("/dev/stdin"),
    S("/dev/null"),
    S("/dev/full"),
    S("/dev/urandom"),
    S("/"),
    S("/etc/passwd"),
    S("/etc/shadow"),
    S("/root"),
    S("/nonexistent"),
    S("/nonexistent/x.parquet"),
    S("paimon:/proc"),
    S("paimon:/proc/self/mem"),
    S("paimon:/dev/zero"),
    S("paimon:/dev/stdin"),
    S("paimon:/"),
    S("paimon:/etc/passwd"),
    S("/proc/self/mem.csv"),
    S("/dev/stdin.csv"),
]

INTERVALS = [
    V("INTERVAL '10 ms'", None, "INTERVAL '10 milliseconds'"),
    V("INTERVAL '1 ms'", None, "INTERVAL '1 millisecond'"),
    V("INTERVAL '-1 day'", None, "INTERVAL '-1 day'"),
    V("INTERVAL '0 s'", None, "INTERVAL '0 seconds'"),
    V("INTERVAL '1000000 years'", None, "INTERVAL '1000000 years'"),
    V("INTERVAL '1 month'", None, "INTERVAL '1 month'"),
    V("'1 second'", "1 second"),
    V("'abc'", "abc"),
    V("'-5 us'", "-5 us"),
    V("NULL::INTERVAL", None, "NULL::INTERVAL"),
    V("max INTERVAL", None, "INTERVAL '2147483647 months 2147483647 days 9223372036854775807 microseconds'"),
]
NUMBERS = [
    V("0", 0),
    V("1", 1),
    V("2", 2),
    V("3", 3),
    V("-1", -1),
    V("2**31-1", 2**31 - 1),
    V("-2**31", -(2**31)),
    V("2**31", 2**31),
    V("2**63-1", 2**63 - 1),
    V("-2**63", -(2**63)),
    V("2**64", 2**64),
    V("1.5", 1.5),
    V("-0.5", -0.5),
    V("nan", float("nan"), "'NaN'::DOUBLE"),
    V("inf", float("inf"), "'inf'::DOUBLE"),
    V("1e30", 1e30),
    V("'7'", "7"),
    V("' 7 '", " 7 "),
    V("'abc'", "abc"),
    V("''", ""),
    V("true", True),
    V("false", False),
    V("NULL", None),
    V("DATE", datetime.date(2024, 1, 1)),
    V("blob", b"\x00\xff"),
    V("HUGEINT max", None, "170141183460469231731687303715884105727::HUGEINT"),
    V("NULL::INT", None, "NULL::INT"),
    V("INTERVAL", None, "INTERVAL 1 DAY"),
    V("list", None, "[1, 2]"),
    V("struct", None, "{'a': 1}"),
    V("uuid", None, "uuid()"),
    V("random", None, "(random() * 10)::INT"),
]
# Non-strings in a VARCHAR slot: implicit casts (or a binder error).
CAST_VALUES = [
    V("42", 42),
    V("-1", -1),
    V("true", True),
    V("1.5", 1.5),
    V("DATE", datetime.date(2024, 1, 1)),
    V("NULL", None),
    V("NULL::INT", None, "NULL::INT"),
    V("NULL::VARCHAR", None, "NULL::VARCHAR"),
    V("2**64", 2**64),
    V("blob", b"a\x00b"),
    V("list", None, "['a', 'b']"),
    V("struct", None, "{'a': 'b'}"),
    V("TIMESTAMP", None, "TIMESTAMP '2024-01-01 00:00:00'"),
    V("uuid", None, "uuid()::VARCHAR"),
    V("map", None, "MAP {'k': 'v'}"),
    V("blob literal", None, "'\\xFF\\x00'::BLOB"),
]
