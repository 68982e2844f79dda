"""Rewrite ``hookviz/colormap_tables.json`` from the installed matplotlib (run after upgrading
it; ``tests/test_render.py`` fails until then, and the page imports matplotlib meanwhile).

    python scripts/write_colormap_tables.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from hookviz import render, stored_colormaps

if __name__ == "__main__":
    stored_colormaps.write_tables(render.COLORMAPS)
    print(f"wrote {stored_colormaps.TABLES_PATH}")
