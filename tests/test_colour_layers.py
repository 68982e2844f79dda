"""``hookviz.colour_layers``: the feature-map grid split into colormap indices and the pixels no
colormap changes must give ``render.laid_out_grid`` back exactly, for every colormap, scale,
theme background, label size and sign marking (the page's browser colours the grid from it)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from hookviz import render
from hookviz.colour_layers import grid_layers

CASES = [
    ((80, 7, 9), list(range(64)), None),  # a tall map: wide labels on narrow tiles
    ((300, 14, 14), [5, 299, 17, 3], [0.2, -0.1, 0.0, -3.0]),  # CAM-weight signs
    ((1280, 1, 1), list(range(40)), None),  # 1x1 maps enlarged to label-wide tiles
    ((10, 47, 7), [1, 2, 3], None),  # a long map
    ((3, 5, 5), [2], [1.0]),  # one tile
]


@pytest.mark.parametrize(("shape", "channels", "signs"), CASES)
def test_grid_layers_give_the_laid_out_grid_in_every_colormap(shape, channels, signs):
    maps = np.random.default_rng(len(channels)).standard_normal(shape).astype(np.float32)
    for scale in render.SCALES:
        for background in ((255, 255, 255), (14, 17, 23)):
            layers = grid_layers(
                torch.from_numpy(maps), channels, scale=scale, signs=signs, background=background
            )
            assert layers.indices.dtype == np.uint8
            assert layers.colours.shape == (int(layers.fixed.sum()), 3)
            for cmap in render.COLORMAPS:
                expected = render.laid_out_grid(
                    maps, channels, cmap=cmap, scale=scale, signs=signs, background=background
                )
                assert np.array_equal(layers.coloured(cmap), expected), (scale, cmap)


def test_only_gaps_and_labels_are_fixed():
    """The fixed pixels are few (gaps and label boxes), and a tile's pixels outside its label
    change with the colormap."""
    maps = np.random.default_rng(0).standard_normal((64, 9, 7)).astype(np.float32)
    layers = grid_layers(maps, list(range(64)))
    assert 0.0 < layers.fixed.mean() < 0.15
    first, second = layers.coloured("viridis"), layers.coloured("magma")
    assert np.array_equal(first[layers.fixed], second[layers.fixed])
    assert (first[~layers.fixed] != second[~layers.fixed]).any(axis=-1).mean() > 0.9
