"""What the Explore page sends its browser-drawn heatmap pictures
(``hookviz/app/browser/pictures.py``), decoded, and the picture the browser must draw from it,
computed here in NumPy and Pillow (a grid by ``GridSeries.coloured``, which the JavaScript
follows): the tests compare that with ``hookviz.render`` (the contract of the data) and with the
canvas a real browser drew (the contract of the JavaScript)."""

from __future__ import annotations

import io
from dataclasses import dataclass

import numpy as np
from PIL import Image

from hookviz.app.browser import wire
from hookviz.colour_layers import GridSeries, LabelSet


@dataclass(frozen=True)
class HeatPicture:
    alpha: float
    cmap: str
    indices: np.ndarray | None  # (H, W) uint8 colormap indices (the heatmaps)
    image: str | None  # the digest of the image it blends over (the overlay only)
    base: np.ndarray | None  # (H, W, 3) uint8: that image at display size, when this run sent it
    tables: dict[str, np.ndarray]  # colormap -> (256, 3) uint8
    alt: str
    series: GridSeries | None = None  # a grid: every number of channels it can show (its order)
    channels: int | None = None  # a grid: how many it shows until the browser reads it
    scale: str | None = None  # a grid: its colour scale until the browser reads the widget
    captions: tuple[str, ...] = ()  # the texts under the picture (a grid's name n as "{n}")
    title: str | None = None  # the overlay's (what it is of) or the grid's (its layer)
    order: str | None = None  # a grid: its channel order until the browser reads the widget
    orders: dict[str, GridSeries] | None = None  # a grid: its series in each order it can show
    orderings: tuple[str, ...] = ()  # a grid: the order radio's options, in order

    def drawn(
        self,
        alpha: float | None = None,
        cmap: str | None = None,
        channels: int | None = None,
        scale: str | None = None,
        order: str | None = None,
    ) -> np.ndarray:
        """The picture for these options: the colormap's table at each index, blended over the
        image with Pillow (the overlay), or alone (the heatmap); a grid laid out for
        ``channels`` in ``order`` on ``scale`` (``GridSeries.coloured``, in the table the page
        sent)."""
        table = self.tables[cmap or self.cmap]
        if self.series is not None:
            series = self.orders[order] if order else self.series
            return series.coloured(channels or self.channels, table, scale or self.scale)
        colour = table[self.indices]
        if self.image is None:
            return colour
        assert self.base is not None, "the run did not send the image (a fragment run?)"
        opacity = self.alpha if alpha is None else alpha
        return np.asarray(Image.blend(Image.fromarray(self.base), Image.fromarray(colour), opacity))

    def text(self, channels: int | None = None) -> str:
        """The captions, a grid's for ``channels`` shown (the server's number by default)."""
        return "\n".join(self.captions).replace("{n}", str(channels or self.channels))

    def said(self) -> str:
        """Every text the picture shows: its title, if any, and its captions."""
        return "\n".join(filter(None, (self.title, self.text())))


def heat_pictures(at) -> list[HeatPicture]:
    """The page's browser-coloured pictures in page order (the overlay, the feature-map grid,
    the raw heatmap)."""
    elements = [
        wire.unpack(element.proto.bytes)
        for element in at.get("bidi_component")
        if element.proto.component_name == "hookviz_picture"
    ]
    # the images the overlays blend over, sent once per image by their digest
    sources = {}
    for data in elements:
        for digest, png in data.get("sources", {}).items():
            sources[digest] = np.asarray(Image.open(io.BytesIO(png)).convert("RGB"))
    # the heatmaps' indices by picture id, sent in an element of their own before the overlay
    packed = {
        identity: heat["packed"]
        for data in elements
        for identity, heat in data.get("heats", {}).items()
    }
    found = []
    for data in elements:
        if data["kind"] != "picture":
            continue  # (hidden elements: the images, the indices, the top-5 sent ahead)
        tables = {
            name: np.frombuffer(table, np.uint8).reshape(256, 3)
            for name, table in data["tables"].items()
        }
        grid = data.get("grid")
        found.append(
            HeatPicture(
                alpha=data["alpha"],
                cmap=data["cmap"],
                indices=None
                if grid
                else wire.unpacked_rows(packed[data["id"]], data["width"], data["height"]),
                image=data["base"],
                base=sources.get(data["base"]) if data["base"] else None,
                tables=tables,
                alt=data["alt"],
                series=_series(grid, data["scale"])[data["order"]] if grid else None,
                channels=data.get("channels"),
                scale=data.get("scale"),
                captions=tuple(data.get("captions", ())),
                title=data.get("title"),
                order=data.get("order"),
                orders=_series(grid, data["scale"]) if grid else None,
                orderings=tuple(data.get("orderings", ())),
            )
        )
    return found


def _series(grid: dict, scale: str) -> dict[str, GridSeries]:
    """A grid's series in each channel order, from what the page sends (the browser's
    ``seriesOf``: each order's maps gathered from the maps sent once)."""

    def array(raw: bytes, dtype) -> np.ndarray:
        return np.frombuffer(raw, dtype)

    maps = array(grid["cells"], "<f4").reshape(-1, grid["rows"], grid["columns"])
    series = {}
    for name, order in grid["orders"].items():
        labels = tuple(
            LabelSet(
                boxes=np.asarray(labels["boxes"], np.int32).reshape(-1, 4),
                pixels=array(labels["pixels"], "<u2" if labels["wide"] else np.uint8),
            )
            for labels in order["labels"]
        )
        series[name] = GridSeries(
            cells=maps[np.asarray(order["take"], np.int64)],
            scale=scale,
            zoom=grid["zoom"],
            gap=grid["gap"],
            columns=tuple(grid["per_row"]),
            fonts=tuple(order["fonts"]),
            labels=labels,
            palette=array(order["palette"], np.uint8).reshape(-1, 3),
            background=tuple(grid["background"]),
        )
    return series
