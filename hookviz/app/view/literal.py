"""What a user gave (a file name, a class name from their file, a label they typed) shown in
markdown as the text it is: Streamlit renders markdown (links, emphasis, ``$`` as LaTeX, raw
HTML where allowed) in captions, alerts and a radio's options, so such text is escaped wherever
the page writes it into markdown, never trusted to be plain."""

from __future__ import annotations

import re

# The marks that make markdown, HTML or Streamlit's LaTeX ("$") of plain text anywhere in a line,
# each escaped with a backslash (CommonMark allows one before any ASCII punctuation). A link
# needs "[", an image "![": with those escaped, "(", ")" and "!" change nothing, nor do commas,
# dots or quotes, which stay as they are (a file name reads the same in the page's source).
_MARKS = re.compile(r"([\\`*_{}\[\]<>|~$&])")
# ...and those that make a block only at the start of a line: a heading, a list, a rule
_LEADING = re.compile(r"^(\s*)(#|[-+=]|\d+(?=[.)]))")


def literal(text: object) -> str:
    """``text`` as markdown that shows it literally: control characters (a line break that
    would start a block) as spaces, every mark of markdown, HTML or LaTeX backslash-escaped."""
    flat = "".join(" " if not char.isprintable() else char for char in str(text))
    escaped = _MARKS.sub(r"\\\1", flat)
    # (a leading "1." is escaped on its dot: "1\." is no list)
    return _LEADING.sub(_escape_leading, escaped, count=1)


def _escape_leading(found: re.Match) -> str:
    space, mark = found.group(1), found.group(2)
    if mark[0].isdigit():
        return space + mark + "\\"  # (before the "." or ")" that follows)
    return space + "\\" + mark
