#!/usr/bin/env python3
"""Import cycles among the files of each Rust crate, of the Python package and of the Node.js
package.

    scripts/import_cycles.py [--quiet] [--strict] [ROOT]

Prints, per crate (each workspace member's src/: the library, the binary and src/bin/*) and
for the Python package (python/src/redis_ratelimit_client), every import cycle: a strongly
connected component of two or more files in the graph "file A names a module of file B".
Exits 1 when there is any cycle, so `make lint` (which runs it with --strict) fails on a
new one.

How an edge is found (Python 3 standard library only, no build needed):
- Rust: the module tree is followed from each crate root through its `mod name;`
  declarations (and `#[path]`). In every file, each path that starts with `crate::`,
  `super::`, `self::` or the name of a child module - in `use` trees (braces expanded) and in
  the code - is walked segment by segment through the module tree; the edge goes to the file
  of the deepest module the path names. An item reached through a re-export counts as an
  import of the re-exporting module (`crate::limiter::BuildError` is an edge to
  limiter/mod.rs even if the type is defined in limiter/error.rs): that is what the file
  depends on. `mod child;` alone is no edge. Comments and string literals are skipped.
  A file's use of its own ancestors' items (`super::Store` in a store backend) is left out
  unless --strict: with it, a child naming what its parent declares or re-exports while the
  parent names the child is a cycle too, so the parent only re-exports its parts and its
  parts import each other, never the parent.
  Left out: `#[cfg(test)]` modules and items (unit tests may reach anywhere), tests/,
  examples/ and benches/, and macros' bodies' `$crate::` paths.
- Python: the imports a module runs when it is imported (statements at module level,
  also inside module-level `if`/`try`/`with`), relative and absolute within the package;
  `from . import x` is an edge to the submodule x when there is one. Imports inside
  functions (deferred) and under `if TYPE_CHECKING:` (never run) are left out. Importing
  a.b runs a/__init__.py first; that implicit edge to a package's __init__ is left out,
  as import-cycle checkers usually do, unless the import names the package itself.
- Node.js (node/lib): the relative `require('./x')` and `import ... from './x.js'` a file runs
  when it is loaded: those of its top-level statements (a line that starts at column 0, as
  the package is formatted); a `require` inside a function (deferred, indented) is left out.
"""

from __future__ import annotations

import ast
import os
import re
import sys
from pathlib import Path

IDENT = r"[A-Za-z_][A-Za-z0-9_]*"


