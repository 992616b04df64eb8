#!/usr/bin/env python3
"""Builds the Python wheel of streamhouse: the release artifact plus the tiny `streamhouse` module
(python/streamhouse), as build/wheel/streamhouse-<version>-py3-none-<platform>.whl.

Usage: build_wheel.py ARTIFACT OUT_DIR

- The version is Cargo.toml's (semver pre-releases map to PEP 440: 1.2.0-rc.1 -> 1.2.0rc1), stamped
  into streamhouse/_version.py.
- The platform tag is computed from what the artifact links, read from its ELF dynamic section and
  version-needs (no tool needed): manylinux_2_<y>_<arch> (PEP 600) when it needs only glibc's own
  libraries and libgcc_s, with symbol versions within the manylinux policy (y is the newest GLIBC_2.y
  it needs, at least 17), else linux_<arch> (for example while it links the system's libssl).
- A wheel is a zip with <name>-<version>.dist-info/{METADATA,WHEEL,RECORD} (RECORD: sha256 of every
  other file, urlsafe base64 without padding, and its size). Entries are sorted and timestamped
  from SOURCE_DATE_EPOCH (default 2000-01-01), so the same inputs give the same bytes.
Standard library only: it runs with the system python3, like scripts/append_metadata.py.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import struct
import sys
import time
import tomllib
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NAME = "streamhouse"
ARTIFACT_NAME = "streamhouse.duckdb_extension"
# The DuckDB Python packages that load the artifact (README: "Supported DuckDB versions").
REQUIRES_DIST = "duckdb>=1.5.6"
REQUIRES_PYTHON = ">=3.9"
# The optional extra streamhouse[ray] (streamhouse.ray.build_mart): these packages at exactly the
# versions scripts/requirements.txt pins (the ones the tests ran with), read from there.
EXTRAS = {"ray": ["ray", "pypaimon", "pypaimon-rust"]}

# ---------------------------------------------------------------------------------------------
# What the artifact links (ELF64 little-endian)
# ---------------------------------------------------------------------------------------------
MACHINES = {62: "x86_64", 183: "aarch64"}
SHT_DYNAMIC, SHT_DYNSYM, SHT_GNU_VERNEED = 6, 11, 0x6FFFFFFE
DT_NEEDED = 1


class Elf:
    def __init__(self, data: bytes):
        if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
            raise SystemExit("build_wheel: the artifact is not a 64-bit little-endian ELF file")
        self.data = data
        (self.machine,) = struct.unpack_from("<H", data, 18)
        (shoff,) = struct.unpack_from("<Q", data, 40)
        shentsize, shnum = struct.unpack_from("<HH", data, 58)
        self.sections = []
        for i in range(shnum):
            (_name, stype, _flags, _addr, offset, size, link, _info, _align, entsize) = struct.unpack_from(
                "<IIQQQQIIQQ", data, shoff + i * shentsize
            )
            self.sections.append((stype, offset, size, link, entsize))

    def _string(self, strtab: int, index: int) -> str:
        start = self.sections[strtab][1] + index
        return self.data[start : self.data.index(b"\0", start)].decode()

    def needed(self) -> list[str]:
        out = []
        for stype, offset, size, link, _ in self.sections:
            if stype == SHT_DYNAMIC:
                for pos in range(offset, offset + size, 16):
                    tag, value = struct.unpack_from("<qQ", self.data, pos)
                    if tag == 0:
                        break
                    if tag == DT_NEEDED:
                        out.append(self._string(link, value))
        return out

    def version_needs(self) -> list[tuple[str, str]]:
        """(library, version name) for every versioned symbol requirement (.gnu.version_r)."""
        out = []
        for stype, offset, _size, link, _ in self.sections:
            if stype != SHT_GNU_VERNEED:
                continue
            pos = offset
            while True:
                _ver, count, file_, aux, next_ = struct.unpack_from("<HHIII", self.data, pos)
                library = self._string(link, file_)
                apos = pos + aux
                for _ in range(count):
                    _hash, _flags, _other, name, anext = struct.unpack_from("<IHHII", self.data, apos)
                    out.append((library, self._string(link, name)))
                    apos += anext
                if not next_:
                    break
                pos += next_
        return out

    def undefined_symbols(self) -> set[str]:
        out = set()
        for stype, offset, size, link, entsize in self.sections:
            if stype == SHT_DYNSYM:
                for pos in range(offset, offset + size, entsize):
                    name, _info, _other, shndx = struct.unpack_from("<IBBH", self.data, pos)
                    if shndx == 0 and name:
                        out.add(self._string(link, name))
        return out


# The manylinux policy (PEP 600, as auditwheel applies it) for what we check: libraries any
# manylinux system provides, libgcc_s symbol versions present since manylinux_2_17 (x86_64), and
# libc symbols refused below manylinux_2_24.
GLIBC_LIBS = {
    "libc.so.6",
    "libm.so.6",
    "libdl.so.2",
    "librt.so.1",
    "libpthread.so.0",
    "libutil.so.1",
    "libresolv.so.2",
    "libanl.so.1",
    "ld-linux-x86-64.so.2",
    "ld-linux-aarch64.so.1",
}
GCC_VERSIONS_2_17 = {"3.0", "3.3", "3.3.1", "3.4", "3.4.2", "3.4.4", "4.0.0", "4.2.0", "4.3.0", "4.7.0", "4.8.0"}
BELOW_2_24_REFUSED = {
    "__cxa_thread_atexit_impl",
    "__issignaling",
    "__issignalingf",
    "__issignalingl",
    "pthread_getattr_default_np",
    "pthread_setattr_default_np",
}


def platform_tag(artifact: Path) -> tuple[str, str]:
    """(tag, why) for the artifact."""
    elf = Elf(artifact.read_bytes())
    arch = MACHINES.get(elf.machine)
    if arch is None:
        raise SystemExit(f"build_wheel: unknown ELF machine {elf.machine}")
    linux = f"linux_{arch}"
    if arch != "x86_64":
        return linux, f"manylinux policy checked here for x86_64 only, not {arch}"
    foreign = [lib for lib in elf.needed() if lib not in GLIBC_LIBS | {"libgcc_s.so.1"}]
    if foreign:
        return linux, f"links {', '.join(foreign)}: only glibc's libraries and libgcc_s are accepted for manylinux here"
    glibc_minor = 17
    for library, version in elf.version_needs():
        m = re.fullmatch(r"GLIBC_2\.(\d+)(?:\.\d+)?", version)
        if m and library in GLIBC_LIBS:
            glibc_minor = max(glibc_minor, int(m.group(1)))
        elif library == "libgcc_s.so.1" and version.startswith("GCC_") and version[4:] in GCC_VERSIONS_2_17:
            pass
        else:
            return linux, f"needs {version} from {library}, outside the manylinux policy"
    refused = sorted(BELOW_2_24_REFUSED & elf.undefined_symbols())
    if refused and glibc_minor < 24:
        glibc_minor = 24
    return f"manylinux_2_{glibc_minor}_{arch}", f"needs glibc 2.{glibc_minor} and only glibc's libraries and libgcc_s"


# ---------------------------------------------------------------------------------------------
# The wheel
# ---------------------------------------------------------------------------------------------
def cargo_version() -> str:
    with open(ROOT / "Cargo.toml", "rb") as f:
        version = tomllib.load(f)["package"]["version"]
    m = re.fullmatch(r"(\d+\.\d+\.\d+)(?:-(alpha|beta|rc)\.?(\d+))?", version)
    if not m:
        raise SystemExit(f"build_wheel: Cargo.toml version {version!r} has no PEP 440 spelling here")
    release, pre, n = m.groups()
    return release + ({"alpha": "a", "beta": "b", "rc": "rc"}[pre] + n if pre else "")


def record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def extras_metadata() -> str:
    pins = {}
    for line in (ROOT / "scripts" / "requirements.txt").read_text().splitlines():
        if "==" in line and not line.startswith("#"):
            name, version = line.split("#", 1)[0].strip().split("==")
            pins[name.lower()] = version
    out = ""
    for extra, names in EXTRAS.items():
        out += f"Provides-Extra: {extra}\n"
        for name in names:
            if name.lower() not in pins:
                raise SystemExit(f"build_wheel: scripts/requirements.txt pins no {name} (extra {extra})")
            out += f'Requires-Dist: {name}=={pins[name.lower()]}; extra == "{extra}"\n'
    return out


def metadata(version: str) -> str:
    with open(ROOT / "Cargo.toml", "rb") as f:
        package = tomllib.load(f)["package"]
    return (
        "Metadata-Version: 2.1\n"
        f"Name: {NAME}\n"
        f"Version: {version}\n"
        f"Summary: {package['description']}\n"
        f"License: {package['license']}\n"
        f"Requires-Python: {REQUIRES_PYTHON}\n"
        f"Requires-Dist: {REQUIRES_DIST}\n"
        f"{extras_metadata()}"
        "Description-Content-Type: text/markdown\n"
        "\n"
        "The streamhouse DuckDB extension (a Paimon lake serving layer) and a module that loads it:\n"
        "\n"
        "```python\n"
        "import duckdb, streamhouse\n"
        "con = duckdb.connect(config={'allow_unsigned_extensions': 'true'})\n"
        "streamhouse.load(con)\n"
        "```\n"
    )


def build(artifact: Path, out_dir: Path) -> Path:
    version = cargo_version()
    tag, why = platform_tag(artifact)
    dist_info = f"{NAME}-{version}.dist-info"
    module = ROOT / "python" / NAME
    files: dict[str, bytes] = {}
    for src in sorted(module.glob("*.py")):
        files[f"{NAME}/{src.name}"] = src.read_bytes()
    files[f"{NAME}/_version.py"] = f'__version__ = "{version}"\n'.encode()
    files[f"{NAME}/{ARTIFACT_NAME}"] = artifact.read_bytes()
    files[f"{dist_info}/METADATA"] = metadata(version).encode()
    files[f"{dist_info}/WHEEL"] = (
        "Wheel-Version: 1.0\n"
        "Generator: streamhouse scripts/build_wheel.py\n"
        "Root-Is-Purelib: false\n"
        f"Tag: py3-none-{tag}\n"
    ).encode()
    record = "".join(f"{path},{record_hash(data)},{len(data)}\n" for path, data in files.items())
    files[f"{dist_info}/RECORD"] = (record + f"{dist_info}/RECORD,,\n").encode()

    out_dir.mkdir(parents=True, exist_ok=True)
    for old in out_dir.glob("*.whl"):  # exactly one wheel: the one built now
        old.unlink()
    wheel = out_dir / f"{NAME}-{version}-py3-none-{tag}.whl"
    stamp = time.gmtime(int(os.environ.get("SOURCE_DATE_EPOCH", "946684800")))[:6]
    tmp = wheel.with_suffix(".tmp")
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as z:
        # The module first, dist-info last (RECORD at the very end), as the wheel spec recommends.
        for path in sorted(files, key=lambda p: (p.startswith(dist_info), p.endswith("/RECORD"), p)):
            info = zipfile.ZipInfo(path, date_time=stamp)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            z.writestr(info, files[path])
    tmp.rename(wheel)
    print(f"build_wheel: {wheel} ({tag}: {why})")
    return wheel


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    build(Path(sys.argv[1]), Path(sys.argv[2]))
