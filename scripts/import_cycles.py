#!/usr/bin/env python3
"""Import cycles between the Rust modules under src/ (issue 38): prints every cycle and exits 1 if
there is one, 0 (printing "no import cycle") if there is none.

A module is a file (src/lib.rs is `crate`, src/a/mod.rs is `crate::a`, src/a/b.rs is `crate::a::b`;
an inline `mod x { .. }` belongs to its file). Module A depends on module B when A's code (tests
excluded: `#[cfg(test)]` items and files declared under it) names a path into B: `crate::..`,
`super::..`, `self::..`, a child module by its bare name, each `use` tree expanded
(`use crate::x::{a, b::{c}}`). A path resolves to the deepest module it names; an item a module
re-exports (`pub use child::Item`) resolves to the module that defines it. Comments and string
literals are ignored.

It also checks the layers (src/lib.rs's module doc): a module of a top-level folder may use only
folders of a lower layer (or its own folder); `fluss` and `lake` are one layer and never use each
other. Each arrow against the layers is printed ("layer: ...") and exits 1 too.

Usage: scripts/import_cycles.py [SRC_DIR]   (default: src/ beside this script's folder)
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
KEYWORD_ROOTS = ("crate", "super", "self")


def strip_comments_and_strings(text: str) -> str:
    """The code with comments and string/char literals blanked (newlines kept)."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if text.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif text.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    if text[i] == "\n":
                        out.append("\n")
                    i += 1
        elif (m := re.match(r'b?r(#*)"', text[i:])) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            end = text.find('"' + m.group(1), i + m.end())
            end = n if end < 0 else end + 1 + len(m.group(1))
            out.append('""' + "\n" * text.count("\n", i, end))
            i = end
        elif c == '"' or (c == "b" and text.startswith('b"', i) and (i == 0 or not text[i - 1].isalnum())):
            i += 2 if c == "b" else 1
            start = i
            while i < n and text[i] != '"':
                i += 2 if text[i] == "\\" else 1
            out.append('""' + "\n" * text.count("\n", start, i))
            i += 1
        elif c == "'":
            m = re.match(r"'(\\(x[0-9a-fA-F]{2}|u\{[0-9a-fA-F]+\}|.)|[^\\'])'", text[i:])
            if m:
                out.append("' '")
                i += m.end()
            else:  # a lifetime
                out.append(c)
                i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def block_end(text: str, start: int) -> int:
    """The index just past the item starting at `start`: its balanced `{..}` block, or its `;`."""
    i = start
    while i < len(text) and text[i] not in "{;":
        i += 1
    if i >= len(text) or text[i] == ";":
        return i + 1
    depth = 0
    while i < len(text):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return i


TEST_ATTR = re.compile(r"#\[cfg\((test|all\(test[^\]]*)\)\]")


def strip_tests(text: str) -> tuple[str, set[str]]:
    """The code without its `#[cfg(test)]` items, and the names of the file modules declared under it."""
    test_mods: set[str] = set()
    while m := TEST_ATTR.search(text):
        rest = text[m.end() :]
        item = re.match(r"\s*(?:#\[[^\]]*\]\s*)*(?:pub(?:\([^)]*\))?\s+)?", rest)
        j = m.end() + item.end()
        if dm := re.match(rf"mod\s+({IDENT})\s*;", text[j:]):
            test_mods.add(dm.group(1))
        end = block_end(text, j)
        text = text[: m.start()] + "\n" * text.count("\n", m.start(), end) + text[end:]
    return text, test_mods


def expand_use_tree(tree: str) -> list[list[str]]:
    """`crate::a::{b, c::{d, self}}` as [[crate, a, b], [crate, a, c, d], [crate, a, c]]."""
    tree = re.sub(rf"\s+as\s+{IDENT}", "", tree)  # renames: `x as y` keeps x
    tree = re.sub(r"\s+", "", tree)

    def parse(s: str, prefix: list[str]) -> list[list[str]]:
        if "{" not in s:
            segs = [x for x in s.split("::") if x]
            if segs and segs[-1] == "self":
                segs = segs[:-1]
            if segs and segs[-1] == "*":
                segs = segs[:-1]
            return [prefix + segs]
        head, _, body = s.partition("{")
        body = body[: body.rfind("}")]
        base = prefix + [x for x in head.split("::") if x]
        parts, depth, cur = [], 0, ""
        for ch in body:
            if ch == "," and depth == 0:
                parts.append(cur)
                cur = ""
                continue
            depth += ch == "{"
            depth -= ch == "}"
            cur += ch
        parts.append(cur)
        paths = []
        for p in parts:
            if p:
                paths += parse(p, base)
        return paths

    return parse(tree, [])


