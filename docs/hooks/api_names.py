"""MkDocs hook: the API reference covers every public name of ``hookviz``.

``docs/reference/api.md`` lists the names of ``hookviz.__all__`` by topic, one
``::: hookviz.NAME`` block each. A name added to ``__all__`` and not yet placed in a topic is
appended under "More names" (so the reference is never missing one) and the build says so; a
name listed there that ``hookviz`` no longer exports (and that is not one of its modules, such
as ``hookviz.render``) fails the build.
"""

from __future__ import annotations

import ast
import logging
import re
from pathlib import Path

PAGE = "reference/api.md"
PACKAGE = Path(__file__).resolve().parents[2] / "hookviz"
BLOCK = re.compile(r"^::: hookviz\.(\w+)\s*$", re.MULTILINE)
log = logging.getLogger("mkdocs.hooks.api_names")


def exported_names() -> list[str]:
    """``hookviz.__all__``, read from the source (importing hookviz would import torch)."""
    tree = ast.parse((PACKAGE / "__init__.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(target, ast.Name) and target.id == "__all__" for target in node.targets
        ):
            return list(ast.literal_eval(node.value))
    raise ValueError(f"no __all__ in {PACKAGE / '__init__.py'}")


def on_page_markdown(markdown: str, page, config, files) -> str:
    if page.file.src_uri != PAGE:
        return markdown
    public = exported_names()
    listed = BLOCK.findall(markdown)
    modules = {path.stem for path in PACKAGE.glob("*.py")} | {
        path.parent.name for path in PACKAGE.glob("*/__init__.py")
    }
    gone = [name for name in listed if name not in public and name not in modules]
    if gone:
        raise ValueError(
            f"{PAGE} documents {', '.join(gone)}, which hookviz no longer exports "
            "(hookviz.__all__): remove or rename the block"
        )
    missing = [name for name in public if name not in listed]
    if not missing:
        return markdown
    log.info("%s: not yet placed in a topic, listed under 'More names': %s", PAGE, missing)
    more = "\n\n".join(f"::: hookviz.{name}" for name in missing)
    return f"{markdown.rstrip()}\n\n## More names\n\n{more}\n"
