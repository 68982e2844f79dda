"""MkDocs hook: the command-line reference, written from the real argparse parser at build time.

``docs/reference/cli.md`` holds the marker below; this hook replaces it with the ``--help``
text of ``hookviz`` and of each of its commands, and a table of every option (its default and
choices read from the parser), so the page cannot drift from the code.
"""

from __future__ import annotations

import argparse
import os
from contextlib import contextmanager

MARKER = "<!-- cli-reference -->"
PAGE = "reference/cli.md"
WIDTH = "80"  # columns of the help text: what a page's code block shows without scrolling


def on_page_markdown(markdown: str, page, config, files) -> str:
    if page.file.src_uri != PAGE:
        return markdown
    if MARKER not in markdown:
        raise ValueError(f"{PAGE} lost its marker {MARKER!r}: put it where the reference goes")
    return markdown.replace(MARKER, reference())


def reference() -> str:
    """The whole reference as Markdown: the program's help, then each command's."""
    # hookviz.cli has no public builder of its parser; ``_parser`` builds it without parsing
    # anything (``main`` would parse sys.argv).
    from hookviz.cli import _parser

    parser = _parser()
    parts = ["## `hookviz`", "", _help_block(parser)]
    for name, command in _commands(parser).items():
        parts += [
            f"## `hookviz {name}`",
            "",
            _help_block(command),
            "",
            f"### Options of `hookviz {name}`",
            "",
            _options_table(command),
            "",
        ]
    return "\n".join(parts)


def _commands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:  # (argparse keeps its sub-commands only here)
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


@contextmanager
def _columns(width: str):
    """argparse wraps help to the terminal's width ($COLUMNS): fix it for a stable page."""
    before = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = width
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = before


def _help_block(parser: argparse.ArgumentParser) -> str:
    with _columns(WIDTH):
        text = parser.format_help().rstrip()
    return f"```text\n{text}\n```\n"


def _options_table(parser: argparse.ArgumentParser) -> str:
    rows = [
        "| option | default | choices | what it does |",
        "| --- | --- | --- | --- |",
    ]
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        names = ", ".join(f"`{name}`" for name in action.option_strings) or f"`{action.dest}`"
        if action.required and action.option_strings:
            names += " (required)"
        rows.append(
            f"| {names} | {_default(action)} | {_choices(action)} | {_cell(action.help or '')} |"
        )
    return "\n".join(rows)


def _default(action: argparse.Action) -> str:
    if isinstance(action, argparse._StoreTrueAction):
        return "off"
    if action.default is None or action.default == argparse.SUPPRESS:
        return ""
    return f"`{action.default}`"


def _choices(action: argparse.Action) -> str:
    if not action.choices:
        return ""
    return ", ".join(f"`{choice}`" for choice in action.choices)


def _cell(text: str) -> str:
    """Help text in a table cell: one line, no pipe breaking the row."""
    return " ".join(text.split()).replace("|", "\\|")
