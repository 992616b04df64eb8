# ruff: noqa: F811 (test functions take the fixtures imported from support.s3_lake by name)
"""Object storage (issue 10 item 3): Paimon tables on a real S3-compatible server the tests start on
127.0.0.1 (moto's server mode, test/python/support/s3_server.py, signatures enforced; the server
fixture and the helpers are support/s3_lake.py's), written there by pypaimon through its own S3 file
IO (pyarrow's S3 client, the same Paimon option keys), read by every lake function, built/refreshed
into the serving layer and its mart published back to the bucket (issue 19) through
`options := MAP {...}` or the standard AWS environment variables. The follower on S3 is
test_s3_follow.py's; errors, what they say and DuckDB's sandbox are test_s3_errors.py's.

Oracles: pypaimon's own read of the same S3 table (and of the published mart), the rows written
(and the mart of them, in plain Python), the snapshot files as stored in the bucket (read with
boto3), and conftest's pure-Python dashboard oracle — never the extension.

Credentials are bound as a prepared parameter (`options := $2::MAP(VARCHAR, VARCHAR)`) in the
leak checks: a binder error carries the statement's text (`LINE 1: ...`), so a secret written
literally into the SQL would come back in DuckDB's own echo of the user's query, not through
streamhouse. The checks look for the real secret, a distinctive wrong one and the access key in
serving_status() and serving_meta after builds, refreshes and publishes, in serving_publish's row,
and in the errors of a wrong secret (given as an option or in AWS_SECRET_ACCESS_KEY).
"""

from __future__ import annotations

import json
import random

import duckdb
import pytest
from conftest import connect, gen_rows, oracle_summary, sql_literal
from support.lake_util import canon, read_mart
from support.s3_lake import (  # noqa: F401 (s3, accounts, orders: the fixtures, used by name)
    BUCKET,
    ORDER_COLS,
    S3,
    WRONG_SECRET,
    accounts,
    assert_dashboards,
    assert_no_secret,
    build_s3,
    dicts,
    merged_orders,
    orders,
    orders_table,
    q,
    run_child,
    s3,
    served,
    status,
    status_and_meta_text,
)

# --- reads equal pypaimon's ------------------------------------------------------------------


def test_scan_equals_pypaimon(s3, accounts):
    con = connect()
    got = dicts(con, "SELECT * FROM paimon_scan({args})", s3.path("accounts"), s3.options())
    assert got, "empty scan"
    assert canon(got, ["id", "bal", "op"]) == canon(accounts.read(), ["id", "bal", "op"])
    assert [d[0] for d in con.description] == ["id", "bal", "op"]


def test_scan_with_options_as_a_map_literal(s3, accounts):
    """The form a user types: MAP {'s3.endpoint': ..., ...} written into the statement."""
    opts = ", ".join(f"{sql_literal(k)}: {sql_literal(v)}" for k, v in s3.options().items())
    rows = connect().execute(
        f"SELECT id, bal FROM paimon_scan({sql_literal(s3.path('accounts'))}, options := MAP {{{opts}}})"
    )
    assert sorted(rows.fetchall()) == canon(accounts.read(), ["id", "bal"])


def test_time_travel_equals_pypaimon(s3, accounts):
    con = connect()
    for n in range(1, len(accounts.commits) + 1):
        got = dicts(con, "SELECT * FROM paimon_scan({args})", s3.path("accounts"), s3.options(), snapshot=n)
        want = accounts.read(**{"scan.snapshot-id": str(n)})
        assert canon(got, ["id", "bal", "op"]) == canon(want, ["id", "bal", "op"]), f"snapshot {n}"


def test_projection_and_count(s3, accounts):
    con = connect()
    bal = q(con, "SELECT bal FROM paimon_scan({args})", s3.path("accounts"), s3.options())
    assert sorted(b for (b,) in bal) == sorted(r["bal"] for r in accounts.read())
    count = q(con, "SELECT count(*) FROM paimon_scan({args})", s3.path("accounts"), s3.options())
    assert count == [(len(accounts.read()),)]
    some = q(con, "SELECT id FROM paimon_scan({args}) WHERE bal > 0", s3.path("accounts"), s3.options())
    assert sorted(some) == sorted((r["id"],) for r in accounts.read() if r["bal"] > 0)


def test_snapshots_equal_the_snapshot_files(s3, accounts):
    con = connect()
    got = q(
        con,
        "SELECT snapshot_id, epoch_ms(commit_time), commit_kind, total_records, delta_records, changelog_records "
        "FROM paimon_snapshots({args}) ORDER BY snapshot_id",
        s3.path("accounts"),
        s3.options(),
    )
    client = s3.boto()
    want = []
    for n in range(1, len(accounts.commits) + 1):
        body = client.get_object(Bucket=BUCKET, Key=f"wh/db.db/accounts/snapshot/snapshot-{n}")["Body"].read()
        snap = json.loads(body)
        want.append(
            (
                snap["id"],
                snap["timeMillis"],
                snap["commitKind"],
                snap["totalRecordCount"],
                snap["deltaRecordCount"],
                snap.get("changelogRecordCount"),
            )
        )
    assert got == want


