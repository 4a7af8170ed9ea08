#!/usr/bin/env python3
"""Builds the docs book and checks what mdBook does not (``make docs`` runs it).

1. ``mdbook build``, every warning an error: mdBook exits 0 after an ``{{#include}}`` it
   could not read or an unclosed HTML tag, and only says so on stderr.
2. Every page of ``docs/`` is in ``docs/SUMMARY.md`` (mdBook builds only those: a page left
   out is published nowhere).
3. Every link and image of the built book that stays in it leads to a file the book has,
   and every ``#anchor`` to an id on that page; a relative link that leaves the book (to a
   file of the repository) is refused: write the path as code, or link the page of the
   book that explains it.
4. The front pages (``README.md``, ``client/README.md``, ``python/README.md``,
   ``node/README.md``): every relative link leads to a file of the repository, and every
   anchor to a heading of it (the book's ids for its pages, GitHub's for the others).
5. Every ``python`` code block of the book and the front pages compiles.

The command pages' ``redis-cli`` sessions are replayed by ``tests/docs`` (a cargo test),
their generated blocks checked by ``make lint`` (wire/examples/generate.rs), and the Rust
snippets run as the client crate's doctests.

Usage: scripts/check_docs.py [--mdbook PATH]  (from anywhere; exits 1 naming each failure)
"""

from __future__ import annotations

