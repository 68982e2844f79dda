"""What the Explore page sends its browser-drawn heatmap pictures (``ui/heat_picture.py``),
decoded, and the picture the browser must draw from it, computed here in NumPy and Pillow: the
tests compare that with ``hookviz.render`` (the contract of the data) and with the canvas a
real browser drew (the contract of the JavaScript)."""

from __future__ import annotations

import base64
import io
import json
from dataclasses import dataclass

import numpy as np
from PIL import Image


@dataclass(frozen=True)
class HeatPicture:
    alpha: float
    cmap: str
    indices: np.ndarray  # (H, W) uint8 colormap indices
    image: str | None  # the digest of the image it blends over (the overlay only)
    base: np.ndarray | None  # (H, W, 3) uint8: that image at display size, when this run sent it
    tables: dict[str, np.ndarray]  # colormap -> (256, 3) uint8
    alt: str

    def drawn(self, alpha: float | None = None, cmap: str | None = None) -> np.ndarray:
        """The picture for these options: the colormap's table at each index, blended over the
        image with Pillow (the overlay), or alone (the heatmap)."""
        colour = self.tables[cmap or self.cmap][self.indices]
        if self.image is None:
            return colour
        assert self.base is not None, "the run did not send the image (a fragment run?)"
        opacity = self.alpha if alpha is None else alpha
        return np.asarray(Image.blend(Image.fromarray(self.base), Image.fromarray(colour), opacity))


def heat_pictures(at) -> list[HeatPicture]:
    """The page's heat pictures in page order (the overlay, then the raw heatmap)."""
    elements = [
        json.loads(element.proto.json)
        for element in at.get("bidi_component")
        if element.proto.component_name == "hookviz_heat_picture"
    ]
    # the images the overlays blend over, sent once per image by their digest
    sources = {}
    for data in elements:
        for digest, url in data.get("sources", {}).items():
            png = base64.b64decode(url.split(",", 1)[1])
            sources[digest] = np.asarray(Image.open(io.BytesIO(png)).convert("RGB"))
    found = []
    for data in elements:
        if "sources" in data:
            continue
        indices = np.frombuffer(base64.b64decode(data["heat"]), np.uint8)
        base = sources.get(data["base"]) if data["base"] else None
        tables = {
            name: np.frombuffer(base64.b64decode(text), np.uint8).reshape(256, 3)
            for name, text in data["tables"].items()
        }
        found.append(
            HeatPicture(
                alpha=data["alpha"],
                cmap=data["cmap"],
                indices=indices.reshape(data["height"], data["width"]),
                image=data["base"],
                base=base,
                tables=tables,
                alt=data["alt"],
            )
        )
    return found
