"""The Python wheel built by `make wheel` (scripts/build_wheel.py): exactly one wheel under
build/wheel, holding the current release artifact; a valid wheel (RECORD digests, WHEEL tag,
METADATA, version = Cargo.toml's); a platform tag equal to what auditwheel (pinned in
scripts/requirements.txt) derives from the same binary; installed into a fresh venv with only the
pinned duckdb, it imports, loads, serves, and explains the unsigned-extension refusal
(wheel_smoke.py); on a DuckDB too old for the artifact the error names the version needed."""

from __future__ import annotations

import base64
import datetime
import hashlib
import json
import re
import shutil
import sys
import tomllib
import zipfile
from pathlib import Path

import duckdb
import pytest
from conftest import ROOT, oracle, readme_block
from support.matrix_util import python_of, run

WHEEL_DIR = ROOT / "build" / "wheel"
ARTIFACT = "streamhouse/streamhouse.duckdb_extension"
AUDITWHEEL = Path(sys.executable).parent / "auditwheel"


def cargo_version() -> str:
    with open(ROOT / "Cargo.toml", "rb") as f:
        return tomllib.load(f)["package"]["version"]


def pinned_duckdb() -> str:
    pins = re.findall(r"^duckdb==(\S+)$", (ROOT / "scripts" / "requirements.txt").read_text(), re.M)
    assert len(pins) == 1, pins
    return pins[0]


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture(scope="module")
def wheel(ext_path) -> Path:
    wheels = sorted(WHEEL_DIR.glob("*.whl"))
    if len(wheels) != 1:
        pytest.fail(
            f"expected exactly one wheel in {WHEEL_DIR}, found {[w.name for w in wheels]}: run `make wheel`",
            pytrace=False,
        )
    with zipfile.ZipFile(wheels[0]) as z:
        packaged = z.read(ARTIFACT)
    if sha256(packaged) != sha256(Path(ext_path).read_bytes()):
        pytest.fail(
            f"{wheels[0].name} holds another build of the extension than {ext_path}: run `make wheel`", pytrace=False
        )
    return wheels[0]


def auditwheel_tag(wheel: Path) -> str:
    if not AUDITWHEEL.is_file():
        pytest.fail(f"{AUDITWHEEL} missing (pinned in scripts/requirements.txt): run `make venv`", pytrace=False)
    out = " ".join(run([AUDITWHEEL, "show", wheel]).stdout.split())
    m = re.search(r'is consistent with the following platform tag: "([^"]+)"', out)
    assert m, out
    return m.group(1)


def wheel_tag(wheel: Path) -> str:
    m = re.fullmatch(r"streamhouse-([^-]+)-py3-none-([a-z0-9_]+)\.whl", wheel.name)
    assert m, wheel.name
    return m.group(2)


def test_wheel_is_a_valid_wheel_of_this_version(wheel):
    version = cargo_version()
    assert wheel.name == f"streamhouse-{version}-py3-none-{wheel_tag(wheel)}.whl"
    dist_info = f"streamhouse-{version}.dist-info"
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        files = {n: z.read(n) for n in names}
    assert sorted(names) == sorted(
        [
            "streamhouse/__init__.py",
            "streamhouse/_version.py",
            "streamhouse/ray.py",
            ARTIFACT,
            f"{dist_info}/METADATA",
            f"{dist_info}/WHEEL",
            f"{dist_info}/RECORD",
        ]
    )
    assert files["streamhouse/__init__.py"] == (ROOT / "python" / "streamhouse" / "__init__.py").read_bytes()
    assert files["streamhouse/_version.py"].decode() == f'__version__ = "{version}"\n'

    # RECORD: every other file exactly once with its sha256 (urlsafe base64, no padding) and size.
    record = files[f"{dist_info}/RECORD"].decode().splitlines()
    assert record[-1] == f"{dist_info}/RECORD,,"
    listed = {}
    for line in record[:-1]:
        path, digest, size = line.split(",")
        want = base64.urlsafe_b64encode(hashlib.sha256(files[path]).digest()).rstrip(b"=").decode()
        assert digest == f"sha256={want}", path
        assert int(size) == len(files[path]), path
        listed[path] = True
    assert sorted(listed) == sorted(n for n in names if n != f"{dist_info}/RECORD")

    wheel_meta = dict(line.split(": ", 1) for line in files[f"{dist_info}/WHEEL"].decode().splitlines())
    assert wheel_meta == {
        "Wheel-Version": "1.0",
        "Generator": "streamhouse scripts/build_wheel.py",
        "Root-Is-Purelib": "false",
        "Tag": f"py3-none-{wheel_tag(wheel)}",
    }
    head = files[f"{dist_info}/METADATA"].decode().split("\n\n", 1)[0]
    meta = [tuple(line.split(": ", 1)) for line in head.splitlines()]
    assert ("Name", "streamhouse") in meta and ("Version", version) in meta
    assert ("Requires-Dist", "duckdb>=1.5.6") in meta  # the oldest DuckDB that loads the artifact (README)
    # the optional extra streamhouse[ray], pinned as scripts/requirements.txt pins the tested versions
    pins = dict(re.findall(r"^([A-Za-z0-9_.\[\]-]+)==(\S+)", (ROOT / "scripts" / "requirements.txt").read_text(), re.M))
    assert ("Provides-Extra", "ray") in meta
    for name in ("ray", "pypaimon", "pypaimon-rust"):
        assert ("Requires-Dist", f'{name}=={pins[name]}; extra == "ray"') in meta, (name, head)
    assert files["streamhouse/ray.py"] == (ROOT / "python" / "streamhouse" / "ray.py").read_bytes()


