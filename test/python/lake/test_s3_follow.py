# ruff: noqa: F811 (test functions take the fixtures imported from support.s3_lake by name)
"""Object storage, the follower (issue 10 item 3): serving_follow on Paimon tables on the real
S3-compatible server of support/s3_lake.py (moto on 127.0.0.1, signatures enforced), written there by
pypaimon, the credentials given as `options := MAP {...}`. A follower applies each new commit; a
wrong secret is refused at the call (the path named, nothing followed, the layer unchanged); a
follower whose apply fails — a commit the layer refuses (a NULL company), or its key's permission
revoked on the server — says so in last_error and state 'failing' and applies nothing, and once
the permission is back it catches up.

Oracles: pypaimon's own read of the same S3 table and conftest's pure-Python dashboard oracle, the
layer as served before a failed apply, and the state the server was put in (an IAM user's policy
deleted and put back with boto3) — never the extension.

Credentials are bound as a prepared parameter (`options := $2::MAP(VARCHAR, VARCHAR)`) in the
leak checks: a binder error carries the statement's text (`LINE 1: ...`), so a secret written
literally into the SQL would come back in DuckDB's own echo of the user's query, not through
streamhouse. The checks look for the real secret, a distinctive wrong one and the access key (and
the revoked follower's own key pair) in every error, last_error, serving_status(), serving_meta and
serving_unfollow's rows.
"""

from __future__ import annotations

import json
import random

import boto3
import duckdb
import pytest
from conftest import connect, gen_rows
from support.s3_lake import (  # noqa: F401 (s3, orders: the fixtures, used by name)
    ORDER_COLS,
    S3,
    WRONG_SECRET,
    assert_dashboards,
    assert_no_secret,
    build_s3,
    map_param,
    merged_orders,
    orders,
    orders_table,
    s3,
    served,
    status,
    status_and_meta_text,
    wait_for,
)


def follow_s3(con, s3: S3, table: str, options: dict) -> list:
    return con.execute(
        "SELECT * FROM serving_follow($1, every := INTERVAL '50 ms', options := $2::MAP(VARCHAR, VARCHAR))",
        ["paimon:" + s3.path(table), map_param(options)],
    ).fetchall()


def test_serving_follow_from_s3(s3):
    rows, companies = gen_rows(seed=33, n_rows=500, n_companies=5, n_days=10)
    t = orders_table(s3, "orders_follow", rows)
    con = connect()
    build_s3(con, s3, "orders_follow", s3.options())
    try:
        follow_s3(con, s3, "orders_follow", s3.options())
        rng = random.Random(8)
        for n in (2, 3):
            changed = [
                (oid, rng.choice(companies), d, rng.randint(-999, 999)) for oid, _c, d, _r in rng.sample(rows, 40)
            ]
            t.commit([dict(zip(ORDER_COLS, r, strict=True)) for r in changed])
            wait_for(con, lambda st, n=n: st["lake_snapshot"] == n, f"the follower to apply snapshot {n}")
            assert_dashboards(con, merged_orders(t))
        st = status(con)
        assert st["following"] == "paimon:" + s3.path("orders_follow") and st["last_error"] is None
        assert_no_secret(status_and_meta_text(con), s3, "serving_status/serving_meta while following")
    finally:
        unfollowed = con.execute("SELECT * FROM serving_unfollow()").fetchall()
    assert_no_secret(repr(unfollowed), s3, "serving_unfollow")


def test_serving_follow_with_a_wrong_secret_is_refused_and_leaks_nothing(s3, orders):
    """A wrong secret is refused at the call (the table is opened first): the path is named, no
    credential is shown, nothing follows and the layer is unchanged."""
    con = connect()
    build_s3(con, s3, "orders", s3.options())
    before = served(con)
    path = s3.path("orders")
    with pytest.raises(duckdb.Error) as e:
        follow_s3(con, s3, "orders", s3.options(**{"s3.secret-key": WRONG_SECRET}))
    assert path in str(e.value), str(e.value)
    assert_no_secret(str(e.value), s3, "serving_follow's error")
    assert status(con)["following"] is None
    assert served(con) == before
    assert_no_secret(status_and_meta_text(con), s3, "serving_status/serving_meta")