def test_changelog_equals_the_writes(s3, accounts):
    """changelog-producer = input: each snapshot's changes are exactly the rows written in it, with
    their row kind; replayed in order they are pypaimon's batch read."""
    con = connect()
    changes = q(
        con,
        "SELECT snapshot_id, row_kind, id, bal, op FROM paimon_changelog({args})",
        s3.path("accounts"),
        s3.options(),
    )
    by_snapshot: dict = {}
    for snap, kind, id_, bal, op in changes:
        by_snapshot.setdefault(snap, []).append((kind, id_, bal, op))
    written = {
        n + 1: sorted((r["op"], r["id"], r["bal"], r["op"]) for r in rows) for n, rows in enumerate(accounts.commits)
    }
    assert {k: sorted(v) for k, v in by_snapshot.items()} == written
    state: dict = {}
    for _snap, kind, id_, bal, op in changes:
        if kind in ("+I", "+U"):
            state[id_] = (id_, bal, op)
        else:
            state.pop(id_, None)
    assert sorted(state.values()) == canon(accounts.read(), ["id", "bal", "op"])
    later = q(
        con,
        "SELECT snapshot_id, count(*) FROM paimon_changelog({args}) GROUP BY ALL ORDER BY 1",
        s3.path("accounts"),
        s3.options(),
        from_snapshot=3,
    )
    # each commit is one snapshot, numbered from 1: the changes of snapshots 3.. and no other
    assert later == [(n + 1, len(rows)) for n, rows in enumerate(accounts.commits) if n >= 2]


# --- the serving layer from S3 ---------------------------------------------------------------


def refresh_s3(con, s3: S3, table: str, options: dict | None = None) -> dict:
    return dicts(con, "SELECT * FROM serving_refresh({args})", "paimon:" + s3.path(table), options)[0]


def test_serving_build_from_s3(s3, orders):
    con = connect()
    rows = merged_orders(orders)
    got = build_s3(con, s3, "orders", s3.options())
    want = oracle_summary(rows)
    assert {k: got[k] for k in want} == want
    assert got["lake_snapshot"] == 1
    assert got["source"] == "paimon:" + s3.path("orders")
    assert_dashboards(con, rows)
    st = status(con)
    assert st["source"] == "paimon:" + s3.path("orders")
    assert st["lake_snapshot"] == 1 and st["lake_latest_snapshot"] == 1 and st["lag_snapshots"] == 0
    assert_no_secret(status_and_meta_text(con), s3, "serving_status/serving_meta after a build")


def test_serving_refresh_after_a_new_commit(s3):
    rows, companies = gen_rows(seed=32, n_rows=800, n_companies=6, n_days=15)
    t = orders_table(s3, "orders_refresh", rows)
    con = connect()
    build_s3(con, s3, "orders_refresh", s3.options())
    rng = random.Random(5)
    changed = [
        (oid, rng.choice(companies), day, rng.randint(-(10**6), 10**6)) for oid, _c, day, _r in rng.sample(rows, 60)
    ]
    new = [(10**15 + i, rng.choice(companies), rows[i][2], rng.randint(0, 999)) for i in range(25)]
    t.commit([dict(zip(ORDER_COLS, r, strict=True)) for r in changed + new])
    got = refresh_s3(con, s3, "orders_refresh", s3.options())
    assert (got["inserted"], got["updated"], got["deleted"]) == (25, 60, 0)
    assert got["lake_snapshot"] == 2
    assert_dashboards(con, merged_orders(t))
    again = refresh_s3(con, s3, "orders_refresh", s3.options())  # nothing new: nothing changes
    assert (again["inserted"], again["updated"], again["deleted"]) == (0, 0, 0)
    st = status(con)
    assert st["refreshes"] == 2 and st["lake_snapshot"] == 2 and st["lag_snapshots"] == 0
    assert_no_secret(status_and_meta_text(con), s3, "serving_status/serving_meta after refreshes")


# --- credentials from the standard AWS environment variables ---------------------------------


def test_env_credentials_in_a_fresh_process(s3, accounts, orders, ext_path):
    """AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_REGION / AWS_ENDPOINT_URL set before the
    process starts, no options at all: every lake function and a lake build work."""
    path = s3.path("accounts")
    calls = [
        ("SELECT id, bal, op FROM paimon_scan(?)", [path]),
        ("SELECT count(*) FROM paimon_snapshots(?)", [path]),
        ("SELECT count(*) FROM paimon_changelog(?)", [path]),
        ("SELECT fct_rows, lake_snapshot FROM serving_build(?)", ["paimon:" + s3.path("orders")]),
    ]
    results = run_child(ext_path, s3.env(), calls)
    for (sql, _), (kind, value) in zip(calls, results, strict=True):
        assert kind == "rows", f"{sql}: {value}"
    assert sorted(results[0][1]) == canon(accounts.read(), ["id", "bal", "op"])
    assert results[1][1] == [(len(accounts.commits),)]
    assert results[2][1] == [(sum(len(c) for c in accounts.commits),)]
    assert results[3][1] == [(len(merged_orders(orders)), 1)]


