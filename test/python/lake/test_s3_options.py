# ruff: noqa: F811 (test functions take the fixtures imported from support.s3_lake by name)
"""Object storage, the documented forms test_s3.py does not drive (issue 39): storage options given
to a build are remembered for later refreshes, the follower and serving_status of the same table;
`FROM 'paimon:s3://...'`; the `s3a://` scheme; the region's own wording when none is set; a session
token (`AWS_SESSION_TOKEN` or `s3.session.token`) sent with every request and never shown.

Oracles as in test_s3.py (whose server fixture, support/s3_lake.py's, this module shares):
pypaimon's own read of the S3 table and conftest's pure-Python dashboard oracle, never the
extension; for the session token (moto does not check tokens) the request headers a stand-in
endpoint on 127.0.0.1 received."""

from __future__ import annotations

import random

import duckdb
import pytest
from conftest import connect, gen_rows, sql_literal
from support.http_stub import HttpStub
from support.lake_util import canon
from support.s3_lake import (  # noqa: F401 (s3, accounts: the fixtures, used by name)
    ORDER_COLS,
    WRONG_SECRET,
    accounts,
    assert_dashboards,
    assert_no_secret,
    build_s3,
    map_param,
    merged_orders,
    orders_table,
    q,
    run_child,
    s3,
    status,
    wait_for,
)


def changed(rows, companies, rng: random.Random, n: int) -> list[dict]:
    return [
        dict(zip(ORDER_COLS, (oid, rng.choice(companies), d, rng.randint(-999, 999)), strict=True))
        for oid, _c, d, _r in rng.sample(rows, n)
    ]


def test_options_given_to_a_build_serve_refresh_follow_and_status(s3):
    """Built with options := (no AWS_* variables in this process): a refresh, serving_status's
    lake columns and a follower of the same table, all called without options, reach it."""
    rows, companies = gen_rows(seed=41, n_rows=300, n_companies=4, n_days=8)
    t = orders_table(s3, "orders_remembered", rows)
    source = "paimon:" + s3.path("orders_remembered")
    con = connect()
    build_s3(con, s3, "orders_remembered", s3.options())
    rng = random.Random(4)
    t.commit(changed(rows, companies, rng, 25))
    st = status(con)
    assert (st["lake_snapshot"], st["lake_latest_snapshot"], st["lag_snapshots"]) == (1, 2, 1), st
    got = con.execute("SELECT inserted, updated, deleted, lake_snapshot FROM serving_refresh(?)", [source]).fetchone()
    assert got == (0, 25, 0, 2), got
    assert_dashboards(con, merged_orders(t))
    assert con.execute("SELECT following FROM serving_follow(?, every := INTERVAL '50 ms')", [source]).fetchone() == (
        source,
    )
    try:
        t.commit(changed(rows, companies, rng, 25))
        st = wait_for(con, lambda st: st["lake_snapshot"] == 3 or st["last_error"], "the follower's apply", 30)
        assert (st["lake_snapshot"], st["last_error"]) == (3, None), st
        assert_dashboards(con, merged_orders(t))
    finally:
        con.execute("SELECT * FROM serving_unfollow()").fetchall()
    assert_no_secret(repr(con.execute("SELECT * FROM serving_status()").fetchall()), s3, "serving_status")


def test_a_table_named_in_from_on_s3_is_read_by_paimon_scan(s3, accounts, ext_path):
    """`FROM 'paimon:s3://...'` (credentials from the AWS_* variables, a fresh process): object
    storage is always paimon_scan's (EXPLAIN says PAIMON_SCAN), with pypaimon's rows."""
    table = sql_literal("paimon:" + s3.path("accounts"))
    calls = [
        (f"EXPLAIN SELECT * FROM {table}", []),
        (f"SELECT id, bal, op FROM {table}", []),
    ]
    (kind_plan, plan), (kind_rows, got) = run_child(ext_path, s3.env(), calls)
    assert (kind_plan, kind_rows) == ("rows", "rows"), (plan, got)
    text = "\n".join(r[1] for r in plan)
    assert "PAIMON_SCAN" in text and "READ_PARQUET" not in text, text
    assert sorted(got) == canon(accounts.read(), ["id", "bal", "op"])


