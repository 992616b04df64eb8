"""Object storage (issue 10 item 3): Paimon tables on a real S3-compatible server the tests start on
127.0.0.1 (moto's server mode, test/python/support/s3_server.py, signatures enforced), written there by
pypaimon through its own S3 file IO (pyarrow's S3 client, the same Paimon option keys), read by
every lake function and built/refreshed into the serving layer through `options := MAP {...}` or
the standard AWS environment variables.

Oracles: pypaimon's own read of the same S3 table, the rows written, the snapshot files as stored
in the bucket (read with boto3), and conftest's pure-Python dashboard oracle — never the extension.

Credentials are bound as a prepared parameter (`options := $2::MAP(VARCHAR, VARCHAR)`) in the
leak checks: a binder error carries the statement's text (`LINE 1: ...`), so a secret written
literally into the SQL would come back in DuckDB's own echo of the user's query, not through
streamhouse. The checks look for the real secret, a distinctive wrong one and the access key in
every error, in serving_status() and in serving_meta.
"""

from __future__ import annotations

import base64
import json
import os
import pickle
import random
import select
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import boto3
import duckdb
import pyarrow as pa
import pytest
from conftest import connect, gen_rows, oracle, oracle_summary, sql_literal
from pypaimon import CatalogFactory
from support.http_stub import HttpStub
from support.lake_util import ORDERS, LakeTable, canon, create_table, read_mart

# The S3 server runs as its own process, from its file.
S3_SERVER = Path(__file__).resolve().parents[1] / "support" / "s3_server.py"
BUCKET = "lake"
WRONG_SECRET = "wrongSECRET-7f3c9d1e-do-not-leak-b8a2"
ENV_KEYS = [
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT",
    "AWS_S3_ENDPOINT",
    "AWS_PROFILE",
    "AWS_CONFIG_FILE",
    "AWS_SHARED_CREDENTIALS_FILE",
]
ACCOUNTS = pa.schema([pa.field("id", pa.int32(), nullable=False), ("bal", pa.int32()), ("op", pa.string())])
ORDER_COLS = ["order_id", "company", "order_day", "revenue"]


@dataclass
class S3:
    endpoint: str
    access_key: str
    secret_key: str
    region: str
    catalog: object = None

    def options(self, **override) -> dict:
        """Paimon's own option keys, as the extension takes them."""
        opts = {
            "s3.endpoint": self.endpoint,
            "s3.access-key": self.access_key,
            "s3.secret-key": self.secret_key,
            "s3.region": self.region,
            "s3.path-style-access": "true",
        }
        opts.update(override)
        return opts

    def env(self) -> dict:
        return {
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_REGION": self.region,
            "AWS_ENDPOINT_URL": self.endpoint,
        }

    def secrets(self) -> dict:
        return {
            "the secret key": self.secret_key,
            "the wrong secret key": WRONG_SECRET,
            "the access key": self.access_key,
        }

    def path(self, table: str, bucket: str = BUCKET) -> str:
        return f"s3://{bucket}/wh/db.db/{table}"

    def boto(self):
        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            region_name=self.region,
            aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key,
        )


