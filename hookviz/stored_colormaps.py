"""The page's colormaps as stored tables, so drawing needs no import of matplotlib.

Importing matplotlib costs about 0.15 s (its colormap registry alone 0.08 s), paid by every
cold start of the page before the first picture, for eight tables of 256 colours. The tables
are stored in ``colormap_tables.json`` beside this file, written from matplotlib
(``python scripts/write_colormap_tables.py``), and used only while the installed matplotlib is
the version they were written from: another version is asked directly, as before.
``tests/test_render.py`` checks the stored tables against matplotlib's own.
"""

from __future__ import annotations

import base64
import json
from functools import cache
from pathlib import Path

import numpy as np

from .models.zoo_index import installed_version

TABLES_PATH = Path(__file__).with_name("colormap_tables.json")


@cache
def _stored() -> dict[str, np.ndarray]:
    """The stored tables by name, each (256, 3) uint8 RGB; empty when they were written from
    another matplotlib, or the file is missing or unreadable."""
    try:
        written = json.loads(TABLES_PATH.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if written.get("matplotlib") != installed_version("matplotlib"):
        return {}
    tables = {}
    for name, text in written.get("tables", {}).items():
        table = np.frombuffer(base64.b64decode(text), dtype=np.uint8)
        if table.size == 256 * 3:
            tables[name] = table.reshape(256, 3)
    return tables


def stored_table(name: str) -> np.ndarray | None:
    """Colormap ``name``'s 256 colours as matplotlib gives them (``bytes=True``), or None when
    they are not stored for the installed matplotlib."""
    return _stored().get(name)


def write_tables(names: tuple[str, ...], path: Path = TABLES_PATH) -> None:
    """Store the tables of ``names`` as the installed matplotlib gives them."""
    import matplotlib

    entries = (np.arange(256) + 0.5) / 256
    tables = {}
    for name in names:
        rgb = matplotlib.colormaps[name](entries, bytes=True)[:, :3]
        tables[name] = base64.b64encode(np.ascontiguousarray(rgb, dtype=np.uint8)).decode()
    written = {"matplotlib": installed_version("matplotlib"), "tables": tables}
    path.write_text(json.dumps(written, indent=1) + "\n", encoding="utf-8")
