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
    base: np.ndarray | None  # (H, W, 3) uint8: the display-size image (the overlay only)
    tables: dict[str, np.ndarray]  # colormap -> (256, 3) uint8
    alt: str

    def drawn(self, alpha: float | None = None, cmap: str | None = None) -> np.ndarray:
        """The picture for these options: the colormap's table at each index, blended over the
        image with Pillow (the overlay), or alone (the heatmap)."""
        colour = self.tables[cmap or self.cmap][self.indices]
        if self.base is None:
            return colour
        opacity = self.alpha if alpha is None else alpha
        return np.asarray(Image.blend(Image.fromarray(self.base), Image.fromarray(colour), opacity))


def heat_pictures(at) -> list[HeatPicture]:
    """The page's heat pictures in page order (the overlay, then the raw heatmap)."""
    found = []
    for element in at.get("bidi_component"):
        if element.proto.component_name != "hookviz_heat_picture":
            continue
        data = json.loads(element.proto.json)
        indices = np.frombuffer(base64.b64decode(data["heat"]), np.uint8)
        base = None
        if data["base"]:
            png = base64.b64decode(data["base"].split(",", 1)[1])
            base = np.asarray(Image.open(io.BytesIO(png)).convert("RGB"))
        tables = {
            name: np.frombuffer(base64.b64decode(text), np.uint8).reshape(256, 3)
            for name, text in data["tables"].items()
        }
        found.append(
            HeatPicture(
                alpha=data["alpha"],
                cmap=data["cmap"],
                indices=indices.reshape(data["height"], data["width"]),
                base=base,
                tables=tables,
                alt=data["alt"],
            )
        )
    return found
