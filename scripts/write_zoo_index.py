"""Rewrite ``hookviz/models/zoo_index.json`` from the installed torchvision and timm (run after
upgrading either; ``tests/test_zoo_index.py`` fails until then).

    python scripts/write_zoo_index.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from hookviz.models import zoo_index

if __name__ == "__main__":
    zoo_index.write_index()
    print(f"wrote {zoo_index.INDEX_PATH}")
