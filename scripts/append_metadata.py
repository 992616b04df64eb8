#!/usr/bin/env python3
"""Copy a cdylib to `<out>` and append DuckDB's 534-byte extension metadata footer.

DuckDB refuses to LOAD a file without it. Layout (all written here, nothing downloaded):
a 22-byte WebAssembly-style custom-section header named `duckdb_signature`, eight 32-byte
NUL-padded fields (three empty, abi type, extension version, C API version, platform,
magic "4"), then 256 signature bytes left zero (the file is unsigned).
"""

import argparse
import os
import shutil


def leb128(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def field(text: str) -> bytes:
    raw = text.encode()
    if len(raw) > 32:
        raise SystemExit(f"metadata field {text!r} is longer than 32 bytes")
    return raw.ljust(32, b"\0")


def footer(platform: str, ext_version: str, capi_version: str, abi: str) -> bytes:
    name = b"duckdb_signature"
    fields = b"".join(field(f) for f in ["", "", "", abi, ext_version, capi_version, platform, "4"])
    payload = fields + b"\0" * 256
    body = leb128(len(name)) + name + leb128(len(payload))
    section = b"\0" + leb128(len(body) + len(payload)) + body
    assert len(section) == 22, len(section)
    return section + payload


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("library")
    p.add_argument("out")
    p.add_argument("--platform", default="linux_amd64")
    p.add_argument("--extension-version", default="v0.1.0")
    p.add_argument("--capi-version", default="v1.5.6")
    p.add_argument("--abi", default="C_STRUCT")
    a = p.parse_args()
    # Write beside and rename: a process that has the old file loaded keeps a valid mapping.
    tmp = a.out + ".tmp"
    shutil.copyfile(a.library, tmp)
    with open(tmp, "ab") as f:
        f.write(footer(a.platform, a.extension_version, a.capi_version, a.abi))
    os.replace(tmp, a.out)


if __name__ == "__main__":
    main()
