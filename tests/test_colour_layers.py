"""``hookviz.colour_layers``: the feature-map grid of the first n channels, for every n, as a
viewer lays it out and colours it (the page's browser does, from this data), must be
``render.laid_out_grid`` exactly: every n, colormap, scale, theme background, label size and sign
marking."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from hookviz import render
from hookviz.colour_layers import grid_series

CASES = [
    ((80, 7, 9), list(range(64)), None),  # a tall map: wide labels on narrow tiles
    ((300, 14, 14), [5, 299, 17, 3], [0.2, -0.1, 0.0, -3.0]),  # CAM-weight signs
    ((1280, 1, 1), list(range(40)), None),  # 1x1 maps enlarged to label-wide tiles
    ((10, 47, 7), [1, 2, 3], None),  # a long map
    ((3, 5, 5), [2], [1.0]),  # one tile
    # narrow tiles: the labels' font shrinks where a longer number joins (at n = 3 and 5)
    ((1300, 47, 7), [7, 23, 1299, 100, 12345 % 1300, 4], [1.0, -2.0, 0.5, -0.1, 3.0, 0.0]),
    ((200, 9, 9), list(range(199, 99, -1)), None),  # 100 tiles: 16 per row beyond 64
]


def _maps(shape, seed):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize(("shape", "channels", "signs"), CASES)
@pytest.mark.slow
def test_every_n_gives_the_laid_out_grid(shape, channels, signs):
    maps = _maps(shape, len(channels))
    for background in ((255, 255, 255), (14, 17, 23)):
        series = grid_series(torch.from_numpy(maps), channels, signs=signs, background=background)
        assert series.count == len(channels)
        for scale in render.SCALES:  # one series, either scale
            for n in range(1, len(channels) + 1):
                expected = render.laid_out_grid(
                    maps,
                    channels[:n],
                    cmap="magma",
                    scale=scale,
                    signs=None if signs is None else signs[:n],
                    background=background,
                )
                assert series.size(n) == expected.shape[:2]
                assert np.array_equal(series.coloured(n, "magma", scale), expected), (scale, n)


@pytest.mark.parametrize(("shape", "channels", "signs"), CASES[:3])
def test_every_colormap_gives_the_laid_out_grid(shape, channels, signs):
    maps = _maps(shape, 1)
    for scale in render.SCALES:
        series = grid_series(maps, channels, scale=scale, signs=signs)  # drawn on scale
        for n in sorted({1, len(channels) // 2 or 1, len(channels)}):
            for cmap in render.COLORMAPS:
                expected = render.laid_out_grid(
                    maps,
                    channels[:n],
                    cmap=cmap,
                    scale=scale,
                    signs=None if signs is None else signs[:n],
                )
                assert np.array_equal(series.coloured(n, cmap), expected), (scale, n, cmap)


def test_labels_are_drawn_once_per_font_and_the_cells_once():
    """What a viewer gets is compact: the values of each channel once (float32, whatever n and
    scale are shown), and one label box per channel and font size, the font changing only where
    a longer number joins."""
    maps = _maps((1300, 47, 7), 0)
    channels = [7, 23, 1299, 100, 45, 4]
    series = grid_series(maps, channels, signs=[1.0, -2.0, 0.5, -0.1, 3.0, 0.0])
    assert series.cells.dtype == np.float32 and series.cells.shape == (6, 47, 7)
    assert len(series.labels) == 2 and series.fonts == (0, 0, 1, 1, 1, 1)
    assert len(series.labels[0].boxes) == 6 and series.labels[0].boxes[2:].sum() == 0
    assert (series.labels[1].boxes[:, 2] > 0).all()
    with pytest.raises(ValueError, match=r"n must be 1\.\.6"):
        series.coloured(7, "viridis")
    with pytest.raises(ValueError, match="scale"):
        grid_series(maps, channels, scale="log")
    with pytest.raises(ValueError, match="scale"):
        series.coloured(1, "viridis", "log")
