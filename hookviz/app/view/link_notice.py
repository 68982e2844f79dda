"""The sentence that names a link's values the page could not use (``state`` tracks which):
each field in the user's words with the value the link gave, escaped so that it reads exactly
as typed (a link is anyone's text: no markdown, HTML or formula of it is rendered)."""

from __future__ import annotations

import re
from collections.abc import Sequence

from hookviz.app.view.literal import literal

# A field's name as the sidebar says it, where the address's name is not the same word.
_WORDS = {
    "target": "class",
    "alpha": "opacity",
    "all_modules": "every-module switch",
    "cam_cmap": "heatmap colormap",
    "grid_cmap": "grid colormap",
    "channel_overlay": "channel overlay",
    "compare_model": "second model",
    "compare_weights": "second model's weights",
    "compare_layer": "second model's layer",
    "compare_target": "second model's class",
    "compare_match": "class matching",
}
_LONGEST = 60  # characters of a given value shown (a long paste is cut, marked with "…")
_NUMBER = re.compile(r"-?\d+(\.\d+)?")


def sentence(given: Sequence[tuple[str, str]]) -> str:
    """The notice for the ``(field, text)`` pairs a link gave that were replaced, in order."""
    named = [f"{_word(name, text)} {_value(text)}" for name, text in given]
    listed = named[0] if len(named) == 1 else ", ".join(named[:-1]) + " and " + named[-1]
    verb = "is" if len(named) == 1 else "are"
    return f"This link's {listed} {verb} not valid here: the defaults are shown."


def _word(name: str, text: str) -> str:
    if name == "target" and not _NUMBER.fullmatch(text):
        return "target"  # (a box, a region or a reference image: "class" would be wrong)
    return _WORDS.get(name, escaped(name.replace("_", " ")))


def _value(text: str) -> str:
    if _NUMBER.fullmatch(text) and len(text) <= _LONGEST:  # (a 4,000-digit one is cut too)
        return text
    return f"'{escaped(text)}'"


def escaped(text: str) -> str:
    """``text`` as markdown that shows it literally (``literal``), cut at ``_LONGEST``
    characters."""
    flat = str(text)
    if len(flat) > _LONGEST:
        flat = flat[: _LONGEST - 1] + "…"
    return literal(flat)
