#!/usr/bin/env python3
"""Find import cycles between source files: Rust crates and the `dtcomm` Python package.

Rust: each src/**/*.rs file of every crate (a Cargo.toml beside a src/; target/ skipped) is a
module (src/lib.rs, src/main.rs: the root; src/a.rs, src/a/mod.rs: `a`; src/a/b.rs: `a::b`;
src/bin/X.rs: the root of binary X). Comments, literals, `pub(in ...)` and `#[cfg(test)]` items
removed, every `crate::`/`self::`/`super::` path (in `use` trees or inline) is an edge to the
file of its longest module prefix. Other paths (std, other crates) and `mod x;` declarations
(the module tree) make none; a file declared `#[cfg(test)] mod x;` is left out.
Python: every .py under python/dtcomm/, imports anywhere (function-local ones too), relative or
`dtcomm.`-absolute, and `__import__`/`import_module` of a constant. `from P import n` points at
module P.n if it is a file, else at P's file; compiled modules (`_dtcomm`, a .pyi) are skipped.
Each strongly connected set of 2+ files is printed with one shortest cycle through it, each
edge with the first line that made it; exit status 1 then, else 0.

Folders too (Rust): within each module that has submodules, every child module is one room
(a file, or a folder with everything under it); an edge between two files makes an edge
between their rooms at the deepest level where they differ (a module and its own descendants
make none). A cycle between rooms (`engine/` -> `shm/` -> `engine/`) fails the check like a
cycle between files, even when no two files form one.
"""

import argparse
import ast
import bisect
import os
import re
import sys
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

PY_PACKAGE = Path("python") / "dtcomm"
EXTENSION_MODULES = frozenset({"_dtcomm"})
SKIP_DIRS = frozenset({"target", "node_modules", "__pycache__"})
Module = tuple[str, ...]


@dataclass(frozen=True)
class Edge:
    """`src` refers to something in `dst`, first at `src`:`line`, through `text`."""

    src: str
    dst: str
    line: int
    text: str


Graph = dict[str, dict[str, Edge]]


def add_edge(graph: Graph, root: Path, src: Path, dst: Path, line: int, text: str) -> None:
    """Record src -> dst (paths shown relative to `root`) unless a self-edge or a later line."""
    edge = Edge(src.relative_to(root).as_posix(), dst.relative_to(root).as_posix(), line, text)
    old = graph.setdefault(edge.src, {}).get(edge.dst)
    if src != dst and (old is None or line < old.line):
        graph[edge.src][edge.dst] = edge


_LEX = re.compile(
    r'//[^\n]*|/\*|(?<!\w)b?r(#*)".*?"\1|(?<!\w)b?"(?:[^"\\]|\\.)*"'
    r"|(?<!\w)b?'(?:\\(?:x[0-9a-fA-F]{2}|u\{[0-9a-fA-F]{1,6}\}|.)|[^\\'\n])'",
    re.S,
)
_BLOCK = re.compile(r"/\*|\*/")
_CFG_TEST = re.compile(r"#\s*\[\s*cfg\s*\(\s*(?:test|all\s*\(\s*test\s*,[^\]]*\))\s*\)\s*\]")
_FILE_CFG_TEST = re.compile(r"#!\s*\[\s*cfg\s*\(\s*test\s*\)\s*\]")
_BRACKET = re.compile(r"[()\[\]{};]")
_ATTR = re.compile(r"#\s*\[[^\]]*\]")
_MOD_DECL = re.compile(r"(?:pub(?:\s*\([^)]*\))?\s+)?mod\s+(\w+)\s*;")
_PUB_IN = re.compile(r"pub\s*\(\s*in\s+[^)]*\)")
_USE = re.compile(r"(?<![\w$])use\s+([^;]*);")
_USE_TOKEN = re.compile(r"\$?\w+|::|[{},*]")
_PATH = re.compile(r"(?<![\w$])(\$?crate|self|super)((?:\s*::\s*\w+)+)")
_INLINE_MOD = re.compile(r"(?<![\w$])mod\s+(\w+)\s*\{")


def _blank(text: str) -> str:
    """`text` with everything but newlines turned into spaces (offsets and lines kept)."""
    return re.sub(r"[^\n]", " ", text)


def strip_rust(text: str) -> str:
    """Blank out comments (doc and nested block comments too), strings and char literals."""
    out: list[str] = []
    pos = 0
    while m := _LEX.search(text, pos):
        end = m.end()
        if m.group() == "/*":
            depth = 1
            while depth and (b := _BLOCK.search(text, end)):
                depth, end = depth + (1 if b.group() == "/*" else -1), b.end()
            end = end if depth == 0 else len(text)
        out += [text[pos : m.start()], _blank(text[m.start() : end])]
        pos = end
    return "".join(out) + text[pos:]