@pytest.fixture(scope="module")
def s3():
    """The server (its own process), AWS_* cleared in this process (and IMDS off: no credential
    lookup may ever leave the loopback), and a pypaimon catalog on s3://lake/wh."""
    mp = pytest.MonkeyPatch()
    for k in ENV_KEYS:
        mp.delenv(k, raising=False)
    mp.setenv("AWS_EC2_METADATA_DISABLED", "true")
    proc = subprocess.Popen(
        [sys.executable, str(S3_SERVER), BUCKET],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        ready, _, _ = select.select([proc.stdout], [], [], 60)
        line = proc.stdout.readline() if ready else ""
        if not line:
            proc.kill()
            pytest.fail(f"the S3 server did not start: {proc.stderr.read()[-2000:]}", pytrace=False)
        info = json.loads(line)
        server = S3(info["endpoint"], info["access_key"], info["secret_key"], info["region"])
        catalog_options = {"warehouse": f"s3://{BUCKET}/wh", **server.options()}
        server.catalog = CatalogFactory.create(catalog_options)
        server.catalog.create_database("db", ignore_if_exists=True)
        yield server
    finally:
        proc.stdin.close()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        mp.undo()


def lake_table(s3: S3, name: str, schema: pa.Schema, pk: list[str], options: dict) -> LakeTable:
    return LakeTable(create_table(s3.catalog, name, schema, pk, options), schema)


def random_accounts(rng: random.Random, commits: int = 4) -> list[list[dict]]:
    out = []
    for c in range(commits):
        rows = []
        for k in rng.sample(range(60), 35):
            if c and rng.random() < 0.15:
                rows.append({"id": k, "bal": 0, "op": "-D"})
            else:
                rows.append({"id": k, "bal": rng.randint(-1000, 1000), "op": "+I" if c == 0 else "+U"})
        out.append(rows)
    return out


@pytest.fixture(scope="module")
def accounts(s3):
    t = lake_table(
        s3,
        "accounts",
        ACCOUNTS,
        ["id"],
        {"bucket": "2", "merge-engine": "deduplicate", "changelog-producer": "input", "rowkind.field": "op"},
    )
    for rows in random_accounts(random.Random(10)):
        t.commit(rows)
    return t


def orders_table(s3: S3, name: str, rows) -> LakeTable:
    t = lake_table(s3, name, ORDERS, ["order_id"], {"bucket": "2", "merge-engine": "deduplicate"})
    t.commit([dict(zip(ORDER_COLS, r, strict=True)) for r in rows])
    return t


@pytest.fixture(scope="module")
def orders(s3):
    rows, _ = gen_rows(seed=31, n_rows=1500, n_companies=8, n_days=25)
    return orders_table(s3, "orders", rows)


# --- calling the extension -------------------------------------------------------------------


def map_param(options: dict) -> dict:
    """A Python value DuckDB binds as MAP(VARCHAR, VARCHAR)."""
    return {"key": list(options), "value": list(options.values())}


def q(con, sql: str, path: str, options: dict | None = None, **named):
    """Runs `sql` with {src} replaced by `paimon_xxx($1[, named...][, options := $2])`-style args."""
    extra = "".join(f", {k} := {int(v)}" for k, v in named.items())
    params = [path]
    if options is not None:
        extra += ", options := $2::MAP(VARCHAR, VARCHAR)"
        params.append(map_param(options))
    return con.execute(sql.format(args=f"$1{extra}"), params).fetchall()


def dicts(con, sql: str, path: str, options: dict | None = None, **named) -> list[dict]:
    rows = q(con, sql, path, options, **named)
    names = [d[0] for d in con.description]
    return [dict(zip(names, r, strict=True)) for r in rows]


def status(con) -> dict:
    cur = con.execute("SELECT * FROM serving_status()")
    return dict(zip([d[0] for d in cur.description], cur.fetchone(), strict=True))


def build_s3(con, s3: S3, table: str, options: dict | None = None) -> dict:
    return dicts(con, "SELECT * FROM serving_build({args})", "paimon:" + s3.path(table), options)[0]


def refresh_s3(con, s3: S3, table: str, options: dict | None = None) -> dict:
    return dicts(con, "SELECT * FROM serving_refresh({args})", "paimon:" + s3.path(table), options)[0]


def served(con) -> tuple:
    return (
        con.execute("SELECT * FROM fct_orders ORDER BY order_id").fetchall(),
        con.execute("SELECT * FROM mart_daily ORDER BY ALL").fetchall(),
    )


def status_and_meta_text(con) -> str:
    return repr(con.execute("SELECT * FROM serving_status()").fetchall()) + repr(
        con.execute("SELECT * FROM serving_meta").fetchall()
    )


def assert_no_secret(text: str, s3: S3, where: str) -> None:
    for what, secret in s3.secrets().items():
        assert secret not in text, f"{where} contains {what}: {text}"


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


def assert_dashboards(con, rows) -> None:
    per_company, _ = oracle(rows)
    for company, want in per_company.items():
        got = con.execute("SELECT * FROM serving_dashboard(?)", [company]).fetchall()
        assert got == want, company
    assert con.execute("SELECT count(*) FROM serving_reconcile()").fetchone() == (0,)


def merged_orders(t: LakeTable) -> list[tuple]:
    return [tuple(r[c] for c in ORDER_COLS) for r in t.read()]


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


def wait_for(con, predicate, what: str, timeout: float = 60.0) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        st = status(con)
        if predicate(st):
            return st
        assert time.monotonic() < deadline, f"timed out waiting for {what}: {st}"
        time.sleep(0.05)


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


# --- credentials from the standard AWS environment variables ---------------------------------

CHILD = r"""
import base64, pickle, sys
import duckdb
ext, calls = pickle.loads(base64.b64decode(sys.stdin.read()))
con = duckdb.connect(config={"allow_unsigned_extensions": "true"})
con.execute("LOAD '" + ext.replace("'", "''") + "'")
out = []
for sql, params in calls:
    try:
        out.append(("rows", con.execute(sql, params).fetchall()))
    except duckdb.Error as e:
        out.append(("error", str(e)))
sys.stdout.write(base64.b64encode(pickle.dumps(out)).decode())
"""


def run_child(ext: str, env: dict, calls: list) -> list:
    """Runs the statements in a fresh process whose environment is `env` over a clean one."""
    base = {k: v for k, v in os.environ.items() if k not in ENV_KEYS}
    p = subprocess.run(
        [sys.executable, "-c", CHILD],
        input=base64.b64encode(pickle.dumps((ext, calls))).decode(),
        capture_output=True,
        text=True,
        env={**base, "AWS_EC2_METADATA_DISABLED": "true", **env},
        timeout=120,
    )
    assert p.returncode == 0, f"child exited {p.returncode}: {p.stderr[-3000:]}"
    return pickle.loads(base64.b64decode(p.stdout))


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


# --- errors: clear, naming the path, never carrying a credential -----------------------------


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens once it is closed


ERROR_CASES = {
    # case: (table, bucket, options override)
    "wrong_endpoint": ("orders", BUCKET, lambda s3: s3.options(**{"s3.endpoint": f"http://127.0.0.1:{closed_port()}"})),
    "missing_bucket": ("orders", "no-such-bucket", lambda s3: s3.options()),
    "missing_table": ("no_such_table", BUCKET, lambda s3: s3.options()),
    "wrong_secret": ("orders", BUCKET, lambda s3: s3.options(**{"s3.secret-key": WRONG_SECRET})),
}


@pytest.mark.parametrize("case", sorted(ERROR_CASES))
def test_errors_name_the_path_and_hold_no_credential(s3, orders, case):
    table, bucket, make_options = ERROR_CASES[case]
    path = s3.path(table, bucket)
    bad = make_options(s3)
    con = connect()
    build_s3(con, s3, "orders", s3.options())  # a good layer first: a failed call must not touch it
    before = served(con)
    calls = [
        ("SELECT * FROM paimon_scan({args})", path, {}),
        ("SELECT * FROM paimon_scan({args})", path, {"snapshot": 1}),
        ("SELECT * FROM paimon_snapshots({args})", path, {}),
        ("SELECT * FROM paimon_changelog({args})", path, {}),
        ("SELECT * FROM serving_build({args})", "paimon:" + path, {}),
    ]
    if table == "orders" and bucket == BUCKET:  # the layer's own table, unreachable this time
        calls.append(("SELECT * FROM serving_refresh({args})", "paimon:" + path, {}))
    for sql, arg, named in calls:
        with pytest.raises(duckdb.Error) as e:
            q(con, sql, arg, bad, **named)
        msg = str(e.value)
        assert path in msg, f"{case}: {sql}: the error does not name {path}: {msg}"
        assert_no_secret(msg, s3, f"{case}: {sql}'s error")
    assert served(con) == before, f"{case}: a failed call changed the serving layer"
    assert_no_secret(status_and_meta_text(con), s3, f"{case}: serving_status/serving_meta")


ODD_OPTIONS = {  # options a user may get wrong, each carrying the wrong secret
    "malformed_endpoint": {"s3.endpoint": "http://"},
    "ftp_endpoint": {"s3.endpoint": "ftp://127.0.0.1:1"},
    "path_style_perhaps": {"s3.path-style-access": "perhaps"},
    "virtual_host_on_an_ip": {"s3.path-style-access": "false"},
    "empty_region": {"s3.region": ""},
}


def test_a_misspelt_option_key_is_refused_by_name(s3, accounts):
    opts = s3.options(**{"s3.secret-key": WRONG_SECRET, "s3.secret.key.typo": WRONG_SECRET})
    with pytest.raises(duckdb.Error) as e:
        q(connect(), "SELECT count(*) FROM paimon_scan({args})", s3.path("accounts"), opts)
    msg = str(e.value)
    assert "unknown option key 's3.secret.key.typo'" in msg and "s3.access-key" in msg, msg
    assert_no_secret(msg, s3, "the error")


@pytest.mark.parametrize("case", sorted(ODD_OPTIONS))
def test_odd_options_never_echo_a_secret(s3, accounts, case):
    opts = s3.options(**{"s3.secret-key": WRONG_SECRET, **ODD_OPTIONS[case]})
    try:
        q(connect(), "SELECT count(*) FROM paimon_scan({args})", s3.path("accounts"), opts)
    except duckdb.Error as e:
        assert s3.path("accounts") in str(e), str(e)
        assert_no_secret(str(e), s3, f"{case}: the error")
    else:
        pytest.fail(f"{case}: a wrong secret was accepted")


# case: (the endpoint, with {port} and {secret}; how the error must quote it; what must not show).
# `http://user:password@host` is a credential too (some S3 tools take it), and so is a query
# string (`?token=...`).
ENDPOINT_CREDENTIALS = {
    "user_info": ("http://key:{secret}@127.0.0.1:{port}", "http://***@127.0.0.1:{port}/", "key:"),
    "query_token": ("http://127.0.0.1:{port}/?token={secret}", "http://127.0.0.1:{port}/?***", "token="),
}


@pytest.mark.parametrize("case", sorted(ENDPOINT_CREDENTIALS))
def test_a_credential_in_the_endpoint_url_is_not_echoed(s3, accounts, case):
    """An error that quotes the endpoint URL must not carry a credential in it. The endpoint
    answers HTTP 500, an error passed on with the URL it was asked at: the host and port are
    quoted, the credential masked."""
    endpoint, quoted, hidden = ENDPOINT_CREDENTIALS[case]
    with HttpStub("500") as stub:
        opts = s3.options(**{"s3.endpoint": endpoint.format(secret=WRONG_SECRET, port=stub.port)})
        with pytest.raises(duckdb.Error) as e:
            q(connect(), "SELECT count(*) FROM paimon_scan({args})", s3.path("accounts"), opts)
    msg = str(e.value)
    assert stub.requests, f"the endpoint was never asked, so the error quotes no URL: {msg}"
    assert quoted.format(port=stub.port) in msg, f"the endpoint is not quoted with its credential masked: {msg}"
    assert hidden not in msg, msg
    assert_no_secret(msg, s3, "the error")
    if case == "query_token":  # the URL asked (and quoted) held the token: only the scrubbing hides it
        assert any(WRONG_SECRET in r for r in stub.requests), stub.requests


# case: streamhouse's own words for it (none of them is in opendal's or the server's raw text, so
# deleting streamhouse's wording fails the test), and raw context that must not reach the user.
SAYS = {
    "wrong_endpoint": "cannot reach the object-storage endpoint (is s3.endpoint / aws_endpoint_url right?)",
    "missing_bucket": "the bucket does not exist",
    "missing_table": "no paimon table there",
    "wrong_secret": "access denied: check s3.access-key and s3.secret-key",
}


@pytest.mark.parametrize("case", sorted(SAYS))
def test_errors_say_what_is_wrong(s3, orders, case):
    table, bucket, make_options = ERROR_CASES[case]
    with pytest.raises(duckdb.Error) as e:
        q(connect(), "SELECT * FROM paimon_scan({args})", s3.path(table, bucket), make_options(s3))
    said = str(e.value)
    assert SAYS[case] in said.lower(), f"{case}: {said}"
    ours = said.split("\n\nLINE ")[0]  # DuckDB appends the statement's position to a bind error
    raw = ("Backtrace", "request_id", "S3Error", "\n", "=>")
    assert not any(r in ours for r in raw), f"{case}: raw storage context in the message: {ours}"


# case: (options given: what of the key pair, env given, what the error must say first). The
# endpoint and region are always given; nothing else is in the child's environment.
NO_CREDENTIALS = {
    "none": ({}, {}, "no S3 credentials were given"),
    "access_key_in_env": (
        {},
        {"AWS_ACCESS_KEY_ID": "env"},
        "an access key was given without its secret key (s3.secret-key / AWS_SECRET_ACCESS_KEY)",
    ),
    "secret_key_as_option": (
        {"s3.secret-key": WRONG_SECRET},
        {},
        "a secret key was given without its access key (s3.access-key / AWS_ACCESS_KEY_ID)",
    ),
}


@pytest.mark.parametrize("case", sorted(NO_CREDENTIALS))
def test_missing_credentials_are_said_in_plain_words(s3, accounts, ext_path, case):
    """Without a complete key pair, every lake function and a lake build say what is missing and
    how to give it (options or the AWS variables), not the storage library's signing context, and
    show no credential."""
    given, env, says = NO_CREDENTIALS[case]
    env = {k: (s3.access_key if v == "env" else v) for k, v in env.items()}
    opts = {"s3.endpoint": s3.endpoint, "s3.region": s3.region, "s3.path-style-access": "true", **given}
    path = s3.path("accounts")
    literal = "MAP {" + ", ".join(f"{sql_literal(k)}: {sql_literal(v)}" for k, v in opts.items()) + "}"
    calls = [
        (f"SELECT count(*) FROM paimon_scan(?, options := {literal})", [path]),
        (f"SELECT count(*) FROM paimon_snapshots(?, options := {literal})", [path]),
        (f"SELECT * FROM serving_build(?, options := {literal})", ["paimon:" + path]),
    ]
    for (sql, _), (kind, said) in zip(calls, run_child(ext_path, env, calls), strict=True):
        assert kind == "error", f"{sql}: {said}"
        ours = said.split("\n\nLINE ")[0]  # DuckDB quotes the statement after a bind error
        function = sql.split("FROM ")[1].split("(")[0]
        assert ours.startswith(f"Binder Error: {function}: Paimon table '{path}': {says}: give options := MAP "), ours
        assert "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY" in ours, ours
        assert not any(raw in ours for raw in ("reqsign", "Context:", "signing", "\n")), ours
        assert_no_secret(ours, s3, f"{case}: {sql}")


# --- DuckDB's sandbox refuses remote paths ---------------------------------------------------


class ConnectionCounter:
    """A TCP listener on 127.0.0.1 that counts connections (and answers none): the endpoint of
    calls that must be refused before any request."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.count = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.count += 1
            conn.close()

    def close(self):
        self.stop.set()
        self.thread.join()
        self.sock.close()


SANDBOX = {
    "external_access_off": lambda tmp: ["SET enable_external_access = false"],
    "allowed_directories": lambda tmp: [
        f"SET allowed_directories = [{sql_literal(str(tmp))}]",
        "SET enable_external_access = false",
    ],
}


@pytest.mark.parametrize("setting", sorted(SANDBOX))
def test_sandbox_refuses_s3_paths(s3, orders, setting, tmp_path):
    counter = ConnectionCounter()
    try:
        con = connect()
        build_s3(con, s3, "orders", s3.options())  # before the lock-down
        before = served(con)
        for stmt in SANDBOX[setting](tmp_path):
            con.execute(stmt)
        path = s3.path("orders")
        for options in (s3.options(), s3.options(**{"s3.endpoint": f"http://127.0.0.1:{counter.port}"})):
            for sql, arg in [
                ("SELECT * FROM paimon_scan({args})", path),
                ("SELECT * FROM paimon_snapshots({args})", path),
                ("SELECT * FROM paimon_changelog({args})", path),
                ("SELECT * FROM serving_build({args})", "paimon:" + path),
                ("SELECT * FROM serving_refresh({args})", "paimon:" + path),
            ]:
                with pytest.raises(duckdb.Error) as e:
                    q(con, sql, arg, options)
                msg = str(e.value)
                assert "Permission Error" in msg and "enable_external_access" in msg, f"{sql}: {msg}"
                assert_no_secret(msg, s3, f"{sql}'s refusal")
        assert counter.count == 0, f"{counter.count} connection(s) reached the endpoint of refused calls"
        assert served(con) == before
    finally:
        counter.close()


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
