"""Object storage for the lake tests (test/python/lake/test_s3*.py): a real S3-compatible server the
tests start on 127.0.0.1 (moto's server mode, support/s3_server.py, signatures enforced) with a
pypaimon catalog on s3://lake/wh, the tables pypaimon writes there (the `accounts` and `orders`
fixtures), and the helpers those files share: the lake functions and serving_* called with
`options := $2::MAP(VARCHAR, VARCHAR)` bound as a prepared parameter, serving_status(), the
dashboards against conftest's pure-Python oracle, a fresh process whose environment holds the
standard AWS variables (run_child), and the check that no credential shows in a text.

The fixtures are module-scoped: a test file that imports them (by name) starts its own server and
writes its own tables.
"""

from __future__ import annotations

import base64
import json
import os
import pickle
import random
import select
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import boto3
import pyarrow as pa
import pytest
from conftest import gen_rows, oracle
from pypaimon import CatalogFactory

from support.lake_util import ORDERS, LakeTable, create_table

# The S3 server runs as its own process, from its file.
S3_SERVER = Path(__file__).resolve().parent / "s3_server.py"
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


# --- the serving layer -----------------------------------------------------------------------


def assert_dashboards(con, rows) -> None:
    per_company, _ = oracle(rows)
    for company, want in per_company.items():
        got = con.execute("SELECT * FROM serving_dashboard(?)", [company]).fetchall()
        assert got == want, company
    assert con.execute("SELECT count(*) FROM serving_reconcile()").fetchone() == (0,)


def merged_orders(t: LakeTable) -> list[tuple]:
    return [tuple(r[c] for c in ORDER_COLS) for r in t.read()]


def wait_for(con, predicate, what: str, timeout: float = 60.0) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        st = status(con)
        if predicate(st):
            return st
        assert time.monotonic() < deadline, f"timed out waiting for {what}: {st}"
        time.sleep(0.05)


# --- a fresh process with the standard AWS environment variables -----------------------------

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