import argparse
import ast
import html.parser
import re
import subprocess
import sys
import time
import unicodedata
from pathlib import Path
from urllib.parse import unquote, urlsplit

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "docs"
BUILT = ROOT / "target" / "book"
FRONT_PAGES = ["README.md", "client/README.md", "python/README.md", "node/README.md"]
# mdBook's own pages, made from the others: their links are the pages' links again.
GENERATED_PAGES = {"print.html", "toc.html", "404.html"}
LINK = re.compile(r"(?<!\\)!?\[(?:[^\]\\]|\\.)*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


class Page(html.parser.HTMLParser):
    """The ids and the outgoing links of one built page."""

    def __init__(self) -> None:
        super().__init__()
        self.ids: set[str] = set()
        self.links: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if values.get("id"):
            self.ids.add(values["id"] or "")
        target = values.get("href") if tag == "a" else values.get("src") if tag == "img" else None
        if target:
            self.links.append(target)


def parse(path: Path) -> Page:
    page = Page()
    page.feed(path.read_text(encoding="utf-8"))
    return page


def build(mdbook: str, failures: list[str]) -> None:
    """Check 1."""
    run = subprocess.run([mdbook, "build", str(ROOT)], capture_output=True, text=True, check=False)
    for line in (run.stdout + run.stderr).splitlines():
        if re.search(r"\b(WARN|ERROR)\b", line):
            failures.append(f"mdbook build: {line.strip()}")
    if run.returncode != 0:
        failures.append(f"mdbook build exited {run.returncode}:\n{run.stderr}")


def summary(failures: list[str]) -> None:
    """Check 2."""
    listed = set(re.findall(r"\]\(([^)]+\.md)\)", (SOURCE / "SUMMARY.md").read_text(encoding="utf-8")))
    for page in sorted(SOURCE.rglob("*.md")):
        relative = page.relative_to(SOURCE).as_posix()
        if relative != "SUMMARY.md" and relative not in listed:
            failures.append(f"docs/{relative}: not in docs/SUMMARY.md, so not in the book")


def book_links(failures: list[str]) -> int:
    """Check 3. Returns the number of links checked."""
    pages = {path: parse(path) for path in BUILT.rglob("*.html")}
    checked = 0
    for path, page in sorted(pages.items()):
        relative = path.relative_to(BUILT)
        if relative.as_posix() in GENERATED_PAGES:
            continue
        source = f"docs/{relative.with_suffix('.md').as_posix()}"
        for link in page.links:
            parts = urlsplit(link)
            if parts.scheme or link.startswith("//"):
                continue
            checked += 1
            target = path if not parts.path else (path.parent / unquote(parts.path)).resolve()
            if BUILT.resolve() not in target.parents and target != BUILT.resolve():
                failures.append(
                    f"{source}: links {link}, outside the book: write the path as code, or link "
                    "the book's page that explains it"
                )
                continue
            if target.is_dir():
                target = target / "index.html"
            if not target.exists():
                failures.append(f"{source}: links {link}, which the book does not have")
                continue
            if parts.fragment and target.suffix == ".html":
                ids = pages[target].ids if target in pages else parse(target).ids
                if unquote(parts.fragment) not in ids:
                    failures.append(f"{source}: links {link}: no #{parts.fragment} on that page")
    return checked


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lowercase, punctuation dropped, spaces to ``-``."""
    text = re.sub(r"`|\*\*|\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip()).lower()
    kept = "".join(
        c for c in text if c in " -_" or unicodedata.category(c)[0] in "LN"
    )
    return kept.replace(" ", "-")


def markdown_anchors(path: Path) -> set[str]:
    anchors: set[str] = set()
    fence = False
    seen: dict[str, int] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.lstrip().startswith("```"):
            fence = not fence
        elif not fence and (match := re.match(r"#{1,6}\s+(.*)", line)):
            slug = github_slug(match.group(1))
            count = seen.get(slug, 0)
            seen[slug] = count + 1
            anchors.add(slug if count == 0 else f"{slug}-{count}")
    return anchors


def front_pages(failures: list[str]) -> int:
    """Check 4. Returns the number of links checked."""
    checked = 0
    for name in FRONT_PAGES:
        page = ROOT / name
        if not page.exists():
            continue
        fence = False
        for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
            if line.lstrip().startswith("```"):
                fence = not fence
            if fence:
                continue
            for link in LINK.findall(re.sub(r"`[^`]*`", "", line)):
                parts = urlsplit(link)
                if parts.scheme or link.startswith("//"):
                    continue
                checked += 1
                target = page if not parts.path else (page.parent / unquote(parts.path)).resolve()
                where = f"{name}:{number}"
                if not target.exists():
                    failures.append(f"{where}: links {link}, which does not exist")
                    continue
                if not parts.fragment or target.suffix != ".md":
                    continue
                if SOURCE.resolve() in target.parents:
                    built = BUILT / target.relative_to(SOURCE.resolve()).with_suffix(".html")
                    anchors = parse(built).ids if built.exists() else set()
                else:
                    anchors = markdown_anchors(target)
                if parts.fragment not in anchors:
                    failures.append(f"{where}: links {link}: no heading #{parts.fragment} there")
    return checked


def python_blocks(failures: list[str]) -> int:
    """Check 5. Returns the number of blocks compiled."""
    pages = sorted(SOURCE.rglob("*.md")) + [ROOT / name for name in FRONT_PAGES]
    compiled = 0
    for page in pages:
        if not page.exists():
            continue
        lines = page.read_text(encoding="utf-8").splitlines()
        block: list[str] | None = None
        start = 0
        for number, line in enumerate(lines, 1):
            stripped = line.strip()
            if block is None and re.fullmatch(r"```python\b[^`]*", stripped):
                block, start = [], number
            elif block is not None and stripped == "```":
                compiled += 1
                name = f"{page.relative_to(ROOT)}:{start}"
                try:
                    compile("\n".join(block), name, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
                except SyntaxError as error:
                    failures.append(f"{name}: the python block does not compile: {error}")
                block = None
            elif block is not None:
                block.append(line)
    return compiled


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mdbook", default="mdbook", help="the mdbook program")
    args = parser.parse_args()
    started = time.monotonic()
    failures: list[str] = []
    build(args.mdbook, failures)
    summary(failures)
    links = book_links(failures) if BUILT.exists() else 0
    front = front_pages(failures)
    blocks = python_blocks(failures)
    pages = len(list(SOURCE.rglob("*.md"))) - 1
    for failure in failures:
        print(f"docs: {failure}", file=sys.stderr)
    print(
        f"docs: {pages} pages built into {BUILT.relative_to(ROOT)}, {links} links in the book and "
        f"{front} in the front pages checked, {blocks} python blocks compiled, "
        f"{len(failures)} failure(s), {time.monotonic() - started:.1f} s"
    )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
