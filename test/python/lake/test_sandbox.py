"""DuckDB's file sandbox holds after LOADing streamhouse.

Every function that reads files by itself (the lake functions, `FROM 'paimon:<dir>'`, Paimon
sources of serving_build / serving_refresh) is driven under each sandbox setting, set after LOAD:
`enable_external_access = false` alone, with `allowed_directories`, with `allowed_paths`,
and with `lock_configuration`. The oracle is DuckDB's own reader: a path streamhouse reads
must be one `read_parquet` may read too, and a refusal names the setting. File sources
(Parquet/CSV), which DuckDB reads for us, must get DuckDB's own refusal.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest
from conftest import build, connect, sql_literal, table_exists
from support.lake_util import Warehouse, commit, create_table, open_warehouse
from support.live_util import assert_serves, create_orders, merged_after, random_lake_commits, status_dict, wait_for

SCHEMA = pa.schema(
    [
        pa.field("order_id", pa.int64(), nullable=False),
        ("company", pa.string()),
        ("order_day", pa.date32()),
        ("revenue", pa.int64()),
    ]
)
ROWS = [
    {"order_id": 1, "company": "acme", "order_day": pa.scalar(20000, pa.date32()).as_py(), "revenue": 10},
    {"order_id": 2, "company": "acme", "order_day": pa.scalar(20001, pa.date32()).as_py(), "revenue": 20},
]
DENIED = "enable_external_access = false"
# DuckDB's refusal of a SET once lock_configuration is on (1.4 to 2.0).
LOCKED = r'Cannot change configuration option "{option}" - the configuration has been locked'


@pytest.fixture(scope="module")
def lake(tmp_path_factory) -> dict:
    """allowed/ (with a table `inside`) and outside/ (a table `outside`), plus escapes."""
    root = tmp_path_factory.mktemp("sandbox")
    tables = {}
    for area, name in [("allowed", "inside"), ("outside", "outside")]:
        catalog = open_warehouse(root / area)
        t = create_table(catalog, name, SCHEMA, ["order_id"], {"bucket": "1", "merge-engine": "partial-update"})
        commit(t, SCHEMA, ROWS)
        tables[name] = str(root / area / "db.db" / name)
    (root / "allowed" / "link").symlink_to(root / "outside" / "db.db" / "outside")
    con = duckdb.connect()
    con.execute(
        "CREATE TABLE o AS SELECT 3::BIGINT order_id, 'acme' company, DATE '2026-01-01' order_day, "
        "5::BIGINT revenue, false deleted"
    )
    for area in ["allowed", "outside"]:
        con.execute(f"COPY o TO {sql_literal(str(root / area / 'o.parquet'))}")
        con.execute(f"COPY o TO {sql_literal(str(root / area / 'o.csv'))} (HEADER)")
    con.close()
    return {
        "root": root,
        "allowed": str(root / "allowed"),
        "inside": tables["inside"],
        "outside": tables["outside"],
        "dotdot": str(root / "allowed" / ".." / "outside" / "db.db" / "outside"),
        "link": str(root / "allowed" / "link"),
    }


def lake_calls(path: str) -> list[str]:
    p = sql_literal(path)
    pp = sql_literal("paimon:" + path)
    return [
        f"SELECT count(*) FROM paimon_scan({p})",
        f"SELECT count(*) FROM paimon_scan({p}, snapshot := 1)",
        f"SELECT count(*) FROM {pp}",
        f"SELECT count(*) FROM paimon_snapshots({p})",
        f"SELECT count(*) FROM paimon_changelog({p})",
        f"SELECT fct_rows FROM serving_build({pp})",
        f"SELECT fct_rows FROM serving_build({p})",
        f"SELECT inserted FROM serving_refresh({pp})",
    ]


SETTINGS = {
    "external_access_off": lambda lake: ["SET enable_external_access = false"],
    "allowed_directories": lambda lake: [
        f"SET allowed_directories = [{sql_literal(lake['allowed'])}]",
        "SET enable_external_access = false",
    ],
    "allowed_paths": lambda lake: [
        f"SET allowed_paths = [{sql_literal(lake['allowed'] + '/o.parquet')}]",
        "SET enable_external_access = false",
    ],
    "lock_configuration": lambda lake: [
        f"SET allowed_directories = [{sql_literal(lake['allowed'])}]",
        "SET enable_external_access = false",
        "SET lock_configuration = true",
    ],
}


def locked_con(lake: dict, setting: str, build_first: bool = True):
    con = connect()
    if build_first:
        # A layer built from the allowed table before the lock-down: refreshes need one, and a
        # refused call must leave it as it was.
        build(con, "paimon:" + lake["inside"])
    for stmt in SETTINGS[setting](lake):
        con.execute(stmt)
    return con


def served(con) -> list:
    return (
        con.execute("SELECT * FROM mart_daily ORDER BY ALL").fetchall()
        + con.execute("SELECT * FROM fct_orders ORDER BY ALL").fetchall()
    )


@pytest.mark.parametrize("setting", sorted(SETTINGS))
@pytest.mark.parametrize("where", ["outside", "dotdot", "link"])
def test_lake_functions_refuse_outside(lake, setting, where):
    con = locked_con(lake, setting)
    before = served(con)
    for sql in lake_calls(lake[where]):
        with pytest.raises(duckdb.Error) as e:
            con.execute(sql).fetchall()
        msg = str(e.value)
        assert DENIED in msg, f"{sql}: {msg}"
        assert "Permission Error" in msg, msg
    # DuckDB's own reader agrees that the same files are off limits (DuckDB 1.4's does not follow
    # a symlink inside an allowed directory before comparing, so it reads through `link`:
    # streamhouse is stricter there).
    own = f"SELECT * FROM read_parquet({sql_literal(lake[where] + '/bucket-0/*.parquet')})"
    if where == "link" and "allowed_directories" in str(SETTINGS[setting](lake)) and duckdb.__version__ < "1.5":
        assert len(con.execute(own).fetchall()) == len(ROWS)
    else:
        with pytest.raises(duckdb.Error, match="disabled by configuration"):
            con.execute(own).fetchall()
    assert served(con) == before, "a refused call changed the serving layer"
    con.close()


@pytest.mark.parametrize("setting", ["allowed_directories", "lock_configuration"])
def test_lake_functions_read_inside_allowed_directory(lake, setting):
    """Every lake call reads the table inside the allowed directory, with the right answer (one
    commit of ROWS: 2 merged rows, one snapshot, 2 changes; a refresh of the built table changes
    nothing), and DuckDB's own reader sees the same rows in the table's data files."""
    con = locked_con(lake, setting)
    got = [con.execute(sql).fetchall() for sql in lake_calls(lake["inside"])]
    assert got == [[(2,)], [(2,)], [(2,)], [(1,)], [(2,)], [(2,)], [(2,)], [(0,)]], got
    scanned = con.execute(
        f"SELECT order_id, revenue FROM paimon_scan({sql_literal(lake['inside'])}) ORDER BY 1"
    ).fetchall()
    # DuckDB's reader may read the same files: the two agree, row for row (one commit, no merge).
    own = con.execute(
        f"SELECT order_id, revenue FROM read_parquet({sql_literal(lake['inside'] + '/bucket-0/*.parquet')}) ORDER BY 1"
    ).fetchall()
    assert scanned == own == [(r["order_id"], r["revenue"]) for r in ROWS]
    con.close()


@pytest.mark.parametrize("setting", ["external_access_off", "allowed_paths"])
def test_nothing_inside_without_allowed_directory(lake, setting):
    """allowed_paths names files; it never opens a whole table directory."""
    con = locked_con(lake, setting)
    for sql in lake_calls(lake["inside"]):
        with pytest.raises(duckdb.Error, match=DENIED):
            con.execute(sql).fetchall()
    con.close()


def test_file_sources_get_duckdbs_own_refusal(lake):
    # A layer built from a plain table (a lake-built one refuses a local change set before any read).
    con = connect()
    con.execute(
        "CREATE TABLE t AS SELECT 1::BIGINT AS order_id, 'acme' AS company, DATE '2026-01-01' AS order_day, "
        "5::BIGINT AS revenue"
    )
    build(con, "t")
    for stmt in SETTINGS["allowed_paths"](lake):
        con.execute(stmt)
    for ext, fn in [("parquet", "serving_build"), ("csv", "serving_refresh")]:
        with pytest.raises(duckdb.Error, match="disabled by configuration"):
            con.execute(f"SELECT * FROM {fn}({sql_literal(str(lake['root'] / 'outside' / ('o.' + ext)))})").fetchall()
    # The one allowed path is readable through serving_build.
    got = con.execute(f"SELECT fct_rows FROM serving_build({sql_literal(lake['allowed'] + '/o.parquet')})").fetchone()
    assert got == (1,)
    con.close()


def test_lock_configuration_keeps_the_lock(lake):
    con = locked_con(lake, "lock_configuration")
    before = con.execute("SELECT current_setting('allowed_directories')").fetchone()
    # DuckDB's own refusal of the SET, word for word: any other error would not show the lock.
    with pytest.raises(duckdb.Error, match=LOCKED.format(option="allowed_directories")):
        con.execute(f"SET allowed_directories = [{sql_literal(str(lake['root']))}]")
    with pytest.raises(duckdb.Error, match=LOCKED.format(option="enable_external_access")):
        con.execute("SET enable_external_access = true")
    assert con.execute("SELECT current_setting('allowed_directories')").fetchone() == before
    with pytest.raises(duckdb.Error, match=DENIED):
        con.execute(f"SELECT count(*) FROM paimon_scan({sql_literal(lake['outside'])})").fetchall()
    con.close()


def test_setting_applies_to_other_connections_and_later_calls(lake):
    """The setting is global: a second connection, and calls after the SET, are refused too."""
    con = connect()
    assert con.execute(f"SELECT count(*) FROM paimon_scan({sql_literal(lake['outside'])})").fetchone() == (2,)
    other = con.cursor()
    con.execute("SET enable_external_access = false")
    with pytest.raises(duckdb.Error, match=DENIED):
        other.execute(f"SELECT count(*) FROM paimon_scan({sql_literal(lake['outside'])})").fetchall()
    assert not table_exists(con, "fct_orders")
    con.close()


def test_refusal_does_not_reveal_whether_a_path_exists(lake):
    con = locked_con(lake, "allowed_directories", build_first=False)
    missing = str(Path(lake["root"]) / "outside" / "no_such_table")
    errors = []
    for path in [lake["outside"], missing]:
        with pytest.raises(duckdb.Error) as e:
            con.execute(f"SELECT * FROM paimon_scan({sql_literal(path)})").fetchall()
        errors.append(str(e.value).replace(path, "<path>"))
    assert errors[0] == errors[1]
    con.close()


def test_running_as_root_is_no_excuse(lake):
    """The refusal is the sandbox's, not the OS's: it holds even where the OS would allow."""
    assert os.access(lake["outside"], os.R_OK)
    con = locked_con(lake, "external_access_off", build_first=False)
    with pytest.raises(duckdb.Error, match=DENIED):
        con.execute(f"SELECT * FROM paimon_scan({sql_literal(lake['outside'])})").fetchall()
    con.close()


def redirected_table(lake: dict, name: str) -> str:
    """A table inside allowed/ whose own metadata sends its data reads outside: the outside
    table's schema, snapshots and manifests copied in, with `data-file.path-directory` set to the
    outside table's directory (where its buckets, and so its data files, really are)."""
    import json
    import shutil

    src = Path(lake["outside"])
    dst = Path(lake["allowed"]) / "db.db" / name
    if not dst.exists():
        for part in ["schema", "snapshot", "manifest"]:
            shutil.copytree(src / part, dst / part)
        for schema_file in (dst / "schema").glob("schema-*"):
            schema = json.loads(schema_file.read_text())
            schema.setdefault("options", {})["data-file.path-directory"] = str(src)
            schema_file.write_text(json.dumps(schema))
    return str(dst)


