"""paimon_tier_ddl / paimon_tier_upsert: the Flink SQL for the Paimon tier of a Fluss table."""

from __future__ import annotations

import random
import re

import duckdb
import pytest

CLAUSES = [
    "id INT",
    "bal INT",
    "PRIMARY KEY (id) NOT ENFORCED",
    "'bucket' = '1'",
    "'merge-engine' = 'deduplicate'",
    "'changelog-producer' = 'input'",
]


def sql_value(v) -> str:
    if v is None:
        return "NULL"
    if isinstance(v, int):
        return str(v)
    return "'" + v.replace("'", "''") + "'"


def insert_rows(con, table: str, rows) -> None:
    """Fast bulk insert of small Python tuples (executemany is row-at-a-time)."""
    values = ", ".join("(" + ", ".join(sql_value(v) for v in r) + ")" for r in rows)
    con.execute(f"INSERT INTO {table} VALUES {values}")


def ddl(con, name):
    return con.execute("SELECT paimon_tier_ddl(?)", [name]).fetchone()[0]


def upsert(con, name, i, b):
    return con.execute("SELECT paimon_tier_upsert(?, ?, ?)", [name, i, b]).fetchone()[0]


def flink_name(name: str) -> str:
    """Independent rendering of a dotted Flink table name: backticks, embedded ones doubled."""
    return ".".join("`" + p.replace("`", "``") + "`" for p in name.split("."))


def test_ddl_has_every_clause(con):
    text = ddl(con, "db.acct")
    assert text.startswith("CREATE TABLE `db`.`acct` ("), text
    for clause in CLAUSES:
        assert clause in text, f"missing {clause!r} in:\n{text}"
    # Options live in the WITH (...) block, columns and key before it.
    head, _, options = text.partition(") WITH (")
    assert options, text
    for clause in CLAUSES[:3]:
        assert clause in head
    for clause in CLAUSES[3:]:
        assert clause in options
    assert text.rstrip().endswith(")")
    assert text.count("PRIMARY KEY") == 1 and text.count("CREATE TABLE") == 1


@pytest.mark.parametrize(
    "name", ["acct", "db.acct", "cat.db.acct", "we`ird", "db.we`ird", "``", "東京.口座", "my table.o'reilly", 'a"b']
)
def test_ddl_quotes_names(con, name):
    text = ddl(con, name)
    assert text.startswith(f"CREATE TABLE {flink_name(name)} ("), text
    for clause in CLAUSES:
        assert clause in text


def test_ddl_backtick_doubling_exact(con):
    assert ddl(con, "we`ird").startswith("CREATE TABLE `we``ird` (")
    assert ddl(con, "a.`x`").startswith("CREATE TABLE `a`.```x``` (")


@pytest.mark.parametrize(
    "bad,reason",
    [
        ("a..b", "empty"),
        (".t", "empty"),
        ("t.", "empty"),
        ("", "empty"),
        (".", "empty"),
        (" . ", "empty"),
        ("a.b.c.d", "at most three"),
    ],
)
@pytest.mark.parametrize("fn", ["ddl", "upsert"])
def test_bad_names_are_refused(con, fn, bad, reason):
    function = "paimon_tier_ddl" if fn == "ddl" else "paimon_tier_upsert"
    with pytest.raises(duckdb.Error) as ei:
        if fn == "ddl":
            ddl(con, bad)
        else:
            upsert(con, bad, 1, 2)
    msg = str(ei.value)
    assert f"{function}: invalid table name '{bad}'" in msg, msg
    assert reason in msg, msg
    assert "Error code" not in msg


def test_null_in_null_out(con):
    assert con.execute("SELECT paimon_tier_ddl(NULL)").fetchone()[0] is None
    assert con.execute("SELECT paimon_tier_ddl(CAST(NULL AS VARCHAR))").fetchone()[0] is None
    for args in ["NULL, 1, 2", "'t', NULL, 2", "'t', 1, NULL", "NULL, NULL, NULL"]:
        assert con.execute(f"SELECT paimon_tier_upsert({args})").fetchone()[0] is None, args
    # A NULL row does not make a bad name elsewhere slip through, nor does it fail.
    assert con.execute("SELECT paimon_tier_upsert(NULL, 1, 2)").fetchone()[0] is None