def test_a_failing_follower_on_s3_leaks_nothing(s3):
    """The follower's own failure branch, with the secret in play: an upstream commit the layer
    refuses (a NULL company) makes every apply fail; last_error names the table and the problem,
    and neither it, serving_status, serving_meta nor serving_unfollow shows a credential."""
    rows, _companies = gen_rows(seed=34, n_rows=200, n_companies=4, n_days=5)
    t = orders_table(s3, "orders_failing", rows)
    con = connect()
    build_s3(con, s3, "orders_failing", s3.options())
    before = served(con)
    follow_s3(con, s3, "orders_failing", s3.options())
    try:
        oid, _c, d, r = rows[0]
        t.commit([dict(zip(ORDER_COLS, (oid, None, d, r), strict=True))])
        st = wait_for(con, lambda st: st["last_error"] is not None, "the follower's error", timeout=30)
        assert st["state"] == "failing", st
        assert s3.path("orders_failing") in st["last_error"] and "company is NULL" in st["last_error"], st
        assert_no_secret(status_and_meta_text(con), s3, "serving_status/serving_meta of a failing follower")
        assert served(con) == before, "a failed apply changed the serving layer"
    finally:
        unfollowed = con.execute("SELECT * FROM serving_unfollow()").fetchall()
    assert unfollowed[0][0] == "paimon:" + s3.path("orders_failing") and unfollowed[0][3] is not None
    assert_no_secret(repr(unfollowed), s3, "serving_unfollow")


ALLOW_ALL = json.dumps({"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]})


def test_a_follower_whose_credentials_are_revoked_fails_on_storage_then_recovers(s3):
    """The storage error of a running follower: its key loses every permission (the IAM user's
    policy deleted on the server) while it follows. The next apply is refused by the storage with
    403 — last_error says access was denied and names the table, the state is 'failing', nothing
    is applied and no credential shows; once the permission is back the follower catches up."""
    rows, companies = gen_rows(seed=35, n_rows=300, n_companies=4, n_days=6)
    t = orders_table(s3, "orders_revoked", rows)
    iam = boto3.client(
        "iam",
        endpoint_url=s3.endpoint,
        region_name=s3.region,
        aws_access_key_id=s3.access_key,
        aws_secret_access_key=s3.secret_key,
    )
    iam.create_user(UserName="follower")
    iam.put_user_policy(UserName="follower", PolicyName="all", PolicyDocument=ALLOW_ALL)
    key = iam.create_access_key(UserName="follower")["AccessKey"]
    opts = s3.options(**{"s3.access-key": key["AccessKeyId"], "s3.secret-key": key["SecretAccessKey"]})
    keys = {"the follower's secret key": key["SecretAccessKey"], "the follower's access key": key["AccessKeyId"]}
    path = s3.path("orders_revoked")
    rng = random.Random(9)

    def commit_changes() -> None:
        t.commit(
            [
                dict(zip(ORDER_COLS, (oid, rng.choice(companies), d, rng.randint(-99, 99)), strict=True))
                for oid, _c, d, _r in rng.sample(rows, 30)
            ]
        )

    con = connect()
    build_s3(con, s3, "orders_revoked", opts)
    follow_s3(con, s3, "orders_revoked", opts)
    try:
        commit_changes()  # the control: with the permission, the follower applies
        wait_for(con, lambda st: st["lake_snapshot"] == 2, "the follower to apply snapshot 2")
        before = served(con)
        iam.delete_user_policy(UserName="follower", PolicyName="all")
        commit_changes()
        st = wait_for(con, lambda st: st["last_error"] is not None, "the follower's storage error", timeout=30)
        assert st["state"] == "failing" and st["lake_snapshot"] == 2, st
        assert path in st["last_error"], st["last_error"]
        assert "access denied: check s3.access-key and s3.secret-key" in st["last_error"], st["last_error"]
        assert served(con) == before, "a refused apply changed the serving layer"
        text = status_and_meta_text(con)
        assert_no_secret(text, s3, "serving_status/serving_meta of a follower refused by the storage")
        assert not [what for what, secret in keys.items() if secret in text], text
        iam.put_user_policy(UserName="follower", PolicyName="all", PolicyDocument=ALLOW_ALL)
        st = wait_for(con, lambda st: st["lake_snapshot"] == 3, "the follower to catch up", timeout=60)
        assert st["state"] == "following", st
        assert_dashboards(con, merged_orders(t))
    finally:
        unfollowed = con.execute("SELECT * FROM serving_unfollow()").fetchall()
    assert not [what for what, secret in keys.items() if secret in repr(unfollowed)], unfollowed
    assert_no_secret(repr(unfollowed), s3, "serving_unfollow")
