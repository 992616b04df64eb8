"""The Fluss tests' local cluster and their plain-Python side (test/python/fluss_tiering).

`fluss_cluster` (a session fixture, registered by the root conftest's pytest_plugins) starts one real
Fluss cluster per session with scripts/fluss_cluster.py, the script behind `make fluss-up`: ZooKeeper,
a coordinator, one tablet server and the lake tiering service, on 127.0.0.1, in a directory of
pytest's. A test that stops it asks for `stops_fluss_cluster` instead (it then runs after the other
users of the cluster). It is stopped at the end whatever happens: by the fixture's finalizer, by an
atexit hook (an interrupted session) and, should the test process itself be killed, by the kernel
(each JVM is started with PR_SET_PDEATHSIG). The finalizer fails the session if any process of it
survives.

Also here: a seeded stream of order upserts, corrections and deletes with its pure-Python oracle (the
state per key after the stream), and which sockets a set of processes listens on.

Only the standard library and pytest: this module is loaded in every venv that runs the suite.
"""

from __future__ import annotations

import atexit
import datetime
import random
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "scripts"))
import fluss_cluster as cluster  # noqa: E402  (scripts/fluss_cluster.py)


def _quiet(_message: str) -> None:
    pass


@pytest.fixture(scope="session")
def fluss_cluster(tmp_path_factory) -> dict:
    """The running cluster's state: bootstrap, warehouse, pids, ports, dir (scripts/fluss_cluster.py)."""
    directory = tmp_path_factory.mktemp("fluss")

    def stop() -> None:
        cluster.stop(directory, say=_quiet)

    atexit.register(stop)
    try:
        state = cluster.start(directory, die_with_parent=True, say=_quiet)
    except cluster.ClusterError as e:
        pytest.fail(f"the local Fluss cluster did not start: {e}", pytrace=False)
    try:
        yield state
    finally:
        stop()
        atexit.unregister(stop)
        left = cluster.alive(directory)
        assert not left, f"processes of the Fluss cluster survived its stop: {left}"


@pytest.fixture
def stops_fluss_cluster(fluss_cluster) -> dict:
    """`fluss_cluster`, for a test that stops it (as `make fluss-down` does): such a test runs right
    after the session's last other test that uses the cluster (pytest_collection_modifyitems below),
    so the cluster is neither stopped under another test nor left idle for the rest of the suite."""
    return fluss_cluster


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items):
    def uses(item, fixture: str) -> bool:
        return fixture in getattr(item, "fixturenames", ())

    stoppers = [item for item in items if uses(item, "stops_fluss_cluster")]
    if not stoppers:
        return
    rest = [item for item in items if not uses(item, "stops_fluss_cluster")]
    users = [n for n, item in enumerate(rest) if uses(item, "fluss_cluster")]
    at = users[-1] + 1 if users else len(rest)
    items[:] = rest[:at] + stoppers + rest[at:]


# --------------------------------------------------------------------------------------------
# The order stream and its oracle
# --------------------------------------------------------------------------------------------

COMPANIES = ["acme", "O'Reilly", "Café Zürich", "東京商事", "x' OR '1'='1", 'Smith, "Jones" & Co', "a%b", "Acme"]
BASE_DAY = datetime.date(2026, 11, 1)


def order_stream(seed: int, n_ops: int, n_days: int = 12) -> list[tuple]:
    """A seeded stream of ("upsert", (order_id, company, order_day, revenue)) and ("delete", order_id):
    new orders, corrections of a live order (its company, day and/or revenue moved), deletes of a live
    order and new orders reusing a deleted order's id.

    No delete of an order that does not exist: on Fluss 0.9.1 it appends an empty batch to the bucket's
    log, and the tiering service cannot reach that log end until a later record arrives there, so a
    stream ending on one is never fully tiered (measured; see the README's "Running Fluss locally")."""
    rng = random.Random(seed)
    live: dict[int, tuple] = {}
    deleted: list[int] = []
    ops: list[tuple] = []

    def order(oid: int) -> tuple:
        day = BASE_DAY + datetime.timedelta(days=rng.randrange(n_days))
        return (oid, rng.choice(COMPANIES), day, rng.choice([0, rng.randrange(-(10**6), 0), rng.randrange(1, 10**9)]))

    while len(ops) < n_ops:
        r = rng.random()
        if r < 0.5 or len(live) < 10:
            row = order(rng.randrange(1, 2**62))
        elif r < 0.8:
            oid, company, day, revenue = live[rng.choice(list(live))]
            moved = rng.choice(["company", "day", "revenue", "all"])
            fresh = order(oid)
            row = (
                oid,
                fresh[1] if moved in ("company", "all") else company,
                fresh[2] if moved in ("day", "all") else day,
                fresh[3] if moved in ("revenue", "all") else revenue + rng.randrange(-500, 500),
            )
        elif r < 0.95:
            oid = rng.choice(list(live))
            del live[oid]
            deleted.append(oid)
            ops.append(("delete", oid))
            continue
        elif deleted:
            row = order(deleted.pop(rng.randrange(len(deleted))))
        else:
            continue
        live[row[0]] = row
        ops.append(("upsert", row))
    return ops


def replay(ops) -> dict[int, tuple]:
    """The oracle: each order's last value, deleted orders gone."""
    state: dict[int, tuple] = {}
    for kind, value in ops:
        if kind == "upsert":
            state[value[0]] = value
        else:
            state.pop(value, None)
    return state


# --------------------------------------------------------------------------------------------
# Sockets
# --------------------------------------------------------------------------------------------


def _socket_inodes(pid: int) -> set[str]:
    inodes = set()
    fd_dir = Path(f"/proc/{pid}/fd")
    for fd in fd_dir.iterdir():
        try:
            target = fd.readlink().name
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    return inodes


def _address(hex_addr: str) -> str:
    """/proc/net/tcp{,6}'s address (little-endian words) as text; IPv4-mapped IPv6 as IPv4."""
    raw = bytes.fromhex(hex_addr)
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    if len(words) == 4:
        return ".".join(str(b) for b in words)
    if words[:12] == b"\0" * 10 + b"\xff\xff":
        return ".".join(str(b) for b in words[12:])
    return ":".join(words[i : i + 2].hex() for i in range(0, 16, 2))


def listening_sockets(pid: int) -> list[tuple[str, int]]:
    """(address, port) of every TCP socket process `pid` listens on."""
    inodes = _socket_inodes(pid)
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state == "0A" and inode in inodes:  # 0A: LISTEN
                addr, port = local.split(":")
                found.append((_address(addr), int(port, 16)))
    return sorted(found)