def strip_rust(text: str) -> str:
    """The text with comments and string/char literals blanked (newlines kept)."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif (
            c == "r"
            and re.match(r'r#*"', text[i:])
            and not re.match(r"[A-Za-z0-9_]", text[i - 1 : i] or " ")
        ):
            m = re.match(r'r(#*)"', text[i:])
            assert m
            end = '"' + m.group(1)
            j = text.find(end, i + len(m.group(0)))
            j = n if j < 0 else j + len(end)
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            j += 1
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == "'":
            m = re.match(r"'(\\.[^']*|[^\\'])'", text[i:])
            if m:
                out.append(" " * len(m.group(0)))
                i += len(m.group(0))
            else:
                out.append(c)
                i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def matching_brace(text: str, open_at: int) -> int:
    depth = 0
    for j in range(open_at, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return j
    return len(text) - 1


CFG_TEST = re.compile(r"#\s*\[\s*cfg\s*\(\s*test\s*\)\s*\]")


def drop_test_items(text: str) -> str:
    """Blanks `#[cfg(test)]` items: a module block, a `mod x;`, a `use ...;`, a function."""
    while True:
        m = CFG_TEST.search(text)
        if not m:
            return text
        j = m.end()
        # the item ends at the first `;` or at the brace matching the first `{`
        semi = text.find(";", j)
        brace = text.find("{", j)
        if brace >= 0 and (semi < 0 or brace < semi):
            end = matching_brace(text, brace) + 1
        else:
            end = (semi if semi >= 0 else len(text) - 1) + 1
        text = (
            text[: m.start()]
            + re.sub(r"[^\n]", " ", text[m.start() : end])
            + text[end:]
        )


def expand_use_tree(tree: str) -> list[list[str]]:
    """`a::{b, c::{d, e}}` -> [[a, b], [a, c, d], [a, c, e]] (aliases and globs dropped)."""
    tree = re.sub(r"\s+as\s+" + IDENT, "", tree)
    tree = re.sub(r"\s+", "", tree)
    paths: list[list[str]] = []

    def walk(prefix: list[str], s: str) -> None:
        # split s at top-level commas
        parts, depth, cur = [], 0, ""
        for ch in s:
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
            if ch == "," and depth == 0:
                parts.append(cur)
                cur = ""
            else:
                cur += ch
        if cur:
            parts.append(cur)
        for part in parts:
            k = part.find("{")
            if k >= 0:
                head = [x for x in part[:k].split("::") if x]
                walk(prefix + head, part[k + 1 : part.rfind("}")])
            else:
                segs = [x for x in part.split("::") if x and x != "*"]
                paths.append(prefix + segs)

    walk([], tree)
    return paths


class Module:
    def __init__(self, path: tuple[str, ...], file: Path, parent: Module | None):
        self.path = path
        self.file = file
        self.parent = parent
        self.children: dict[str, Module] = {}
        self.text = ""


MOD_DECL = re.compile(
    r"((?:#\s*\[[^\]]*\]\s*)*)(?:pub(?:\s*\([^)]*\))?\s+)?mod\s+(" + IDENT + r")\s*;"
)


def load_tree(root_file: Path) -> list[Module]:
    root = Module((), root_file, None)
    modules = [root]
    stack = [root]
    while stack:
        m = stack.pop()
        m.text = drop_test_items(strip_rust(m.file.read_text()))
        raw = m.file.read_text()
        is_dir_owner = m.parent is None or m.file.name == "mod.rs"
        base = m.file.parent if is_dir_owner else m.file.parent / m.file.stem
        for d in MOD_DECL.finditer(m.text):
            name = d.group(2)
            attrs = raw[d.start() : d.end()]
            pm = re.search(r'#\s*\[\s*path\s*=\s*"([^"]+)"', attrs)
            if pm:
                f = (m.file.parent / pm.group(1)).resolve()
            else:
                f = base / f"{name}.rs"
                if not f.exists():
                    f = base / name / "mod.rs"
            if not f.exists():
                continue
            child = Module(m.path + (name,), f, m)
            m.children[name] = child
            modules.append(child)
            stack.append(child)
    return modules


USE_STMT = re.compile(r"\buse\s+([^;]*);")
CODE_PATH = re.compile(
    r"(?<![A-Za-z0-9_:$])(" + IDENT + r"(?:\s*::\s*" + IDENT + r")+)"
)


def rust_edges(modules: list[Module], strict: bool) -> dict[Path, set[Path]]:
    root = modules[0]
    edges: dict[Path, set[Path]] = {m.file: set() for m in modules}

    def resolve(m: Module, segs: list[str]) -> Module | None:
        if not segs:
            return None
        cur: Module | None
        first = segs[0]
        if first == "crate":
            cur, rest = root, segs[1:]
        elif first in ("super", "self") or first in m.children:
            cur, rest = m, segs
        else:
            return None
        for s in rest:
            if cur is None:
                return None
            if s == "super":
                cur = cur.parent
            elif s == "self":
                continue
            elif s in cur.children:
                cur = cur.children[s]
            else:
                break
        return cur

    for m in modules:
        paths: list[list[str]] = []
        text = m.text
        for u in USE_STMT.finditer(text):
            paths.extend(expand_use_tree(u.group(1)))
        code = USE_STMT.sub(lambda x: " " * len(x.group(0)), text)
        for p in CODE_PATH.finditer(code):
            paths.append(re.sub(r"\s+", "", p.group(1)).split("::"))
        for segs in paths:
            target = resolve(m, segs)
            if target is None or target.file == m.file:
                continue
            if not strict and m.path[: len(target.path)] == target.path:
                continue  # an ancestor: a module's files use the module's own items
            edges[m.file].add(target.file)
    return edges


def python_edges(pkg_dir: Path) -> dict[Path, set[Path]]:
    pkg_name = pkg_dir.name
    files = sorted(pkg_dir.rglob("*.py"))
    by_name: dict[str, Path] = {}
    for f in files:
        rel = f.relative_to(pkg_dir.parent).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        by_name[".".join(parts)] = f
    edges: dict[Path, set[Path]] = {f: set() for f in files}

    def module_level(body: list[ast.stmt]) -> list[ast.Import | ast.ImportFrom]:
        out: list[ast.Import | ast.ImportFrom] = []
        for s in body:
            if isinstance(s, (ast.Import, ast.ImportFrom)):
                out.append(s)
            elif isinstance(s, ast.If):
                t = s.test
                name = (
                    t.id
                    if isinstance(t, ast.Name)
                    else t.attr
                    if isinstance(t, ast.Attribute)
                    else ""
                )
                if name != "TYPE_CHECKING":
                    out.extend(module_level(s.body))
                out.extend(module_level(s.orelse))
            elif isinstance(s, ast.Try):
                for b in [s.body, s.orelse, s.finalbody] + [h.body for h in s.handlers]:
                    out.extend(module_level(b))
            elif isinstance(s, ast.With):
                out.extend(module_level(s.body))
        return out

    for f in files:
        me = next(k for k, v in by_name.items() if v == f)
        package = me if f.name == "__init__.py" else me.rpartition(".")[0]
        tree = ast.parse(f.read_text(), str(f))
        for s in module_level(tree.body):
            targets: list[str] = []
            if isinstance(s, ast.Import):
                targets = [a.name for a in s.names]
            else:
                if s.level:
                    base_parts = package.split(".")
                    base_parts = base_parts[: len(base_parts) - (s.level - 1)]
                    base = ".".join(base_parts + ([s.module] if s.module else []))
                else:
                    base = s.module or ""
                for a in s.names:
                    sub = f"{base}.{a.name}"
                    targets.append(sub if sub in by_name else base)
            for t in targets:
                if not (t == pkg_name or t.startswith(pkg_name + ".")):
                    continue
                # the deepest module of the package the name reaches
                while t and t not in by_name:
                    t = t.rpartition(".")[0]
                if t and by_name[t] != f:
                    edges[f].add(by_name[t])
    return edges


def node_edges(lib_dir: Path) -> dict[Path, set[Path]]:
    files = sorted(list(lib_dir.rglob("*.js")) + list(lib_dir.rglob("*.mjs")))
    edges: dict[Path, set[Path]] = {f: set() for f in files}
    pattern = re.compile(r"""(?:require\(|from\s+)['"](\.{1,2}/[^'"]+)['"]""")
    for f in files:
        for line in f.read_text().splitlines():
            if not line or line[0] in " \t/*":
                continue
            for target in pattern.findall(line):
                base = (f.parent / target).resolve()
                for candidate in (base, base.with_name(base.name + ".js"), base / "index.js"):
                    if candidate.is_file() and candidate in edges and candidate != f:
                        edges[f].add(candidate)
                        break
    return edges


def cycles(edges: dict[Path, set[Path]]) -> list[list[Path]]:
    """Strongly connected components of two or more nodes (Tarjan, iterative)."""
    index: dict[Path, int] = {}
    low: dict[Path, int] = {}
    on: set[Path] = set()
    stack: list[Path] = []
    out: list[list[Path]] = []
    counter = 0
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on.add(start)
        while work:
            v, it = work[-1]
            nxt = next(it, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on.add(nxt)
                    work.append((nxt, iter(sorted(edges.get(nxt, ())))))
                elif nxt in on:
                    low[v] = min(low[v], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
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
    return out


def crate_roots(crate: Path) -> list[Path]:
    src = crate / "src"
    roots = [src / "lib.rs", src / "main.rs"]
    bins = src / "bin"
    if bins.is_dir():
        roots += sorted(bins.glob("*.rs")) + sorted(bins.glob("*/main.rs"))
    return [r for r in roots if r.exists()]


def workspace_members(root: Path) -> list[Path]:
    text = (root / "Cargo.toml").read_text()
    m = re.search(r"members\s*=\s*\[([^\]]*)\]", text)
    names = re.findall(r'"([^"]+)"', m.group(1)) if m else ["."]
    return [(root / n).resolve() for n in names]


def main() -> int:
    args = [a for a in sys.argv[1:] if not a.startswith("-")]
    quiet = "--quiet" in sys.argv
    strict = "--strict" in sys.argv
    root = Path(args[0] if args else Path(__file__).resolve().parent.parent).resolve()
    total = 0
    report: list[str] = []

    def show(name: str, edges: dict[Path, set[Path]], base: Path) -> None:
        nonlocal total
        found = cycles(edges)
        total += len(found)
        n_edges = sum(len(v) for v in edges.values())
        report.append(
            f"{name}: {len(edges)} files, {n_edges} imports, {len(found)} cycle(s)"
        )
        for comp in found:
            comp_set = set(comp)
            report.append(f"  cycle of {len(comp)} files:")
            for f in comp:
                into = sorted(
                    os.path.relpath(t, base) for t in edges[f] if t in comp_set
                )
                report.append(f"    {os.path.relpath(f, base)} -> {', '.join(into)}")

    for crate in workspace_members(root):
        for r in crate_roots(crate):
            modules = load_tree(r)
            label = os.path.relpath(r, root)
            show(label, rust_edges(modules, strict), root)
    pkg = root / "python" / "src" / "redis_ratelimit_client"
    if pkg.is_dir():
        show(os.path.relpath(pkg, root) + " (Python)", python_edges(pkg), root)
    lib = root / "node" / "lib"
    if lib.is_dir():
        show(os.path.relpath(lib, root) + " (Node.js)", node_edges(lib), root)
    for line in report:
        if not quiet or not line.endswith(" 0 cycle(s)"):
            print(line)
    print(f"import cycles: {total}")
    return 1 if total else 0


if __name__ == "__main__":
    sys.exit(main())