def test_platform_tag_is_what_auditwheel_derives(wheel):
    assert wheel_tag(wheel) == auditwheel_tag(wheel)


def system_library(name: str) -> Path:
    for d in ("/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64"):
        if (Path(d) / name).is_file():
            return Path(d) / name
    pytest.fail(f"{name} not found on this machine", pytrace=False)


@pytest.mark.parametrize("library", ["libz.so.1", "libssl.so.3"])
def test_platform_tag_rule_agrees_with_auditwheel_on_other_binaries(library, tmp_path):
    """Both branches of the rule, whatever the artifact links today: zlib needs glibc only
    (manylinux_2_y), libssl links libcrypto (linux)."""
    run(
        [
            shutil.which("python3") or sys.executable,
            ROOT / "scripts" / "build_wheel.py",
            system_library(library),
            tmp_path,
        ]
    )
    (built,) = tmp_path.glob("*.whl")
    tag = wheel_tag(built)
    assert tag.startswith("manylinux_2_" if library == "libz.so.1" else "linux_"), tag
    assert tag == auditwheel_tag(built)


@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory) -> Path:
    """The python of a fresh venv holding only the pinned duckdb and the wheel."""
    venv = tmp_path_factory.mktemp("wheel_venv") / "venv"
    run([shutil.which("python3") or sys.executable, "-m", "venv", venv], timeout=120)
    py = venv / "bin" / "python"
    run(
        [
            py,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "-c",
            ROOT / "scripts" / "constraints.txt",
            f"duckdb=={pinned_duckdb()}",
            wheel,
        ],
        timeout=240,
    )
    freeze = run([py, "-m", "pip", "list", "--format=freeze", "--disable-pip-version-check"]).stdout.split()
    installed = {line.split("==")[0].lower(): line.split("==")[1] for line in freeze}
    for tool in ("pip", "setuptools", "wheel"):
        installed.pop(tool, None)
    assert installed == {"duckdb": pinned_duckdb(), "streamhouse": cargo_version()}, installed
    return py


@pytest.mark.timeout(300)
def test_wheel_installs_into_a_fresh_venv_and_serves(installed, tmp_path):
    py = installed
    work = tmp_path / "work"
    work.mkdir()
    p = run(
        [py, ROOT / "test" / "python" / "support" / "wheel_smoke.py", cargo_version(), ROOT, work],
        cwd=work,
        timeout=120,
    )
    assert p.stdout.strip().endswith("SMOKE OK"), p.stdout
    # The README's Python block, as written, beside an orders.parquet of the README's orders.
    orders = [
        (1, "acme", datetime.date(2026, 11, 1), 1200),
        (2, "acme", datetime.date(2026, 11, 1), 300),
        (3, "acme", datetime.date(2026, 11, 2), 900),
        (4, "O'Reilly", datetime.date(2026, 11, 2), 50),
    ]
    src = duckdb.connect()
    src.execute("CREATE TABLE o(order_id BIGINT, company VARCHAR, order_day DATE, revenue BIGINT)")
    src.executemany("INSERT INTO o VALUES (?, ?, ?, ?)", orders)
    src.execute(f"COPY o TO '{work / 'orders.parquet'}' (FORMAT parquet)")
    src.close()
    p = run([py, "-c", readme_block("python", "streamhouse.load(con)")], cwd=work, timeout=120)
    assert p.stdout.strip().splitlines()[-1] == repr(oracle(orders)[0]["acme"]), p.stdout


@pytest.mark.timeout(300)
def test_the_docstring_example_builds(installed, tmp_path):
    """`help(streamhouse)`'s example, run as written by the installed wheel, builds the layer: its
    dashboard equals a plain-Python oracle over the orders it created (read back from its own
    `orders` table), and `fct_orders` holds every one of them. (`con.sql(...)` in the example
    once built nothing: a lazy relation.)"""
    probe = (
        "import streamhouse, textwrap\nlines = streamhouse.__doc__.split('\\n\\n')[1]\nprint(textwrap.dedent(lines))\n"
    )
    block = run([installed, "-c", probe], cwd=tmp_path, timeout=60).stdout
    assert "streamhouse.load(con)" in block and "serving_build" in block, block
    check = (
        "\nimport json\n"
        "print('CHECK ' + json.dumps({'orders': con.execute('SELECT * FROM orders').fetchall(), "
        "'fct': con.execute('SELECT count(*) FROM fct_orders').fetchone()[0]}, default=str))\n"
    )
    out = run([installed, "-c", block + check], cwd=tmp_path, timeout=120).stdout.strip().splitlines()
    got = json.loads(out[-1].removeprefix("CHECK "))
    orders = [(o, c, datetime.date.fromisoformat(d), r) for o, c, d, r in got["orders"]]
    assert orders and got["fct"] == len(orders), got
    assert out[-2] == repr(oracle(orders)[0]["acme"]), out


def test_load_on_a_duckdb_too_old_names_the_version_needed(wheel, tmp_path):
    """DuckDB 1.4.5 (the venv of the version matrix) refuses the artifact's C API version:
    streamhouse.load says which DuckDB it needs."""
    with zipfile.ZipFile(wheel) as z:
        z.extractall(tmp_path / "site")
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); import duckdb, streamhouse\n"
        "con = duckdb.connect(config={'allow_unsigned_extensions': 'true'})\n"
        "try:\n    streamhouse.load(con)\nexcept streamhouse.LoadError as e:\n    print('LOADERROR', e)\n"
    )
    p = run([python_of("1.4.5"), "-c", code, tmp_path / "site"], cwd=tmp_path)
    assert "LOADERROR this DuckDB cannot load streamhouse" in p.stdout, p.stdout
    assert "needs DuckDB 1.5.6 or newer" in p.stdout, p.stdout