def test_metadata_cannot_send_reads_outside(lake):
    """The table directory is allowed, but its metadata points the data files outside: with the
    sandbox open the redirect works (the rows are the outside table's), locked it is refused by
    name, for every function that reads rows, and the serving layer stays as it was."""
    evil = redirected_table(lake, "redirected")
    open_con = connect()
    assert open_con.execute(f"SELECT count(*) FROM paimon_scan({sql_literal(evil)})").fetchone() == (len(ROWS),)
    open_con.close()
    for setting in ["allowed_directories", "lock_configuration"]:
        con = locked_con(lake, setting)
        before = served(con)
        # (a refresh needs a layer built from this table, which the lock-down never allows)
        for sql in [c for c in lake_calls(evil) if "paimon_snapshots" not in c and "serving_refresh" not in c]:
            with pytest.raises(duckdb.Error) as e:
                con.execute(sql).fetchall()
            msg = str(e.value)
            assert "metadata points a read at" in msg and DENIED in msg, f"{sql}: {msg}"
            assert str(Path(lake["outside"])) in msg, msg
        # Snapshots are metadata inside the allowed table: listed.
        assert con.execute(f"SELECT count(*) FROM paimon_snapshots({sql_literal(evil)})").fetchone()[0] >= 1
        assert served(con) == before, "a refused call changed the serving layer"
        con.close()