class Crate:
    def __init__(self, src: Path):
        self.src = src
        self.files: dict[tuple, Path] = {}  # module path -> file
        self.code: dict[tuple, str] = {}
        self.children: dict[tuple, set[str]] = {}
        self.inline: dict[tuple, tuple] = {}  # inline module path -> its file's module
        self.reexports: dict[tuple, dict[str, list[str]]] = {}  # module -> name -> absolute target
        self._load(("crate",), src / "lib.rs")

    def _load(self, module: tuple, path: Path) -> None:
        text, test_mods = strip_tests(strip_comments_and_strings(path.read_text()))
        self.files[module] = path
        self.code[module] = text
        kids = set()
        for m in re.finditer(rf"(?:^|[;}}\s])(?:pub(?:\([^)]*\))?\s+)?mod\s+({IDENT})\s*([;{{])", text):
            name, kind = m.group(1), m.group(2)
            if kind == "{":
                self.inline[(*module, name)] = module
                kids.add(name)
                continue
            if name in test_mods:
                continue
            base = path.parent if path.name in ("lib.rs", "mod.rs") else path.parent / path.stem
            child = base / f"{name}.rs"
            if not child.exists():
                child = base / name / "mod.rs"
            if child.exists():
                kids.add(name)
                self._load((*module, name), child)
        self.children[module] = kids

    def absolute(self, module: tuple, segs: list[str]) -> list[str] | None:
        """`segs` as an absolute path from the crate root, or None for an outside crate."""
        if not segs:
            return None
        home = self.inline.get(module, module)
        if segs[0] == "crate":
            return segs
        if segs[0] == "self":
            return list(home) + segs[1:]
        if segs[0] == "super":
            base = list(home)
            while segs and segs[0] == "super":
                base, segs = base[:-1], segs[1:]
            return base + segs
        if segs[0] in self.children.get(home, ()):
            return list(home) + segs
        return None

    def resolve(self, segs: list[str], depth: int = 0) -> tuple | None:
        """The module (file) an absolute path lands in."""
        best = None
        for k in range(len(segs), 0, -1):
            key = tuple(segs[:k])
            key = self.inline.get(key, key)
            if key in self.files:
                best = (key, segs[k:])
                break
        if best is None:
            return None
        module, rest = best
        if rest and depth < 8:
            target = self.reexports.get(module, {}).get(rest[0])
            if target is not None:
                return self.resolve(target + rest[1:], depth + 1) or module
        return module

    def uses(self, module: tuple) -> list[tuple[list[str], bool]]:
        """Every path `module`'s code names (relative as written), with whether it is a `pub use`."""
        text = self.code[module]
        found = []
        spans = []
        for m in re.finditer(r"(?:^|[;{}\s])((pub(?:\([^)]*\))?\s+)?use\s+([^;]+);)", text):
            spans.append((m.start(1), m.end(1)))
            for segs in expand_use_tree(m.group(3)):
                found.append((segs, m.group(2) is not None))
        rest = list(text)
        for a, b in spans:
            rest[a:b] = " " * (b - a)
        rest = "".join(rest)
        home = self.inline.get(module, module)
        roots = set(KEYWORD_ROOTS) | self.children.get(home, set())
        for m in re.finditer(rf"(?<![A-Za-z0-9_:])({IDENT}(?:\s*::\s*{IDENT})+)", rest):
            segs = re.split(r"\s*::\s*", m.group(1))
            if segs[0] in roots:
                found.append((segs, False))
        return found

    def graph(self) -> dict[tuple, dict[tuple, set[str]]]:
        # Re-exports first: `pub use child::Item` in a module makes `module::Item` mean the child's.
        for module in self.files:
            for segs, public in self.uses(module):
                if public and segs:
                    target = self.absolute(module, segs)
                    if target:
                        self.reexports.setdefault(module, {})[segs[-1]] = target
        edges: dict[tuple, dict[tuple, set[str]]] = {m: {} for m in self.files}
        for module in self.files:
            for segs, public in self.uses(module):
                target = self.absolute(module, segs)
                if target is None:
                    continue
                to = self.resolve(target)
                if to is None or to == module:
                    continue
                if public and to in self.children_of(module):
                    continue  # a facade re-exporting its own child is not a use of the child
                edges[module].setdefault(to, set()).add("::".join(segs))
        return edges

    def children_of(self, module: tuple) -> set[tuple]:
        return {(*module, k) for k in self.children.get(module, ())}


def cycles(edges: dict[tuple, dict[tuple, set[str]]]) -> list[list[tuple]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[tuple, int] = {}
    low: dict[tuple, int] = {}
    stack: list[tuple] = []
    on: set[tuple] = set()
    out: list[list[tuple]] = []
    counter = [0]

    def visit(v: tuple) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def name(module: tuple) -> str:
    return "::".join(module[1:]) or "crate"


# The layers, top first (src/lib.rs): a folder may use the folders of a lower rank only.
LAYERS = {"functions": 4, "serving": 3, "fluss": 2, "lake": 2, "host": 1, "core": 0}


def against_layers(edges: dict[tuple, dict[tuple, set[str]]]) -> list[str]:
    """Every arrow from a top-level folder to one of the same or a higher layer (not itself)."""
    out = []
    for a, targets in sorted(edges.items()):
        for b, names in sorted(targets.items()):
            fa, fb = (a[1] if len(a) > 1 else None), (b[1] if len(b) > 1 else None)
            if fa in LAYERS and fb in LAYERS and fa != fb and LAYERS[fb] >= LAYERS[fa]:
                out.append(f"layer: {name(a)} -> {name(b)} ({fa} may not use {fb}): {', '.join(sorted(names))}")
    return out


def main(argv: list[str]) -> int:
    src = Path(argv[1]) if len(argv) > 1 else Path(__file__).resolve().parent.parent / "src"
    crate = Crate(src)
    edges = crate.graph()
    found = cycles(edges)
    wrong = against_layers(edges)
    for line in wrong:
        print(line)
    if not found:
        print(f"no import cycle ({len(edges)} modules, {sum(len(e) for e in edges.values())} edges)")
        return 1 if wrong else 0
    for comp in found:
        members = set(comp)
        print(f"cycle: {{{', '.join(name(m) for m in comp)}}}")
        for a in comp:
            for b in sorted(edges[a]):
                if b in members:
                    names = ", ".join(sorted(edges[a][b]))
                    print(f"  {name(a)} -> {name(b)}: {names}")
    print(f"{len(found)} import cycle(s)")
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
