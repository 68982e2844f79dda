"""MkDocs hook: which test guards which module, read from the tests at build time.

``docs/contributing.md`` holds the marker below; this hook replaces it with a table: each module
of ``hookviz/``, ``hookviz/app/`` and ``app.py`` with the test files that import it (``import``, or
``from ... import``, anywhere in the file) or name its file in their docstring, and the tests that
drive the whole page (headless with ``AppTest``, or in Chromium). The tests are read with
``ast``, never imported, so the table follows the modules as they are split or renamed.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

MARKER = "<!-- tests-by-module -->"
PAGE = "contributing.md"
ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("hookviz",)
WHOLE_PAGE_HEADLESS = "`app.py`, headless (Streamlit's `AppTest`)"
WHOLE_PAGE_BROWSER = "`app.py`, in a real browser (Chromium)"


def modules() -> dict[str, Path]:
    """Every module of the library and the page, dotted name -> file."""
    found = {"app": ROOT / "app.py"} if (ROOT / "app.py").is_file() else {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            dotted = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            found[dotted.removesuffix(".__init__")] = path
    return found


def test_files() -> list[Path]:
    return sorted((ROOT / "tests").glob("test_*.py"))


def guards() -> dict[str, list[str]]:
    """Module (or one of the whole-page rows) -> the test files that guard it, in order."""
    known = modules()
    guarded: dict[str, set[str]] = defaultdict(set)
    for path in test_files():
        source = path.read_text(encoding="utf-8")
        tree = ast.parse(source)
        name = path.name
        for module in _imported(tree, known):
            guarded[module].add(name)
        doc = ast.get_docstring(tree) or ""
        for module, file in known.items():
            if file.relative_to(ROOT).as_posix() in doc or f"``{module}``" in doc:
                guarded[module].add(name)
        if path.name.startswith("test_browser_"):
            guarded[WHOLE_PAGE_BROWSER].add(name)
        elif "AppTest" in source or _uses_the_app_runs(tree):
            guarded[WHOLE_PAGE_HEADLESS].add(name)
    return {module: sorted(names) for module, names in guarded.items()}


def _uses_the_app_runs(tree: ast.AST) -> bool:
    """Whether a test drives the app through ``tests/test_app.py``'s helpers (``_run``)."""
    return any(
        isinstance(node, ast.ImportFrom) and (node.module or "").endswith("test_app")
        for node in ast.walk(tree)
    )


def _imported(tree: ast.AST, known: dict[str, Path]) -> set[str]:
    """The known modules a test imports: ``from a.b import c`` is ``a.b.c`` where that is a
    module, else ``a.b``."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name in known}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                dotted = f"{node.module}.{alias.name}"
                if dotted in known:
                    found.add(dotted)
                elif node.module in known:
                    found.add(node.module)
    return found


def table() -> str:
    """The guards as a Markdown table: the whole page first, then every module by name."""
    guarded = guards()
    rows = ["| module | guarded by |", "| --- | --- |"]
    order = [WHOLE_PAGE_HEADLESS, WHOLE_PAGE_BROWSER]
    order += sorted(name for name in guarded if name not in order)
    for module in order:
        if module not in guarded:
            continue
        label = module if module.startswith("`") else f"`{module}`"
        label = "`app.py` (imported)" if module == "app" else label
        tests = ", ".join(f"`{name}`" for name in guarded[module])
        rows.append(f"| {label} | {tests} |")
    # (a package's __init__ is its modules' door: not listed as unguarded)
    unguarded = sorted(
        name for name, file in modules().items() if name not in guarded and file.stem != "__init__"
    )
    text = "\n".join(rows)
    if unguarded:
        names = ", ".join(f"`{name}`" for name in unguarded)
        text += (
            "\n\nNo test imports or names these modules directly (they are exercised through "
            f"the modules that use them, or through `import hookviz`): {names}."
        )
    return text


def on_page_markdown(markdown: str, page, config, files) -> str:
    if page.file.src_uri != PAGE:
        return markdown
    if MARKER not in markdown:
        raise ValueError(f"{PAGE} lost its marker {MARKER!r}: put it where the test table goes")
    return markdown.replace(MARKER, table())
