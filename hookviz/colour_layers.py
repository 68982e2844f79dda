"""Pictures split into what a colormap changes and what it does not, for a viewer that colours
them itself (the page's browser: ``ui/heat_picture.js``), so that a colormap change costs a
table lookup there instead of a new picture from Python.

``GridLayers`` is ``render.laid_out_grid`` in that form: the tiles as colormap indices, and the
gaps and label boxes (which no colormap changes) as fixed colours. For every colormap,
``layers.coloured(cmap)`` equals ``render.laid_out_grid(..., cmap=cmap)`` exactly (tested).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from PIL import Image, ImageDraw

from . import render


@dataclass(frozen=True)
class GridLayers:
    indices: np.ndarray  # (H, W) uint8: the colormap entry of each tile pixel (0 elsewhere)
    fixed: np.ndarray  # (H, W) bool: pixels no colormap changes (gaps, empty slots, labels)
    colours: np.ndarray  # (count, 3) uint8: the fixed pixels' colours, in raster order
    # ``indices`` before the zoom, and where each tile goes: what a viewer needs to rebuild
    # ``indices`` (each cell is ``zoom`` pixels square; tile t at row t // columns, column
    # t % columns, tiles ``gap`` pixels apart), a fraction of its size to send.
    cells: np.ndarray  # (tiles, h, w) uint8
    zoom: int
    columns: int
    gap: int

    def coloured(self, cmap: str) -> np.ndarray:
        """The grid in ``cmap``: (H, W, 3) uint8 RGB."""
        grid = render.colormap_table(cmap)[self.indices]
        grid[self.fixed] = self.colours
        return grid


def grid_layers(
    activations: torch.Tensor | np.ndarray,
    channels: Sequence[int],
    *,
    scale: str = "channel",
    signs: Sequence[float] | None = None,
    background: tuple[int, int, int] = (255, 255, 255),
) -> GridLayers:
    """``render.laid_out_grid`` of these channels, as colormap indices and fixed colours."""
    maps = (
        activations.detach().cpu().numpy()
        if isinstance(activations, torch.Tensor)
        else np.asarray(activations)
    )
    channels = list(channels)
    if maps.ndim != 3 or not channels:
        raise ValueError(f"expected (C, h, w) activations and channels, got {maps.shape}")
    chosen = render.normalise_maps(maps[channels], scale)
    zoom = render.tile_zoom(chosen.shape[1], chosen.shape[2])
    cells = render.colormap_indices(chosen)
    # the index of a repeated value is the repeated index: the zoom can come after the lookup
    tiles = cells.repeat(zoom, axis=1).repeat(zoom, axis=2)
    count, tile_h, tile_w = tiles.shape
    cols = render.grid_columns(count, *maps.shape[1:])
    rows = math.ceil(count / cols)
    gap = render._GAP
    shape = (rows * tile_h + (rows - 1) * gap, cols * tile_w + (cols - 1) * gap)
    indices = np.zeros(shape, np.uint8)
    fixed = np.ones(shape, bool)
    for position in range(count):
        top = (position // cols) * (tile_h + gap)
        left = (position % cols) * (tile_w + gap)
        indices[top : top + tile_h, left : left + tile_w] = tiles[position]
        fixed[top : top + tile_h, left : left + tile_w] = False
    # The labels are opaque boxes with white text: their pixels do not depend on the tile's
    # colour beneath, so they are drawn once, on the background, and marked fixed.
    picture = Image.new("RGB", (shape[1], shape[0]), background)
    boxes = Image.new("L", (shape[1], shape[0]), 0)
    render.draw_labels(
        ImageDraw.Draw(picture),
        channels,
        cols,
        tile_h,
        tile_w,
        None if signs is None else list(signs),
        boxes=ImageDraw.Draw(boxes),
    )
    fixed |= np.asarray(boxes) > 0
    return GridLayers(
        indices=indices,
        fixed=fixed,
        colours=np.asarray(picture)[fixed],
        cells=cells,
        zoom=zoom,
        columns=cols,
        gap=gap,
    )