def test_symlinked_directory_inside_the_table_is_walked(lake):
    """allowed/linked's bucket-0 is a link to a directory inside allowed/ whose data file is a
    link to the outside table's file: the escape is two links deep and still refused."""
    import shutil

    root = Path(lake["allowed"])
    table = root / "db.db" / "linked"
    if not table.exists():
        shutil.copytree(Path(lake["inside"]), table, symlinks=True)
        shared = root / "shared_bucket"
        shutil.move(str(table / "bucket-0"), str(shared))
        (table / "bucket-0").symlink_to(shared)
        outside_files = sorted((Path(lake["outside"]) / "bucket-0").glob("*.parquet"))
        for i, f in enumerate(sorted(shared.glob("*.parquet"))):
            f.unlink()
            f.symlink_to(outside_files[i % len(outside_files)])
    con = locked_con(lake, "allowed_directories")
    with pytest.raises(duckdb.Error, match=DENIED):
        con.execute(f"SELECT count(*) FROM paimon_scan({sql_literal(str(table))})").fetchall()
    con.close()


def test_dotdot_after_a_link_climbs_from_its_target(lake):
    """`allowed/link/..` is the parent of the link's target (as the kernel resolves it), so a
    probe through it is refused the same way whether the place it lands on exists or not."""
    con = locked_con(lake, "allowed_directories", build_first=False)
    landing = Path(lake["outside"]).parent  # allowed/link -> outside/db.db/outside; `..` -> outside/db.db
    errors = []
    for probe in ["outside", "no_such_table"]:
        assert (landing / probe).exists() == (probe == "outside")
        path = f"{lake['link']}/../{probe}"
        with pytest.raises(duckdb.Error) as e:
            con.execute(f"SELECT * FROM paimon_scan({sql_literal(path)})").fetchall()
        assert DENIED in str(e.value), str(e.value)
        errors.append(str(e.value).replace(path, "<path>"))
    assert errors[0] == errors[1]
    con.close()


