"""The feature-map grid in a form a viewer can lay out and colour itself (the page's browser:
``hookviz/app/browser/js/paint.js``), so that a colormap or "channels shown" change costs a table
lookup there instead of a new picture from Python.

``GridSeries`` holds ``render.laid_out_grid`` of the first n of some channels, for every n and
both colour scales at once: the feature maps' values (float32: the viewer scales them, each map
on its own range or the n maps shown on one), the tiles per row for each n, and each channel's
label box, drawn once per font size the labels can get. For every n, scale and colormap,
``series.coloured(n, cmap, scale)`` equals ``render.laid_out_grid(activations, channels[:n],
cmap=cmap, scale=scale, ...)`` exactly (tested).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from PIL import Image, ImageDraw

from . import render


@dataclass(frozen=True)
class LabelSet:
    """The channels' label boxes at one font size, by position in the grid.

    ``boxes[p]`` is (left, top, width, height) of position p's box from its tile's corner (it
    may reach a pixel past the tile, into the gap); width 0 when the label does not fit its tile
    and is left out. ``pixels`` holds the boxes' pixels as ``GridSeries.palette`` entries, box
    after box, each in raster order.
    """

    boxes: np.ndarray  # (positions, 4) int32
    pixels: np.ndarray  # (sum of the boxes' areas,) uint8 or uint16

    def offsets(self) -> np.ndarray:
        """Where each position's pixels start in ``pixels``."""
        areas = self.boxes[:, 2].astype(np.int64) * self.boxes[:, 3]
        return np.concatenate([[0], np.cumsum(areas)[:-1]])


