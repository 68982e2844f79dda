"""MkDocs hook: the table of the page's caches, read from the code at build time.

``docs/how-it-works.md`` holds the marker below; this hook replaces it with one row per cache
of the page: every function of ``hookviz/app/`` (and ``app.py``) decorated with
``st.cache_resource`` or ``st.cache_data``, with its bound (``max_entries``, ``ttl``), and every
``Kept`` store built in ``hookviz/app/`` with its bound by count and size. The source is read with
``ast``, never imported (importing the page would import Streamlit and torch), so the table follows
the caches wherever they move and cannot state a bound the code does not have.
"""

from __future__ import annotations

import ast
import operator
from dataclasses import dataclass
from pathlib import Path

MARKER = "<!-- page-caches -->"
PAGE = "how-it-works.md"
ROOT = Path(__file__).resolve().parents[2]
DECORATORS = {
    "cache_resource": "one object, shared (`cache_resource`)",
    "cache_data": "a copy per call (`cache_data`)",
}
_ARITHMETIC = {ast.Mult: operator.mul, ast.Pow: operator.pow, ast.Add: operator.add}


@dataclass(frozen=True)
class Cache:
    """One cache of the page, as the source declares it."""

    module: str  # dotted, e.g. "hookviz.app.cached"
    name: str  # the cached function, or the function that builds a ``Kept`` store
    kind: str  # how it is kept: one of ``DECORATORS``' values, or "store (`Kept`)"
    bound: str  # e.g. "4", "8 and 1200 MiB", "1 (no arguments)"
    summary: str  # the first sentence of the function's docstring, or ""


def page_sources() -> list[Path]:
    """The page's Python files: ``app.py`` and everything under ``hookviz/app/``."""
    return [ROOT / "app.py", *sorted((ROOT / "hookviz" / "app").rglob("*.py"))]


def page_caches() -> list[Cache]:
    """Every cache of the page, in file order."""
    found: list[Cache] = []
    for path in page_sources():
        if not path.is_file():
            continue
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef):
                found += _decorated(module, node)
                found += _stores(module, node)
    return found


def _decorated(module: str, function: ast.FunctionDef) -> list[Cache]:
    caches = []
    for decorator in function.decorator_list:
        call = decorator if isinstance(decorator, ast.Call) else None
        target = call.func if call else decorator
        if not (isinstance(target, ast.Attribute) and target.attr in DECORATORS):
            continue
        options = {kw.arg: _number(kw.value) for kw in (call.keywords if call else [])}
        if options.get("max_entries") is not None:
            bound = f"{options['max_entries']:g}"
        elif not function.args.args:
            bound = "1 (no arguments)"
        else:
            bound = "unbounded"
        if options.get("ttl") is not None:
            bound += f", for {options['ttl']:g} s"
        caches.append(
            Cache(module, function.name, DECORATORS[target.attr], bound, _summary(function))
        )
    return caches


def _stores(module: str, function: ast.FunctionDef) -> list[Cache]:
    """The ``Kept(...)`` stores a function builds (``Kept(entries, total)``)."""
    caches = []
    for node in ast.walk(function):
        if not isinstance(node, ast.Call):
            continue
        callee = node.func.attr if isinstance(node.func, ast.Attribute) else None
        callee = node.func.id if isinstance(node.func, ast.Name) else callee
        if callee != "Kept":
            continue
        values = [_number(arg) for arg in node.args]
        values += [_number(kw.value) for kw in node.keywords if kw.arg in ("entries", "total")]
        entries = values[0]
        bound = f"{entries:g}"
        if len(values) > 1 and values[1] is not None:
            bound += f" and {values[1] / 2**20:g} MiB"
        caches.append(Cache(module, function.name, "store (`Kept`)", bound, _summary(function)))
    return caches


def _number(node: ast.expr) -> float | None:
    """A numeric literal or product of literals (``1200 * 2**20``); None for anything else."""
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _ARITHMETIC:
        left, right = _number(node.left), _number(node.right)
        if left is not None and right is not None:
            return _ARITHMETIC[type(node.op)](left, right)
    return None


def _summary(function: ast.FunctionDef) -> str:
    doc = ast.get_docstring(function) or ""
    sentence = " ".join(doc.split()).split(". ")[0].rstrip(".")
    return sentence.replace("|", "\\|")


def table() -> str:
    """The caches as a Markdown table."""
    rows = [
        "| module | cache | kept as | bound (entries) | what it keeps |",
        "| --- | --- | --- | --- | --- |",
    ]
    for cache in page_caches():
        rows.append(
            f"| `{cache.module}` | `{cache.name}` | {cache.kind} | {cache.bound} "
            f"| {cache.summary} |"
        )
    return "\n".join(rows)


def on_page_markdown(markdown: str, page, config, files) -> str:
    if page.file.src_uri != PAGE:
        return markdown
    if MARKER not in markdown:
        raise ValueError(f"{PAGE} lost its marker {MARKER!r}: put it where the cache table goes")
    return markdown.replace(MARKER, table())
