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
    fixed: np.ndarray | None = None  # (H, W) bool: a grid's pixels no colormap changes
    colours: np.ndarray | None = None  # (count, 3) uint8: their colours, in raster order

    def drawn(self, alpha: float | None = None, cmap: str | None = None) -> np.ndarray:
        """The picture for these options: the colormap's table at each index, blended over the
        image with Pillow (the overlay), or alone (the heatmap)."""
        colour = self.tables[cmap or self.cmap][self.indices]
        if self.fixed is not None:
            colour[self.fixed] = self.colours
        if self.image is None:
            return colour
        assert self.base is not None, "the run did not send the image (a fragment run?)"
        opacity = self.alpha if alpha is None else alpha
        return np.asarray(Image.blend(Image.fromarray(self.base), Image.fromarray(colour), opacity))


def heat_pictures(at) -> list[HeatPicture]:
    """The page's browser-coloured pictures in page order (the overlay, the feature-map grid,
    the raw heatmap)."""
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
    # the heatmap's indices, sent with the overlay (same id) or rebuilt from a grid's cells
    indices_of = {}
    for data in elements:
        if data.get("heat"):
            indices_of[data["id"]] = np.frombuffer(base64.b64decode(data["heat"]), np.uint8)
        elif data.get("cells"):
            indices_of[data["id"]] = _from_cells(data["cells"], data["width"], data["height"])
    found = []
    for data in elements:
        if "sources" in data:
            continue
        shape = (data["height"], data["width"])
        indices = indices_of[data["id"]]
        base = sources.get(data["base"]) if data["base"] else None
        fixed = colours = None
        if data.get("fixed"):
            bits = np.frombuffer(base64.b64decode(data["fixed"]), np.uint8)
            fixed = np.unpackbits(bits)[: shape[0] * shape[1]].reshape(shape).astype(bool)
            colours = np.frombuffer(base64.b64decode(data["colours"]), np.uint8).reshape(-1, 3)
        tables = {
            name: np.frombuffer(base64.b64decode(text), np.uint8).reshape(256, 3)
            for name, text in data["tables"].items()
        }
        found.append(
            HeatPicture(
                alpha=data["alpha"],
                cmap=data["cmap"],
                indices=indices.reshape(shape),
                image=data["base"],
                base=base,
                tables=tables,
                alt=data["alt"],
                fixed=fixed,
                colours=colours,
            )
        )
    return found


def _from_cells(cells: dict, width: int, height: int) -> np.ndarray:
    """A grid's indices from its cells, by the layout rule the browser follows: each cell
    ``zoom`` pixels square, tile t at row t // per_row and column t % per_row, ``gap`` apart."""
    source = np.frombuffer(base64.b64decode(cells["indices"]), np.uint8)
    tiles = source.reshape(cells["tiles"], cells["rows"], cells["columns"])
    zoom, per_row, gap = cells["zoom"], cells["per_row"], cells["gap"]
    out = np.zeros((height, width), np.uint8)
    tile_h, tile_w = cells["rows"] * zoom, cells["columns"] * zoom
    for t, tile in enumerate(tiles):
        top, left = (t // per_row) * (tile_h + gap), (t % per_row) * (tile_w + gap)
        out[top : top + tile_h, left : left + tile_w] = tile.repeat(zoom, 0).repeat(zoom, 1)
    return out.reshape(-1)
