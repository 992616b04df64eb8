# ruff: noqa: F811 (test functions take the fixtures imported from support.s3_lake by name)
"""Object storage, the errors (issue 10 item 3): Paimon tables on the real S3-compatible server of
support/s3_lake.py (moto on 127.0.0.1, signatures enforced), called with what a user may get wrong.
An endpoint nothing listens on, a missing bucket or table, a wrong secret: every lake function,
serving_build and serving_refresh fail with an error that names the path and says in streamhouse's
own words what is wrong, and the serving layer is left as it was. A misspelt option key is refused
by name; odd option values, a credential in the endpoint URL (masked where the URL is quoted) and
an incomplete key pair (said in plain words, in a fresh process) show no credential. With DuckDB's
sandbox on (enable_external_access = false, allowed_directories) every call on an s3:// path is
refused before any request reaches an endpoint.

Oracles: the layer as served before the failed call, the wording each test spells out, the
requests a stand-in endpoint on 127.0.0.1 received (support/http_stub.py, answering HTTP 500) and
the connections a listener on 127.0.0.1 counted — never the extension.

Credentials are bound as a prepared parameter (`options := $2::MAP(VARCHAR, VARCHAR)`) in the
leak checks: a binder error carries the statement's text (`LINE 1: ...`), so a secret written
literally into the SQL would come back in DuckDB's own echo of the user's query, not through
streamhouse. The checks look for the real secret, a distinctive wrong one and the access key in
every error, in serving_status() and in serving_meta.
"""

from __future__ import annotations

import socket
import threading

import duckdb
import pytest
from conftest import connect, sql_literal
from support.http_stub import HttpStub
from support.s3_lake import (  # noqa: F401 (s3, accounts, orders: the fixtures, used by name)
    BUCKET,
    WRONG_SECRET,
    accounts,
    assert_no_secret,
    build_s3,
    orders,
    q,
    run_child,
    s3,
    served,
    status_and_meta_text,
)

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