@dataclass(frozen=True)
class GridSeries:
    cells: np.ndarray  # (count, h, w) float32: the maps' values
    scale: str  # the colour scale drawn unless another is asked for: "channel", each map on its
    # own range; "shared", one range over the n maps shown
    zoom: int  # each cell is zoom x zoom pixels
    gap: int  # pixels between tiles
    columns: tuple[int, ...]  # tiles per row, for n = 1 .. count
    fonts: tuple[int, ...]  # which of ``labels`` the first n channels get, for n = 1 .. count
    labels: tuple[LabelSet, ...]
    palette: np.ndarray  # (entries, 3) uint8: the label boxes' colours
    background: tuple[int, int, int]  # the gaps and empty slots

    @property
    def count(self) -> int:
        return int(self.cells.shape[0])

    @property
    def tile(self) -> tuple[int, int]:
        """(height, width) in pixels of one tile."""
        return self.cells.shape[1] * self.zoom, self.cells.shape[2] * self.zoom

    def size(self, n: int) -> tuple[int, int]:
        """(height, width) in pixels of the grid of the first n channels."""
        columns = self.columns[n - 1]
        rows = -(-n // columns)
        tile_h, tile_w = self.tile
        return rows * tile_h + (rows - 1) * self.gap, columns * tile_w + (columns - 1) * self.gap

    def indices(self, n: int, scale: str | None = None) -> np.ndarray:
        """The first n maps' cells as colormap indices on ``scale``: (n, h, w) uint8."""
        scale = scale or self.scale
        if scale not in render.SCALES:
            raise ValueError(f"scale {scale!r} is not one of {render.SCALES}")
        return render.colormap_indices(render.normalise_maps(self.cells[:n], scale))

    def coloured(self, n: int, cmap: str | np.ndarray, scale: str | None = None) -> np.ndarray:
        """The grid of the first n channels in ``cmap`` (a name, or its (256, 3) uint8 table)
        on ``scale`` (default: the series'): (H, W, 3) uint8 RGB."""
        if not 1 <= n <= self.count:
            raise ValueError(f"n must be 1..{self.count}, got {n}")
        height, width = self.size(n)
        columns = self.columns[n - 1]
        tile_h, tile_w = self.tile
        table = render.colormap_table(cmap) if isinstance(cmap, str) else np.asarray(cmap)
        tiles = table[self.indices(n, scale)]
        tiles = tiles.repeat(self.zoom, axis=1).repeat(self.zoom, axis=2)
        grid = np.empty((height, width, 3), np.uint8)
        grid[:] = self.background
        labels = self.labels[self.fonts[n - 1]]
        offsets = labels.offsets()
        for position in range(n):
            top = (position // columns) * (tile_h + self.gap)
            left = (position % columns) * (tile_w + self.gap)
            grid[top : top + tile_h, left : left + tile_w] = tiles[position]
            x, y, w, h = (int(v) for v in labels.boxes[position])
            if w == 0:
                continue
            start = offsets[position]
            box = self.palette[labels.pixels[start : start + w * h]].reshape(h, w, 3)
            # a box reaching past the grid's edge is cut there, as Pillow cuts it
            y0, x0 = top + y, left + x
            y1, x1 = max(y0, 0), max(x0, 0)
            y2, x2 = min(y0 + h, height), min(x0 + w, width)
            grid[y1:y2, x1:x2] = box[y1 - y0 : y2 - y0, x1 - x0 : x2 - x0]
        return grid


def grid_series(
    activations: torch.Tensor | np.ndarray,
    channels: Sequence[int],
    *,
    scale: str = "channel",
    signs: Sequence[float] | None = None,
    background: tuple[int, int, int] = (255, 255, 255),
) -> GridSeries:
    """``render.laid_out_grid`` of the first n of ``channels`` (with their ``signs``), for every
    n from 1 to ``len(channels)`` and both colour scales, as one ``GridSeries`` (drawn on
    ``scale`` unless asked otherwise)."""
    maps = (
        activations.detach().cpu().numpy()
        if isinstance(activations, torch.Tensor)
        else np.asarray(activations)
    )
    channels = [int(c) for c in channels]
    signs = None if signs is None else [float(s) for s in signs]
    if maps.ndim != 3 or not channels:
        raise ValueError(f"expected (C, h, w) activations and channels, got {maps.shape}")
    if scale not in render.SCALES:
        raise ValueError(f"scale {scale!r} is not one of {render.SCALES}")
    chosen = maps[channels].astype(np.float32)
    height, width = chosen.shape[1:]
    zoom = render.tile_zoom(height, width)
    fonts, labels, palette = _label_sets(channels, signs, height * zoom, width * zoom)
    return GridSeries(
        cells=chosen,
        scale=scale,
        zoom=zoom,
        gap=render._GAP,
        columns=tuple(render.grid_columns(n, height, width) for n in range(1, len(channels) + 1)),
        fonts=fonts,
        labels=labels,
        palette=palette,
        background=tuple(int(v) for v in background),
    )


def _label_sets(
    channels: list[int], signs: list[float] | None, tile_h: int, tile_w: int
) -> tuple[tuple[int, ...], tuple[LabelSet, ...], np.ndarray]:
    """The label sets the first n channels can get, and which one each n gets.

    The font depends on the first of the longest labels only (``render.label_font``), so it
    changes only where a longer label joins: a few sizes at most, each drawn once for every
    position that uses it, on a strip of empty tiles (a label's pixels do not depend on the
    tile beneath or on where the tile is)."""
    sizes: list[object] = []  # the distinct fonts, in order of first use
    fonts, last_n = [], []  # per n; the largest n of each font
    widest = ""
    font = None
    for n, channel in enumerate(channels, start=1):
        text = str(channel)
        if font is None or len(text) > len(widest):
            widest = text
            font = render.label_font(channels[:n], tile_h, tile_w, signs is not None)
            if not sizes or _font_size(sizes[-1]) != _font_size(font):
                sizes.append(font)
                last_n.append(n)
        fonts.append(len(sizes) - 1)
        last_n[-1] = n
    # a label's box can reach a pixel beyond its tile, into the gap on either side: the strip
    # has a margin before its first tile, and each box is read back from where it was drawn
    stride, margin = tile_w + render._GAP, 4
    sets, pixel_rows = [], []
    for font, count in zip(sizes, last_n, strict=True):
        strip = Image.new("RGB", (count * stride + 2 * margin, tile_h + 2 * margin))
        drawn = render.draw_labels(
            ImageDraw.Draw(strip),
            channels[:count],
            count,
            tile_h,
            tile_w,
            None if signs is None else signs[:count],
            font=font,
            margin=margin,
        )
        pixels = np.asarray(strip)
        boxes = np.zeros((len(channels), 4), np.int32)
        patches = []
        for position, rectangle in enumerate(drawn):
            if rectangle is None:
                continue
            x0, y0, x1, y1 = rectangle
            tile_left = margin + position * stride
            boxes[position] = (x0 - tile_left, y0 - margin, x1 - x0 + 1, y1 - y0 + 1)
            patches.append(pixels[y0 : y1 + 1, x0 : x1 + 1].reshape(-1, 3))
        sets.append(boxes)
        pixel_rows.append(np.concatenate(patches) if patches else np.zeros((0, 3), np.uint8))
    # The distinct colours, in (r, g, b) order: each packed into one integer first (a 1-D
    # unique; np.unique over rows sorts them as structured records, about 40 ms for 256 labels)
    rows = np.concatenate(pixel_rows).astype(np.uint32)
    packed = rows[:, 0] << 16 | rows[:, 1] << 8 | rows[:, 2]
    colours, inverse = np.unique(packed, return_inverse=True)
    palette = np.stack([colours >> 16, colours >> 8 & 255, colours & 255], axis=1)
    inverse = inverse.reshape(-1).astype(np.uint8 if len(palette) <= 256 else np.uint16)
    labels, start = [], 0
    for boxes, rows in zip(sets, pixel_rows, strict=True):
        labels.append(LabelSet(boxes=boxes, pixels=inverse[start : start + len(rows)]))
        start += len(rows)
    if len(palette) == 0:
        palette = np.zeros((1, 3), np.uint8)
    return tuple(fonts), tuple(labels), palette.astype(np.uint8)


def _font_size(font) -> object:
    return getattr(font, "size", id(font))
