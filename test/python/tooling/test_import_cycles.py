"""No import cycle between the Rust modules (issue 38): scripts/import_cycles.py finds none in src/,
and, on small crates written here, finds the cycles it must (through `crate::`, `super::`, a bare
child module, a grouped `use`) and none it must not (tests, comments, strings, a facade's
`pub use` of its own child)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from conftest import ROOT

CHECKER = ROOT / "scripts" / "import_cycles.py"


def check(src: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(CHECKER), str(src)], capture_output=True, text=True, timeout=60)


def write(root: Path, files: dict) -> Path:
    for name, text in files.items():
        path = root / "src" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root / "src"


def test_src_has_no_import_cycle():
    p = check(ROOT / "src")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "no import cycle" in p.stdout and "layer:" not in p.stdout


def test_an_arrow_against_the_layers_is_found(tmp_path):
    """core is pure (the sandbox, which looks at the disk, lives in host): core may use nothing
    above it, and lake and fluss, one layer, never each other."""
    src = write(
        tmp_path,
        {
            "lib.rs": "pub mod core;\npub mod host;\npub mod lake;\npub mod fluss;\n",
            "core/mod.rs": "pub mod source;\n",
            "core/source.rs": "use crate::host::sandbox::Sandbox;\npub fn f(_: Sandbox) {}\n",
            "host/mod.rs": "pub mod sandbox;\n",
            "host/sandbox.rs": "pub struct Sandbox;\n",
            "lake/mod.rs": "pub fn g() { crate::fluss::h(); crate::host::sandbox::Sandbox; }\n",
            "fluss/mod.rs": "pub fn h() {}\n",
        },
    )
    p = check(src)
    assert p.returncode == 1, p.stdout
    assert "layer: core::source -> host::sandbox (core may not use host): " in p.stdout, p.stdout
    assert "layer: lake -> fluss (lake may not use fluss): " in p.stdout, p.stdout
    assert "lake -> host" not in p.stdout, p.stdout


def test_a_cycle_through_grouped_uses_super_and_a_bare_child_is_found(tmp_path):
    src = write(
        tmp_path,
        {
            "lib.rs": "pub mod a;\n",
            "a/mod.rs": "pub mod b;\npub mod c;\npub fn top() { b::f(); }\n",
            "a/b.rs": "use crate::a::{c::{self, g}};\npub fn f() { g(); }\n",
            "a/c.rs": "pub fn g() { super::top(); }\n",
        },
    )
    p = check(src)
    assert p.returncode == 1, p.stdout
    assert "cycle: {a, a::b, a::c}" in p.stdout, p.stdout
    assert "a::c -> a: super::top" in p.stdout, p.stdout
    assert "a -> a::b: b::f" in p.stdout, p.stdout


def test_tests_comments_strings_and_a_facade_make_no_cycle(tmp_path):
    src = write(
        tmp_path,
        {
            "lib.rs": "pub mod a;\n",
            # The facade re-exports its children; the children reach each other through it.
            "a/mod.rs": "//! see crate::a::b::f\nmod b;\nmod c;\npub use b::f;\npub use c::{g, H};\n",
            "a/b.rs": 'pub fn f() { let _ = "crate::a::c::g"; super::g(); }\n',
            "a/c.rs": (
                "pub struct H;\npub fn g() {}\n"
                "// crate::a::b::f()\n/* crate::a::b::f() */\n"
                "#[cfg(test)]\nmod tests {\n    use crate::a::b::f;\n    fn t() { f(); }\n}\n"
            ),
        },
    )
    p = check(src)
    assert p.returncode == 0, p.stdout + p.stderr
