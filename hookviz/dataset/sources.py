"""What a run's INPUTS name: files, folders (recursive), globs, or a text file listing paths;
expanded once, in a stable order, so a resumed run sees the same rows in the same places."""

from __future__ import annotations

import glob
import os
from collections.abc import Sequence
from pathlib import Path

# Files a folder contributes (by name only: a file given by name is taken whatever its suffix,
# and every file is checked by its content when decoded).
IMAGE_SUFFIXES = {".jpg", ".jpeg", ".jfif", ".png", ".webp", ".bmp", ".gif", ".tif", ".tiff"}
LIST_SUFFIXES = {".txt", ".lst"}


def expand_inputs(inputs: Sequence[str | os.PathLike]) -> list[Path]:
    """The image paths ``inputs`` name, in order: each input's own paths sorted, duplicates
    kept once (the first time seen).

    Raises:
        FileNotFoundError: an input that is no file, folder or matching glob.
    """
    found: list[Path] = []
    for raw in inputs:
        text = str(raw)
        path = Path(text).expanduser()
        if path.is_dir():
            found.extend(sorted(p for p in path.rglob("*") if p.is_file() and _is_image_name(p)))
        elif path.is_file() and path.suffix.lower() in LIST_SUFFIXES:
            base = path.parent
            for line in path.read_text(encoding="utf-8").splitlines():
                line = line.strip()
                if line and not line.startswith("#"):
                    listed = Path(line).expanduser()
                    found.append(listed if listed.is_absolute() else base / listed)
        elif path.is_file():
            found.append(path)
        else:
            matches = sorted(Path(m) for m in glob.glob(text, recursive=True))
            files = [m for m in matches if m.is_file()]
            if not files:
                raise FileNotFoundError(f"no file, folder or matching files: {text}")
            found.extend(files)
    seen: set[str] = set()
    unique = []
    for path in found:
        key = str(path.resolve())
        if key not in seen:
            seen.add(key)
            unique.append(path)
    return unique


def _is_image_name(path: Path) -> bool:
    return path.suffix.lower() in IMAGE_SUFFIXES and not path.name.startswith(".")