def test_allowed_paths_never_open_a_remote_table_directory():
    con = connect()
    con.execute("SET allowed_paths = ['s3://bucket/lake']")
    con.execute("SET enable_external_access = false")
    for path in ["s3://bucket/lake", "s3://bucket/lake/db.db/t"]:
        with pytest.raises(duckdb.Error, match=DENIED):
            con.execute(f"SELECT * FROM paimon_snapshots({sql_literal(path)})").fetchall()
    con.close()


# --- serving_follow under the sandbox ---------------------------------------------------------


def follow_lake(tmp_path) -> dict:
    """allowed/ and outside/ warehouses (own tables: these tests commit), a deduplicate orders
    table in each with one commit, and the oracle's commits so far."""
    out = {"allowed": tmp_path / "allowed", "commits": {}}
    for area in ["allowed", "outside"]:
        wh = Warehouse(tmp_path / area)
        table = create_orders(wh, "orders", "deduplicate")
        commits = random_lake_commits(random.Random(area), "deduplicate", 3, first=40)
        table.commit(commits[0])
        out[area + "_table"], out[area + "_path"], out[area + "_commits"] = table, wh.path("orders"), commits
    return out


def follow(con, path: str, **named) -> list:
    extra = "".join(f", {k} := {sql_literal(v)}" for k, v in named.items())
    return con.execute(
        f"SELECT * FROM serving_follow({sql_literal('paimon:' + path)}, every := INTERVAL '20 ms'{extra})"
    ).fetchall()