def test_the_s3a_scheme_reads_the_same_table(s3, accounts):
    con = connect()
    path = s3.path("accounts").replace("s3://", "s3a://", 1)
    got = q(con, "SELECT id, bal, op FROM paimon_scan({args})", path, s3.options())
    assert sorted(got) == canon(accounts.read(), ["id", "bal", "op"])
    snaps = q(con, "SELECT count(*) FROM paimon_snapshots({args})", path, s3.options())
    assert snaps == [(len(accounts.commits),)]


def test_no_region_is_refused_in_the_documented_words(s3, accounts, ext_path):
    """Neither s3.region nor AWS_REGION (a fresh process without AWS_* variables; the endpoint
    and keys given): the error names the path and says how to set the region."""
    opts = {k: v for k, v in s3.options().items() if k != "s3.region"}
    opts["s3.secret-key"] = WRONG_SECRET  # whatever the error, it must not show this either
    literal = "MAP {" + ", ".join(f"{sql_literal(k)}: {sql_literal(v)}" for k, v in opts.items()) + "}"
    path = s3.path("accounts")
    [(kind, said)] = run_child(
        ext_path, {}, [(f"SELECT count(*) FROM paimon_scan({sql_literal(path)}, options := {literal})", [])]
    )
    assert kind == "error", said
    ours = said.split("\n\nLINE ")[0]  # DuckDB quotes the statement (and so the literal map) after it
    assert path in ours, ours
    assert "the S3 region is not set: give options := MAP {'s3.region': '<region>'} or set AWS_REGION" in ours, ours
    assert WRONG_SECRET not in ours, ours


@pytest.mark.parametrize("function", ["paimon_scan", "paimon_snapshots"])
def test_an_s3a_path_is_named_as_given_in_errors(s3, function):
    path = s3.path("no_such_table").replace("s3://", "s3a://", 1)
    with pytest.raises(duckdb.Error) as e:
        q(connect(), f"SELECT * FROM {function}({{args}})", path, s3.options())
    assert path in str(e.value) and "no paimon table there" in str(e.value).lower(), str(e.value)


SESSION_TOKEN = "FwoGZXIvYXdzEXAMPLE-session-token-3b9e-do-not-leak"


@pytest.mark.parametrize("given", ["env", "options", "none"])
def test_the_session_token_is_sent_with_every_request_and_never_shown(s3, given, ext_path):
    """Temporary credentials: the session token, from AWS_SESSION_TOKEN (a fresh process) or
    options := MAP {'s3.session.token': ...}, goes to the endpoint in every request's
    x-amz-security-token header (the endpoint, a stand-in on 127.0.0.1, records the headers and
    answers HTTP 500); no token given, no such header. The error names the path and never the token."""
    path = s3.path("accounts")
    with HttpStub("500") as stub:
        endpoint = f"http://127.0.0.1:{stub.port}"
        calls = [
            ("SELECT count(*) FROM paimon_scan($1, options := $2::MAP(VARCHAR, VARCHAR))", path),
            ("SELECT * FROM serving_build($1, options := $2::MAP(VARCHAR, VARCHAR))", "paimon:" + path),
        ]
        options = s3.options(**{"s3.endpoint": endpoint})
        env = {}
        if given == "options":
            options["s3.session.token"] = SESSION_TOKEN
        elif given == "env":
            env = {"AWS_SESSION_TOKEN": SESSION_TOKEN}
        results = run_child(ext_path, env, [(sql, [arg, map_param(options)]) for sql, arg in calls])
    assert stub.headers, "the endpoint was never asked"
    tokens = {h.get("x-amz-security-token") for h in stub.headers}
    assert tokens == ({None} if given == "none" else {SESSION_TOKEN}), (given, tokens, stub.requests)
    # Signed (so the token is part of what the signature covers, as AWS requires).
    assert all(h.get("authorization", "").startswith("AWS4-HMAC-SHA256 ") for h in stub.headers), stub.headers
    for (sql, _), (kind, said) in zip(calls, results, strict=True):
        assert kind == "error", f"{sql}: {said}"
        assert path in said, f"{sql}: the error does not name {path}: {said}"
        assert SESSION_TOKEN not in said, f"{sql}: the error shows the session token: {said}"
        assert_no_secret(said, s3, f"{sql}'s error")
