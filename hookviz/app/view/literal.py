"""What a user gave (a file name, a class name from their file, a label they typed) shown in
markdown as the text it is: Streamlit renders markdown (links, emphasis, ``$`` as LaTeX, raw
HTML where allowed) in captions, alerts and a radio's options, so such text is escaped wherever
the page writes it into markdown, never trusted to be plain."""

from __future__ import annotations

import re

# The marks that make markdown, HTML or Streamlit's LaTeX ("$") of plain text, each escaped with
# a backslash (CommonMark allows one before any ASCII punctuation). Commas, quotes, colons and
# the like change nothing, and stay as they are: a class name reads the same in the page's
# source and on screen.
_MARKS = re.compile(r"([\\`*_{}\[\]<>()#+\-.!|~$&])")


def literal(text: object) -> str:
    """``text`` as markdown that shows it literally: control characters (a line break that
    would start a block) as spaces, every mark of markdown, HTML or LaTeX backslash-escaped."""
    flat = "".join(" " if not char.isprintable() else char for char in str(text))
    return _MARKS.sub(r"\\\1", flat)