def following(tmp_path, area: str) -> tuple:
    """follow_lake's table in `area`, a layer built from it and following it: (lake, table, path,
    commits, con)."""
    lake = follow_lake(tmp_path)
    table, path, commits = lake[area + "_table"], lake[area + "_path"], lake[area + "_commits"]
    con = connect()
    build(con, "paimon:" + path)
    follow(con, path)
    return lake, table, path, commits, con


def lock_down(con, allowed: Path) -> None:
    con.execute(f"SET allowed_directories = [{sql_literal(str(allowed))}]")
    con.execute("SET enable_external_access = false")


def test_a_follower_obeys_a_lock_down_set_after_it_started(tmp_path):
    """The follower reads the settings at every apply: once external access is off (the table
    outside every allowed directory), an apply is refused by the sandbox — last_error names the
    setting and the table, the state is 'failing', nothing is applied — while before it, the same
    follower applied a commit (the control)."""
    lake, table, path, commits, con = following(tmp_path, "outside")
    try:
        table.commit(commits[1])
        wait_for(lambda: status_dict(con)["lake_snapshot"] == 2, 30, "the follower to apply snapshot 2")
        assert_serves(con, merged_after("deduplicate", commits[:2]), "followed before the lock-down")
        lock_down(con, lake["allowed"])
        table.commit(commits[2])
        s = wait_for(lambda: (st := status_dict(con))["last_error"] and st, 30, "the follower's refused apply")
        assert s["state"] == "failing" and s["following"] == "paimon:" + path, s
        assert DENIED in s["last_error"] and path in s["last_error"], s["last_error"]
        assert "Cannot access" in s["last_error"], s["last_error"]
        # The layer is what the last allowed apply left, and status reads nothing of the table now.
        assert_serves(con, merged_after("deduplicate", commits[:2]), "after the refused apply")
        assert (s["lake_snapshot"], s["lake_latest_snapshot"]) == (2, None), s
    finally:
        unfollowed = con.execute("SELECT * FROM serving_unfollow()").fetchall()
    assert unfollowed[0][:2] == ("paimon:" + path, 2) and DENIED in unfollowed[0][3], unfollowed
    con.close()


def test_a_follower_inside_an_allowed_directory_keeps_following(tmp_path):
    lake, table, _path, commits, con = following(tmp_path, "allowed")
    try:
        lock_down(con, lake["allowed"])
        for n in (1, 2):
            table.commit(commits[n])
            wait_for(lambda n=n: status_dict(con)["lake_snapshot"] == n + 1, 30, f"snapshot {n + 1} applied")
            assert_serves(con, merged_after("deduplicate", commits[: n + 1]), f"locked down, snapshot {n + 1}")
        s = status_dict(con)
        assert (s["state"], s["last_error"], s["lake_latest_snapshot"], s["lag_snapshots"]) == ("following", None, 3, 0)
    finally:
        con.execute("SELECT * FROM serving_unfollow()").fetchall()
    con.close()


def test_serving_follow_is_refused_by_the_sandbox_at_the_call(tmp_path):
    """Locked down after the build: following a table outside, or publishing outside, is refused
    when serving_follow is called, naming the setting; nothing follows, the layer is unchanged."""
    lake = follow_lake(tmp_path)
    con = connect()
    build(con, "paimon:" + lake["outside_path"])
    lock_down(con, lake["allowed"])
    with pytest.raises(duckdb.Error) as e:
        follow(con, lake["outside_path"])
    # The sandbox's own words (README), naming the table.
    assert f'Permission Error: Cannot access "{lake["outside_path"]}"' in str(e.value) and DENIED in str(e.value)
    assert status_dict(con)["following"] is None
    assert_serves(con, merged_after("deduplicate", lake["outside_commits"][:1]), "after the refusal")

    other = connect()
    build(other, "paimon:" + lake["allowed_path"])
    lock_down(other, lake["allowed"])
    target = str(tmp_path / "outside" / "published")
    with pytest.raises(duckdb.Error) as e:
        follow(other, lake["allowed_path"], publish="paimon:" + target)
    assert DENIED in str(e.value) and target in str(e.value), str(e.value)
    assert status_dict(other)["following"] is None
    assert not Path(target).exists(), "a refused publish target was written"
    con.close()
    other.close()
