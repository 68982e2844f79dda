"""Channel labels stay inside their own tiles on tall, wide and tiny maps; tiles of small maps are
big enough for a label; the colour bar.

Checked through the pixels: tiles are separated by 2-pixel gaps of the ``background`` colour, and
the background chosen here (pure magenta) is a colour no colormap or label box draws, so a label
overflowing its tile shows as a non-magenta pixel in a gap (or in an empty slot).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from hookviz import render

GAP = 2
MAGENTA = (255, 0, 255)
CHANNELS = [1279, 1278, 5]  # four-digit labels are the widest a 1280-channel layer needs


def _maps(shape: tuple[int, int, int], seed: int = 0) -> torch.Tensor:
    return torch.rand(shape, generator=torch.Generator().manual_seed(seed))


def _tile_mask(grid: np.ndarray, count: int, cols: int, tile_h: int, tile_w: int) -> np.ndarray:
    """True on the pixels of the ``count`` filled tiles; everything else is gap or empty slot."""
    mask = np.zeros(grid.shape[:2], bool)
    for position in range(count):
        top = (position // cols) * (tile_h + GAP)
        left = (position % cols) * (tile_w + GAP)
        mask[top : top + tile_h, left : left + tile_w] = True
    return mask


def _tile_size(shape: tuple[int, int, int]) -> tuple[int, int]:
    """(height, width) of one tile, measured: a one-tile grid without labels is the tile."""
    alone = render.feature_grid(_maps(shape), [0], labels=False)
    return alone.shape[0], alone.shape[1]


def test_magenta_is_never_drawn_by_a_colormap_or_label_box():
    # the premise of the pixel tests below
    for cmap in render.COLORMAPS:
        colours = render.colorize(np.linspace(0, 1, 1024), cmap)
        assert not np.all(colours == MAGENTA, axis=-1).any(), cmap
    for box in ((0, 0, 0), render._POSITIVE_BOX, render._NEGATIVE_BOX, (255, 255, 255)):
        assert box != MAGENTA


# Each layout leaves every tile a gap on the side where its label could spill: the default
# near-square grid (2x2 with an empty slot), one row with an empty slot after the last tile, one
# column with a repeated widest label at the bottom (so the real ones all have a gap below).
LAYOUTS = {
    "square": (CHANNELS, None),
    "row": (CHANNELS, len(CHANNELS) + 1),
    "column": ([*CHANNELS, CHANNELS[0]], 1),
}


SHAPES = {
    "tall": (1280, 47, 7),  # a 47x7 map of a tall photo: narrow tiles
    "wide": (1280, 7, 47),  # ... of a wide one: short tiles
    "7x7": (1280, 7, 7),
    "2x3": (1280, 2, 3),
    # a 1x1 map (a pooled layer) once got 16-pixel tiles under 22-pixel labels whose boxes
    # spilled across the gap into the next tile
    "1x1": (1280, 1, 1),
}

CASES = [
    pytest.param(shape, layout, id=f"{name}-{layout}")
    for name, shape in SHAPES.items()
    for layout in LAYOUTS
]


@pytest.mark.parametrize("signed", [False, True], ids=["plain", "signed"])
@pytest.mark.parametrize(("shape", "layout"), CASES)
def test_labels_stay_inside_their_tiles(shape, layout, signed):
    channels, columns = LAYOUTS[layout]
    maps = _maps(shape)
    signs = [(-1.0) ** i for i in range(len(channels))] if signed else None
    grid = render.feature_grid(
        maps, channels, cmap="viridis", columns=columns, background=MAGENTA, signs=signs
    )
    plain = render.feature_grid(
        maps, channels, cmap="viridis", columns=columns, background=MAGENTA, labels=False
    )
    tile_h, tile_w = _tile_size(shape)
    cols = columns or int(np.ceil(np.sqrt(len(channels))))
    inside = _tile_mask(grid, len(channels), cols, tile_h, tile_w)
    assert np.all(plain[~inside] == MAGENTA)  # the layout is as assumed
    spilled = ~inside & np.any(grid != MAGENTA, axis=-1)
    if spilled.any():
        ys, xs = np.nonzero(spilled)
        pytest.fail(
            f"{len(ys)} label pixels outside the {tile_h}x{tile_w} tiles, e.g. at "
            f"(y={ys[0]}, x={xs[0]}); labels {channels}"
        )
    # and every tile did get its label (drawn, not dropped to stay inside)
    for position in range(len(channels)):
        top = (position // cols) * (tile_h + GAP)
        left = (position % cols) * (tile_w + GAP)
        tile = (slice(top, top + tile_h), slice(left, left + tile_w))
        assert not np.array_equal(grid[tile], plain[tile]), position


@pytest.mark.parametrize("shape", [(47, 7), (7, 47), (7, 7), (3, 5), (12, 4), (14, 14)])
def test_tiles_of_small_maps_can_hold_a_label(shape):
    tile_h, tile_w = _tile_size((1, *shape))
    # whole cells: each feature-map cell is a square block of pixels
    assert tile_h % shape[0] == 0 and tile_w % shape[1] == 0
    assert tile_h // shape[0] == tile_w // shape[1]
    assert min(tile_h, tile_w) >= 40
    assert max(tile_h, tile_w) >= 64


def test_tile_zoom_bounds():
    for height in range(1, 120):
        for width in (1, 2, 3, 7, 14, 47, 64, 112, 300):
            zoom = render.tile_zoom(height, width)
            assert 0 < zoom <= 64
            short, long = min(height, width), max(height, width)
            if zoom < 64:  # not capped: the tile meets both minimums ...
                assert short * zoom >= 40 and long * zoom >= 64
            if zoom > 1:  # ... with the smallest zoom that does
                assert short * (zoom - 1) < 40 or long * (zoom - 1) < 64
    assert render.tile_zoom(1, 1) == 64  # a 1x1 map: a 64-pixel square, room for its label
    assert render.tile_zoom(224, 224) == 1


def test_colorbar_runs_from_zero_to_one():
    bar = render.colorbar("inferno", 256, 12)
    assert bar.shape == (12, 256, 3) and bar.dtype == np.uint8
    ends = render.colorize(np.array([0.0, 1.0]), "inferno")
    assert (bar[:, 0] == ends[0]).all() and (bar[:, -1] == ends[1]).all()
    assert not np.array_equal(ends[0], ends[1])
    assert (bar == bar[:1]).all()  # every row is the same ramp
    for width in (256, 1000, 3):
        gray = render.colorbar("gray", width, 4)[0].astype(int)
        assert (gray[:, 0] == gray[:, 1]).all() and (gray[:, 1] == gray[:, 2]).all()
        assert (np.diff(gray[:, 0]) >= 0).all() and gray[-1, 0] > gray[0, 0]
        assert gray[0, 0] == 0 and gray[-1, 0] == 255


def test_colorize_accepts_a_single_value():
    # matplotlib returns a tuple for a non-iterable value; colorize once indexed it as an array
    one = render.colorize(np.array(1.0), "inferno")
    assert one.shape == (3,) and one.dtype == np.uint8
    assert np.array_equal(one, render.colorize(np.array([1.0]), "inferno")[0])


def test_long_maps_get_a_roughly_square_grid():
    """A panorama's 7x47 maps in 8 columns made a 2256x336 grid shown 334 pixels wide (tiles 6
    pixels tall): long maps get as many columns as keep the grid about square."""
    assert render.grid_columns(64) == 8 and render.grid_columns(256) == 16
    for height, width in ((7, 47), (47, 7), (3, 30)):
        maps = _maps((64, height, width))
        columns = render.grid_columns(64, height, width)
        grid = render.feature_grid(maps, list(range(64)), columns=columns)
        assert 0.5 <= grid.shape[1] / grid.shape[0] <= 2.0, (height, width, grid.shape)