def _item_end(text: str, pos: int) -> int:
    """Offset just past the item starting at `pos`: a `;` or a closing `}` at depth 0."""
    depth = 0
    for b in _BRACKET.finditer(text, pos):
        c = b.group()
        if c == ";" and depth == 0:
            return b.end()
        depth += 1 if c in "([{" else -1 if c in ")]}" else 0
        if c == "}" and depth == 0:
            return b.end()
    return len(text)


def strip_cfg_test(text: str) -> tuple[str, list[str]]:
    """Blank every `#[cfg(test)]` item; also return the names of test-only `mod x;` files."""
    test_mods: list[str] = []
    while m := _CFG_TEST.search(text):
        end = _item_end(text, m.end())
        if decl := _MOD_DECL.fullmatch(_ATTR.sub(" ", text[m.end() : end]).strip()):
            test_mods.append(decl.group(1))
        text = text[: m.start()] + _blank(text[m.start() : end]) + text[end:]
    return text, test_mods


def expand_use(body: str, base: int) -> list[tuple[list[str], int]]:
    """The paths of a use tree (`a::{b, c::{d as e, *}}`), each with its leaf's offset."""
    toks = [(t.group(), base + t.start()) for t in _USE_TOKEN.finditer(body)]
    out: list[tuple[list[str], int]] = []

    def tree(i: int, segs: list[str]) -> int:
        while i < len(toks):
            tok, off = toks[i]
            if tok == "{":
                i += 1
                while i < len(toks) and toks[i][0] != "}":
                    i = tree(i, list(segs))
                    i += 1 if i < len(toks) and toks[i][0] == "," else 0
                return i + 1
            i += 1
            if tok == "::":
                continue
            segs.append(tok)
            if i < len(toks) and toks[i][0] == "as":
                i += 2
            if tok == "*" or i >= len(toks) or toks[i][0] != "::":
                out.append((segs[:-1] if segs[-1] in ("self", "*") else segs, off))
                return i
        return i

    tree(0, [])
    return out


def rust_references(text: str) -> list[tuple[list[str], int, str, Module]]:
    """(path segments, offset, display text, enclosing inline modules) of every path."""
    text = _PUB_IN.sub(lambda m: _blank(m.group()), text)
    refs = [
        (segs, off, "use " + "::".join(segs))
        for u in _USE.finditer(text)
        for segs, off in expand_use(u.group(1), u.start(1))
        if segs
    ]
    text = _USE.sub(lambda m: _blank(m.group()), text)
    for p in _PATH.finditer(text):
        segs = [p.group(1)] + re.findall(r"\w+", p.group(2))
        refs.append((segs, p.start(), "::".join(segs)))
    mods = [(m.start(), _item_end(text, m.end() - 1), m[1]) for m in _INLINE_MOD.finditer(text)]
    return [
        (segs, off, shown, tuple(name for s, e, name in mods if s <= off < e))
        for segs, off, shown in sorted(refs, key=lambda r: r[1])
    ]


def resolve_rust(segs: list[str], cur: Module, modules: dict[Module, Path]) -> Path | None:
    """File of the longest module prefix of path `segs` seen from module `cur`, if ours."""
    head, i = segs[0].lstrip("$"), 1
    if head not in ("crate", "self", "super"):
        return None
    base: Module = () if head == "crate" else cur if head == "self" else cur[:-1]
    while head == "super" and i < len(segs) and segs[i] == "super":
        base, i = base[:-1], i + 1
    full = base + tuple(segs[i:])
    return next((modules[full[:k]] for k in range(len(full), -1, -1) if full[:k] in modules), None)


def rust_modules(crate: Path) -> dict[Path, tuple[Module, Module]]:
    """Each src/**/*.rs of `crate` -> (target: ("lib",) or ("bin", X), its module path)."""
    src = crate / "src"
    out: dict[Path, tuple[Module, Module]] = {}
    for f in sorted(src.rglob("*.rs")):
        parts = f.relative_to(src).with_suffix("").parts
        if parts[0] == "bin" and len(parts) > 1:
            target, parts = ("bin", parts[1]), parts[2:]
        elif parts == ("main",) and (src / "lib.rs").is_file():
            target, parts = ("bin", "main"), ()
        else:
            target = ("lib",)
        parts = () if parts in (("lib",), ("main",)) else parts
        out[f] = (target, parts[:-1] if parts and parts[-1] == "mod" else parts)
    return out


