"""What the model list needs to know about torchvision's and timm's models, without importing them.

The sidebar lists every model with whether it can load now, and the Lite models need the
ImageNet class names. Reading those from the libraries means importing torchvision (it imports
``torch._dynamo``) and timm: about 1.4 s of a cold start, before anything is drawn. The same
facts are stored in ``zoo_index.json`` beside this file: the model names, each default weights
file's name and size, the hub ids of the curated timm models, and the 1000 ImageNet class names.

The index is written from the installed libraries (``python scripts/write_zoo_index.py``) and
is used only while they are the versions it was written from: another torchvision or timm is
asked directly (the old way, slower but right). ``tests/test_zoo_index.py`` checks the stored
index against a fresh ``build_index()``.
"""

from __future__ import annotations

import json
import os
from functools import cache
from importlib import metadata
from pathlib import Path
from typing import Any

INDEX_PATH = Path(__file__).with_name("zoo_index.json")
# The timm pretrained-config fields that say where the weights live (``timm_zoo.cached_weights``)
_TIMM_FIELDS = ("hf_hub_id", "hf_hub_filename", "url")


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
    """The index from the installed libraries (imports torchvision and timm)."""
    import timm.models
    from torchvision import models

    from . import timm_zoo, torchvision_zoo

    torchvision_models = {}
    for name in torchvision_zoo.live_cnn_names():
        weights = models.get_model_weights(name).DEFAULT
        size = weights.meta.get("_file_size")
        torchvision_models[name] = {
            "file": os.path.basename(weights.url),
            "mb": float(size) if size else None,
        }
    timm_models = {}
    for name in timm_zoo.CURATED:
        cfg = timm.models.get_pretrained_cfg(name.removeprefix(timm_zoo.PREFIX))
        timm_models[name] = {field: getattr(cfg, field, None) for field in _TIMM_FIELDS}
    return {
        "torchvision": {"version": installed_version("torchvision"), "models": torchvision_models},
        "timm": {"version": installed_version("timm"), "models": timm_models},
        "imagenet_categories": list(
            models.ResNet50_Weights.IMAGENET1K_V2.meta["categories"]  # type: ignore[attr-defined]
        ),
    }


def write_index(path: Path = INDEX_PATH) -> None:
    """Write ``build_index()`` to ``path`` (run after upgrading torchvision or timm)."""
    path.write_text(json.dumps(build_index(), indent=1, ensure_ascii=False) + "\n", "utf-8")
