"""The library's layout: every public name importable from ``hookviz``. (What each part may
import, and that nothing imports in a cycle: ``test_import_cycles``.)"""

from __future__ import annotations

import hookviz


def test_every_public_name_is_importable_from_the_package():
    missing = [name for name in hookviz.__all__ if not hasattr(hookviz, name)]
    assert missing == []
    from hookviz import render, snippet  # modules that are part of the API

    assert callable(render.overlay) and callable(snippet.reproduce_snippet)