def test_env_credentials_set_in_process_before_connect(s3, accounts, monkeypatch):
    for k, v in s3.env().items():
        monkeypatch.setenv(k, v)
    con = connect()  # a new database, LOADed after the variables are set
    got = q(con, "SELECT id, bal, op FROM paimon_scan({args})", s3.path("accounts"))
    assert sorted(got) == canon(accounts.read(), ["id", "bal", "op"])


def test_wrong_env_secret_is_refused_without_leaking_it(s3, accounts, ext_path):
    path = s3.path("accounts")
    [(kind, value)] = run_child(ext_path, s3.env(), [("SELECT count(*) FROM paimon_snapshots(?)", [path])])
    assert (kind, value) == ("rows", [(len(accounts.commits),)]), f"the right secret must work: {value}"
    env = {**s3.env(), "AWS_SECRET_ACCESS_KEY": WRONG_SECRET}
    calls = [
        ("SELECT * FROM paimon_scan(?)", [path]),
        ("SELECT * FROM paimon_snapshots(?)", [path]),
        ("SELECT * FROM serving_build(?)", ["paimon:" + path]),
    ]
    for (sql, _), (kind, value) in zip(calls, run_child(ext_path, env, calls), strict=True):
        assert kind == "error", f"{sql} succeeded with a wrong secret: {value}"
        assert path in value, f"{sql}: the error does not name the path: {value}"
        assert_no_secret(value, s3, f"{sql}'s error")


# --- publishing the mart to object storage (issue 19) ----------------------------------------


def publish_s3(con, s3: S3, table: str, options: dict) -> dict:
    return dicts(con, "SELECT * FROM serving_publish({args})", "paimon:" + s3.path(table), options)[0]


def mart_oracle(rows) -> dict:
    """{(company, order_day): (revenue, orders)} of (order_id, company, order_day, revenue) rows."""
    cells: dict = {}
    for _oid, company, order_day, revenue in rows:
        r, n = cells.get((company, order_day), (0, 0))
        cells[(company, order_day)] = (r + revenue, n + 1)
    return cells


def s3_mart(s3: S3, table: str) -> dict:
    """The published mart table as pypaimon reads it from the bucket."""
    return read_mart(s3.catalog, table)


def test_publish_to_s3_and_a_replica_serves_it(s3):
    rows, companies = gen_rows(seed=35, n_rows=900, n_companies=6, n_days=12)
    t = orders_table(s3, "orders_publish", rows)
    con = connect()
    build_s3(con, s3, "orders_publish", s3.options())
    got = publish_s3(con, s3, "mart_published", s3.options())
    want = mart_oracle(merged_orders(t))
    assert (got["snapshot"], got["upserted"], got["deleted"]) == (1, len(want), 0)
    assert s3_mart(s3, "mart_published") == want
    rng = random.Random(9)
    changed = [(oid, rng.choice(companies), d, rng.randint(-999, 999)) for oid, _c, d, _r in rng.sample(rows, 30)]
    t.commit([dict(zip(ORDER_COLS, r, strict=True)) for r in changed])
    refresh_s3(con, s3, "orders_publish", s3.options())
    after = mart_oracle(merged_orders(t))
    got = publish_s3(con, s3, "mart_published", s3.options())
    moved = sum(1 for k, v in after.items() if want.get(k) != v)
    assert (got["snapshot"], got["upserted"], got["deleted"]) == (2, moved, sum(1 for k in want if k not in after))
    assert s3_mart(s3, "mart_published") == after
    replica = connect()
    built = build_s3(replica, s3, "mart_published", s3.options())
    assert (built["mart_rows"], built["fct_rows"]) == (len(after), sum(n for _r, n in after.values()))
    assert_dashboards_of_mart(replica, after)
    assert_no_secret(repr(got) + status_and_meta_text(con), s3, "serving_publish's row and status")


def assert_dashboards_of_mart(con, mart: dict) -> None:
    per: dict = {}
    for (company, d), (revenue, _n) in mart.items():
        per.setdefault(company, []).append((d, revenue))
    for company, days in per.items():
        want = sorted(days, key=lambda dr: (-dr[1], dr[0]))
        assert con.execute("SELECT * FROM serving_dashboard(?, top := 1000)", [company]).fetchall() == want


def test_publish_to_s3_with_a_wrong_secret_fails_and_leaks_nothing(s3, orders):
    con = connect()
    build_s3(con, s3, "orders", s3.options())
    before = served(con)
    path = s3.path("mart_never")
    with pytest.raises(duckdb.Error) as e:
        publish_s3(con, s3, "mart_never", s3.options(**{"s3.secret-key": WRONG_SECRET}))
    msg = str(e.value)
    assert f"serving_publish: Paimon table '{path}'" in msg and "access denied" in msg, msg
    assert_no_secret(msg, s3, "serving_publish's error")
    assert served(con) == before
    listed = s3.boto().list_objects_v2(Bucket=BUCKET, Prefix="wh/db.db/mart_never/")
    assert listed.get("KeyCount", 0) == 0, "a refused publish created objects"