def test_ddl_vectorized_over_table(con):
    """Thousands of names across several vectors, with NULLs mixed in: each row gets its own DDL."""
    rng = random.Random(81)
    names = []
    for i in range(5_000):
        r = rng.random()
        if r < 0.1:
            names.append(None)
        elif r < 0.2:
            names.append(f"cat.db{i}.t`{i}")
        else:
            names.append(f"db.acct_{i}")
    con.execute("CREATE TABLE names (seq INTEGER, name VARCHAR)")
    insert_rows(con, "names", list(enumerate(names)))
    got = con.execute("SELECT seq, paimon_tier_ddl(name) FROM names ORDER BY seq").fetchall()
    assert len(got) == len(names)
    tails = set()
    for (seq, text), name in zip(got, names, strict=True):
        if name is None:
            assert text is None, seq
            continue
        prefix = f"CREATE TABLE {flink_name(name)} ("
        assert text.startswith(prefix), (seq, name, text)
        tails.add(text[len(prefix) :])
    assert len(tails) == 1, "the DDL body must not depend on the table name"
    (tail,) = tails
    for clause in CLAUSES:
        assert clause in tail


def test_ddl_vectorized_constant_and_filtered(con):
    got = con.execute("SELECT paimon_tier_ddl('db.t') FROM range(3000)").fetchall()
    assert len(got) == 3000 and len({g[0] for g in got}) == 1
    assert got[0][0].startswith("CREATE TABLE `db`.`t` (")
    got = con.execute(
        "SELECT i, paimon_tier_ddl('s.t' || i) FROM range(4100) r(i) WHERE i % 3 = 0 ORDER BY i"
    ).fetchall()
    for i, text in got:
        assert text.startswith(f"CREATE TABLE `s`.`t{i}` ("), (i, text)


def test_bad_name_in_a_table_fails_the_query(con):
    con.execute("CREATE TABLE names AS SELECT * FROM (VALUES ('db.ok'), ('db..bad'), ('x')) t(name)")
    with pytest.raises(duckdb.Error) as ei:
        con.execute("SELECT paimon_tier_ddl(name) FROM names").fetchall()
    assert "'db..bad'" in str(ei.value)


@pytest.mark.parametrize(
    "name,i,b,want",
    [
        ("t", 1, 2, "INSERT INTO `t` (id, bal) VALUES (1, 2)"),
        ("db.acct", -1, 7, "INSERT INTO `db`.`acct` (id, bal) VALUES (-1, 7)"),
        ("db.acct", 0, -2147483648, "INSERT INTO `db`.`acct` (id, bal) VALUES (0, -2147483648)"),
        ("c.d.t", 2147483647, 0, "INSERT INTO `c`.`d`.`t` (id, bal) VALUES (2147483647, 0)"),
        ("we`ird", -5, -6, "INSERT INTO `we``ird` (id, bal) VALUES (-5, -6)"),
    ],
)
def test_upsert_renders(con, name, i, b, want):
    assert upsert(con, name, i, b) == want


def test_upsert_literal_arguments(con):
    assert (
        con.execute("SELECT paimon_tier_upsert('t', 1, 2)").fetchone()[0] == "INSERT INTO `t` (id, bal) VALUES (1, 2)"
    )
    assert (
        con.execute("SELECT paimon_tier_upsert('t', -3, -4)").fetchone()[0]
        == "INSERT INTO `t` (id, bal) VALUES (-3, -4)"
    )


UPSERT_RE = re.compile(r"^INSERT INTO `db`\.`acct` \(id, bal\) VALUES \((-?\d+), (-?\d+)\)$")


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_streaming_upserts_equal_batch_last_write(con, seed):
    """Applying the generated statements in order (a bounded streaming read with the
    deduplicate merge engine) gives the same table as the batch answer: last bal per id."""
    rng = random.Random(seed)
    n_ids = rng.choice([5, 50, 500])
    ups = []
    for seq in range(rng.randrange(3_000, 6_000)):
        bal = rng.choice([0, -1, 2**31 - 1, -(2**31), rng.randrange(-(2**31), 2**31)])
        i = rng.randrange(-n_ids, n_ids)
        ups.append((seq, i, bal if rng.random() > 0.05 else None))
    con.execute("CREATE TABLE ups (seq INTEGER, id INTEGER, bal INTEGER)")
    insert_rows(con, "ups", ups)
    stmts = con.execute("SELECT seq, paimon_tier_upsert('db.acct', id, bal) FROM ups ORDER BY seq").fetchall()
    assert [s for s, _ in stmts] == [u[0] for u in ups]

    streaming = {}
    for (seq, text), (_, i, bal) in zip(stmts, ups, strict=True):
        if bal is None:
            assert text is None, (seq, text)
            continue
        m = UPSERT_RE.match(text)
        assert m, text
        sid, sbal = int(m.group(1)), int(m.group(2))
        assert (sid, sbal) == (i, bal), (seq, text)
        streaming[sid] = sbal  # deduplicate merge engine: the latest write per key wins

    batch = {}
    for _, i, bal in reversed(ups):
        if bal is not None and i not in batch:
            batch[i] = bal
    assert streaming == batch
