"""The sample photo: Grace Hopper in uniform, shipped inside matplotlib (no download)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from PIL import Image

SAMPLE_NAME = "grace_hopper.jpg"


def sample_image_path() -> Path:
    """Where matplotlib keeps its copy of the sample photo (``matplotlib.cbook.get_sample_data``
    finds it in the package's ``mpl-data`` folder too). Found without importing matplotlib:
    0.15 s of every cold start of the page, which opens on this photo."""
    spec = importlib.util.find_spec("matplotlib")
    for folder in (spec.submodule_search_locations or []) if spec is not None else []:
        path = Path(folder, "mpl-data", "sample_data", SAMPLE_NAME)
        if path.is_file():
            return path
    from matplotlib import cbook  # an unusual install: let matplotlib say where

    return Path(cbook.get_sample_data(SAMPLE_NAME, asfileobj=False))


def sample_image() -> Image.Image:
    """The sample photo as an RGB image."""
    from .images import load_image

    return load_image(sample_image_path())
