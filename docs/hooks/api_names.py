"""MkDocs hook: the API reference covers every public name of ``hookviz``.

``docs/reference/api.md`` lists the names of ``hookviz.__all__`` by topic, one
``::: hookviz.NAME`` block each. A name added to ``__all__`` and not yet placed in a topic is
appended under "More names" (so the reference is never missing one) and the build says so; a
name listed there that ``hookviz`` no longer exports fails the build.
"""

from __future__ import annotations

import logging
import re

PAGE = "reference/api.md"
BLOCK = re.compile(r"^::: hookviz\.(\w+)\s*$", re.MULTILINE)
log = logging.getLogger("mkdocs.hooks.api_names")


def on_page_markdown(markdown: str, page, config, files) -> str:
    if page.file.src_uri != PAGE:
        return markdown
    import hookviz

    public = list(hookviz.__all__)
    listed = BLOCK.findall(markdown)
    gone = [name for name in listed if name not in public]
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