# A Rust file's place: (crate folder, target, module path), by its path relative to the root.
Places = dict[str, tuple[str, Module, Module]]


def rust_graph(root: Path, graph: Graph, places: Places | None = None) -> int:
    """Add the edges between the Rust files under `root`; return how many files count. Each
    counted file's place goes into `places`."""
    count = 0
    for dirpath, dirnames, filenames in os.walk(root):  # crates: a Cargo.toml beside a src/
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS and not d.startswith("."))
        if "Cargo.toml" not in filenames or not os.path.isdir(os.path.join(dirpath, "src")):
            continue
        files = rust_modules(Path(dirpath))
        texts: dict[Path, str] = {}
        test_only: set[tuple[Module, Module]] = set()
        for f, (target, mod) in files.items():
            text = strip_rust(f.read_text(encoding="utf-8", errors="replace"))
            if _FILE_CFG_TEST.search(text):
                test_only.add((target, mod))
            texts[f], test_mods = strip_cfg_test(text)
            test_only.update((target, mod + (name,)) for name in test_mods)
        by_target: dict[Module, dict[Module, Path]] = {}
        for f, (target, mod) in files.items():
            if not any(t == target and mod[: len(m)] == m for t, m in test_only):
                by_target.setdefault(target, {})[mod] = f
        for target, modules in by_target.items():
            for mod, f in modules.items():
                count += 1
                if places is not None:
                    rel = Path(dirpath).relative_to(root).as_posix()
                    places[f.relative_to(root).as_posix()] = (rel, target, mod)
                newlines = [m.start() for m in re.finditer("\n", texts[f])]
                for segs, off, shown, inner in rust_references(texts[f]):
                    if dst := resolve_rust(segs, mod + inner, modules):
                        line = bisect.bisect_left(newlines, off) + 1
                        add_edge(graph, root, f, dst, line, shown)
    return count


def _py_names(node: ast.AST, package: str) -> list[tuple[str, str, bool]]:
    """(absolute module name, display text, is `from M import name`) for an import node."""
    if isinstance(node, ast.Import):
        return [(a.name, f"import {a.name}", False) for a in node.names]
    if isinstance(node, ast.ImportFrom):
        mod, parts = node.module or "", package.split(".")
        if node.level > len(parts):
            return []
        if node.level:
            mod = ".".join(parts[: len(parts) - node.level + 1] + ([mod] if mod else []))
        dots = "." * node.level + (node.module or "")
        return [(f"{mod}.{a.name}", f"from {dots} import {a.name}", True) for a in node.names]
    if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
        fn, arg = node.func, node.args[0].value
        name = fn.id if isinstance(fn, ast.Name) else getattr(fn, "attr", "")
        if name in ("__import__", "import_module") and isinstance(arg, str) and arg[:1] != ".":
            return [(arg, f"{name}({arg!r})", False)]
    return []


def python_graph(root: Path, graph: Graph) -> int:
    """Add the edges between the files of the Python package; return how many there are."""
    pkg_dir = root / PY_PACKAGE
    modules: dict[str, Path] = {}
    compiled = set(EXTENSION_MODULES)
    for f in sorted(pkg_dir.rglob("*.py*")) if pkg_dir.is_dir() else []:
        parts = f.relative_to(pkg_dir.parent).parts
        if f.suffix == ".py":
            name = parts[:-1] if f.name == "__init__.py" else parts[:-1] + (f.stem,)
            modules[".".join(name)] = f
        elif f.suffix == ".pyi" and not f.with_suffix(".py").exists():
            compiled.add(f.stem)
    for name, f in modules.items():
        package = name if f.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"), filename=str(f))):
            for target, shown, from_import in _py_names(node, package):
                parts = target.split(".")
                if parts[0] != pkg_dir.name or compiled.intersection(parts):
                    continue
                if from_import and target not in modules:
                    parts.pop()  # `from P import name`: an attribute of P's own file
                while parts and ".".join(parts) not in modules:
                    parts.pop()
                if parts:
                    add_edge(graph, root, f, modules[".".join(parts)], node.lineno, shown)
    return len(modules)


