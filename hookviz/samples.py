"""The sample photo: Grace Hopper in uniform, shipped inside matplotlib (no download)."""

from __future__ import annotations

from pathlib import Path

from PIL import Image

SAMPLE_NAME = "grace_hopper.jpg"


def sample_image_path() -> Path:
    """Where matplotlib keeps its copy of the sample photo."""
    from matplotlib import cbook

    return Path(cbook.get_sample_data(SAMPLE_NAME, asfileobj=False))


def sample_image() -> Image.Image:
    """The sample photo as an RGB image."""
    from .images import load_image

    return load_image(sample_image_path())
