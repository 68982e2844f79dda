"""What the model list needs to know about torchvision's and timm's models, without importing them.

The sidebar lists every model with whether it can load now, and the Lite models need the
ImageNet class names. Reading those from the libraries means importing torchvision (it imports
``torch._dynamo``) and timm: about 1.4 s of a cold start, before anything is drawn. The same
facts are stored in ``zoo_index.json`` beside this file: the model names, each default weights
file's name and size, the hub ids of the curated timm models, and the 1000 ImageNet class names.

Each source gives its part of the index when it registers (``ModelSource.index``). The index is
written from the installed libraries (``python scripts/write_zoo_index.py``) and is used only
while they are the versions it was written from: another torchvision or timm is asked directly
(the old way, slower but right). ``tests/test_zoo_index.py`` checks the stored
index against a fresh ``build_index()``.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import metadata
from pathlib import Path
from typing import Any

from . import registry

INDEX_PATH = Path(__file__).with_name("zoo_index.json")


@cache
def installed_version(package: str) -> str | None:
    """The installed version of ``package`` (from its metadata: nothing is imported). Asked
    once per process: each question scans every folder on ``sys.path`` (about 10 ms here), and
    the model list asks it for every model."""
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


@cache
def stored() -> dict[str, Any]:
    """The index as written (empty when the file is missing or unreadable)."""
    try:
        return json.loads(INDEX_PATH.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def torchvision_part() -> dict[str, Any] | None:
    """The torchvision section, when it was written from the installed torchvision."""
    return _current("torchvision")


def timm_part() -> dict[str, Any] | None:
    """The timm section, when it was written from the installed timm."""
    return _current("timm")


def _current(package: str) -> dict[str, Any] | None:
    part = stored().get(package)
    if part is None or part.get("version") != installed_version(package):
        return None
    return part


def imagenet_categories() -> tuple[str, ...] | None:
    """The 1000 ImageNet class names as torchvision names them, or None if not stored."""
    names = stored().get("imagenet_categories")
    return tuple(names) if names else None


def build_index() -> dict[str, Any]:
    """The index from the installed libraries: every registered source's facts (imports
    their libraries: torchvision and timm)."""
    index: dict[str, Any] = {}
    for source in registry.sources():
        if source.index is not None:
            index.update(source.index())
    return index


def versioned(package: str, models: dict[str, Any]) -> dict[str, Any]:
    """A source's section of the index: its facts per model, with the version of ``package``
    they were read from (the section is used only while that version is installed)."""
    return {"version": installed_version(package), "models": models}


def write_index(path: Path = INDEX_PATH) -> None:
    """Write ``build_index()`` to ``path`` (run after upgrading torchvision or timm)."""
    path.write_text(json.dumps(build_index(), indent=1, ensure_ascii=False) + "\n", "utf-8")