def strongly_connected(graph: Graph) -> list[list[str]]:
    """Tarjan's algorithm, iterative; each component sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    work: list[tuple[str, Iterator[str]]] = []
    out: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        work.append((node, iter(sorted(graph.get(node, {})))))

    for start in sorted(graph):
        if start not in index:
            visit(start)
        while work:
            node, successors = work[-1]
            for nxt in successors:
                if nxt not in index:
                    visit(nxt)
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    comp: list[str] = []
                    while not comp or comp[-1] != node:
                        comp.append(stack.pop())
                        on_stack.discard(comp[-1])
                    out.append(sorted(comp))
    return out


def shortest_cycle(graph: Graph, comp: list[str]) -> list[str]:
    """A shortest cycle through the first file of `comp`, staying inside `comp` (BFS)."""
    members, start = set(comp), comp[0]
    prev: dict[str, str] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for nxt in sorted(graph.get(node, {})):
            if nxt == start:
                path = [node]
                while path[-1] != start:
                    path.append(prev[path[-1]])
                return path[::-1] + [start]
            if nxt in members and nxt not in prev:
                prev[nxt] = node
                queue.append(nxt)
    raise AssertionError(f"no cycle through {start}")


def room_graph(graph: Graph, places: Places) -> Graph:
    """The edges between rooms (see the module docs), each with the first file edge that made
    it. A room is named by its folder's path with a trailing `/`, or by its file's path for a
    module without children."""
    rooms: Graph = {}
    parents = {(c, t, m[:k]) for c, t, m in places.values() for k in range(len(m))}

    def name(crate: str, target: Module, mod: Module) -> str:
        prefix = f"{crate}/src" if crate != "." else "src"
        bin_part = f"/bin/{target[1]}" if target[0] == "bin" else ""
        folder = "/".join([prefix + bin_part, *mod])
        return folder + "/" if (crate, target, mod) in parents else folder + ".rs"

    for src, dsts in graph.items():
        for dst, edge in dsts.items():
            if src not in places or dst not in places:
                continue
            (c1, t1, m1), (c2, t2, m2) = places[src], places[dst]
            if (c1, t1) != (c2, t2):
                continue
            k = 0
            while k < min(len(m1), len(m2)) and m1[k] == m2[k]:
                k += 1
            if k in (len(m1), len(m2)):
                continue  # a module and its own descendant
            a, b = name(c1, t1, m1[: k + 1]), name(c2, t2, m2[: k + 1])
            old = rooms.setdefault(a, {}).get(b)
            if old is None or (edge.src, edge.line) < (old.src, old.line):
                rooms[a][b] = edge
    return rooms


def find_cycles(root: Path) -> tuple[Graph, list[tuple[list[str], list[str]]], int, int]:
    """The edges, each component of 2+ files (or rooms) with a cycle through it, and the file
    counts. A cycle between rooms whose every edge joins two files of one file cycle is that
    file cycle seen from afar, and is not listed again."""
    graph: Graph = {}
    places: Places = {}
    n_rust, n_python = rust_graph(root, graph, places), python_graph(root, graph)
    file_comps = sorted(c for c in strongly_connected(graph) if len(c) > 1)
    comp_of = {f: i for i, c in enumerate(file_comps) for f in c}
    cycles = [(c, shortest_cycle(graph, c)) for c in file_comps]
    rooms = room_graph(graph, places)
    for comp in sorted(c for c in strongly_connected(rooms) if len(c) > 1):
        cycle = shortest_cycle(rooms, comp)
        edges = [rooms[a][b] for a, b in zip(cycle, cycle[1:])]
        seen = [comp_of.get(e.src) is not None and comp_of.get(e.src) == comp_of.get(e.dst)
                for e in edges]
        if not all(seen):
            cycles.append((comp, cycle))
    merged: Graph = {k: dict(v) for k, v in graph.items()}
    for k, v in rooms.items():
        merged[k] = {**v, **merged.get(k, {})}
    return merged, cycles, n_rust, n_python


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent)
    graph, cycles, n_rust, n_python = find_cycles(parser.parse_args(argv).root.resolve())
    counts = f"{n_rust} Rust files, {n_python} Python files"
    if not cycles:
        print(f"no import cycles between files ({counts})")
        return 0
    for comp, cycle in cycles:
        print("import cycle: " + " -> ".join(cycle))
        for src, dst in zip(cycle, cycle[1:]):
            e = graph[src][dst]
            via = f" ({e.src})" if e.src != src else ""
            print(f"    {src}:{e.line}: {e.text}{via}")
        if len(comp) > len(cycle) - 1:
            kind = "folders and files" if any(c.endswith("/") for c in comp) else "files"
            print(f"    (one strongly connected set of {len(comp)} {kind}: {', '.join(comp)})")
    print(f"{len(cycles)} import cycle(s) between files ({counts})")
    return 1


if __name__ == "__main__":
    sys.exit(main())
