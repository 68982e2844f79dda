"""What results show in a notebook (``_repr_png_``): the CAM overlay on the analysed picture,
the feature-map grid, both side by side for an ``Analysis``; and the lazy full-size heatmap
behind them.

Every picture is decoded from its PNG bytes, as Jupyter would receive it, and checked against
what it claims to show (the image, the heatmap, the strongest channels), not against itself.
"""

from __future__ import annotations

import dataclasses
import io

import numpy as np
import pytest
import torch
from PIL import Image

import hookviz
from hookviz import render

from .conftest import random_input

LONG_SIDE = 768  # the notebook pictures' documented cap


def _decode(png: bytes) -> np.ndarray:
    picture = Image.open(io.BytesIO(png))
    assert picture.format == "PNG"
    return np.asarray(picture.convert("RGB"))


def _assert_same_aspect(picture: np.ndarray, height: int, width: int) -> None:
    """Within a pixel of the (height, width) aspect ratio (the resize rounds to whole pixels)."""
    got_h, got_w = picture.shape[:2]
    assert abs(got_h - got_w * height / width) <= 1.0, (got_h, got_w, height, width)


def _assert_is_overlay(picture: np.ndarray, plain: Image.Image, cam: hookviz.GradCAM) -> None:
    """``picture`` is ``plain`` with the CAM's heatmap (on plain's grid) blended over it."""
    base = np.asarray(plain.convert("RGB"), dtype=np.float32)
    assert picture.shape == base.shape
    heat = cam.heatmap_at(base.shape[:2])
    colour = render.colorize(heat, render.DEFAULT_CAM_CMAP).astype(np.float32)
    alpha = render.DEFAULT_ALPHA
    expected = (1 - alpha) * base + alpha * colour
    np.testing.assert_allclose(picture.astype(np.float32), expected, atol=1.0)
    # and the heatmap really changed the picture (a blank overlay would equal the image)
    assert np.abs(picture.astype(np.float32) - base).mean() > 5.0


@pytest.fixture(scope="module")
def big_photo(sample) -> Image.Image:
    """The sample scaled up past the notebook cap (1024x1200), same aspect ratio."""
    return sample.resize((sample.width * 2, sample.height * 2), Image.Resampling.BILINEAR)


# ------------------------------------------------------------------------------ GradCAM


@pytest.mark.slow
def test_cam_picture_of_a_big_photo_is_shrunk_overlay(lite0, big_photo):
    cam = hookviz.grad_cam(lite0, big_photo)
    assert not cam.blank  # a pretrained model on a photo: there is something to draw
    picture = _decode(cam._repr_png_())
    assert max(picture.shape[:2]) <= LONG_SIDE
    assert max(picture.shape[:2]) == LONG_SIDE  # shrunk to the cap, not further
    _assert_same_aspect(picture, big_photo.height, big_photo.width)
    _assert_is_overlay(picture, render.fit_within(big_photo, LONG_SIDE), cam)
    # drawing a 768-pixel copy never needs the full 1200x1024 heatmap
    assert "heatmap" not in cam.__dict__


def test_cam_picture_of_a_small_photo_keeps_its_size(lite0, sample):
    cam = hookviz.grad_cam(lite0, sample)
    picture = _decode(cam._repr_png_())
    # under the cap: never scaled up, so the overlay is on the photo's own pixels
    assert picture.shape[:2] == (sample.height, sample.width)
    _assert_is_overlay(picture, sample, cam)


@pytest.mark.parametrize("size", [(96, 160), (64, 1000)])
def test_cam_from_a_tensor_draws_over_what_the_model_saw(lite0, size):
    x = random_input(*size, seed=11)
    cam = hookviz.grad_cam(lite0, x)
    # the picture a tensor brings is the tensor with its normalisation undone
    seen = lite0.preprocessing.to_picture(x)
    assert cam.image is not None
    assert np.array_equal(np.asarray(cam.image), np.asarray(seen))
    picture = _decode(cam._repr_png_())
    assert max(picture.shape[:2]) <= LONG_SIDE
    _assert_same_aspect(picture, *size)
    _assert_is_overlay(picture, render.fit_within(seen, LONG_SIDE), cam)


def test_cam_without_a_picture_draws_its_heatmap_alone(lite0):
    cam = dataclasses.replace(hookviz.grad_cam(lite0, random_input(96, 160, seed=2)), image=None)
    picture = _decode(cam._repr_png_())
    assert picture.shape[:2] == cam.size  # 96x160 is under the cap
    expected = render.colorize(cam.heatmap_at(cam.size), render.DEFAULT_CAM_CMAP)
    assert np.array_equal(picture, expected)


# ------------------------------------------------------------------------------ heatmap


def test_heatmap_is_lazy_and_equals_heatmap_at_its_size(lite0, sample):
    cam = hookviz.grad_cam(lite0, sample)
    assert not cam.blank
    # not computed with the result: only on first read
    assert "heatmap" not in cam.__dict__
    small = cam.heatmap_at((37, 53))
    assert "heatmap" not in cam.__dict__  # another grid does not fill the full-size one
    heat = cam.heatmap
    assert "heatmap" in cam.__dict__ and cam.heatmap is heat  # kept after the first read
    assert heat.shape == cam.size == (sample.height, sample.width)
    assert np.array_equal(heat, cam.heatmap_at(cam.size))

    assert small.shape == (37, 53) and small.dtype == np.float32
    assert small.min() >= 0.0 and small.max() <= 1.0
    assert small.max() == 1.0  # scaled after upsampling, so the peak is exactly 1

    # a quarter-size grid is the full map seen coarser: average 4x4 blocks of the full map
    height, width = cam.size
    quarter = cam.heatmap_at((height // 4, width // 4))
    pooled = heat[: height // 4 * 4, : width // 4 * 4]
    pooled = pooled.reshape(height // 4, 4, width // 4, 4).mean(axis=(1, 3))
    assert np.corrcoef(pooled.ravel(), quarter.ravel())[0, 1] > 0.99


# -------------------------------------------------------------------------- FeatureMaps


def test_feature_grid_picture_shows_the_strongest_channels_first(lite0, sample):
    features = hookviz.feature_maps(lite0, sample)
    activations = features.activations
    channels, height, width = activations.shape
    assert channels > render.DEFAULT_CHANNELS  # so the picture has to choose
    picture = _decode(features._repr_png_())
    assert max(picture.shape[:2]) <= LONG_SIDE

    zoom = render.tile_zoom(height, width)
    tile_h, tile_w = height * zoom, width * zoom
    cols = render.grid_columns(render.DEFAULT_CHANNELS)
    rows = -(-render.DEFAULT_CHANNELS // cols)
    # a 9x7 map's grid fits under the cap, so it is drawn at full size
    assert picture.shape[:2] == (rows * tile_h + (rows - 1) * 2, cols * tile_w + (cols - 1) * 2)

    # the first two tiles are the two channels with the largest means (computed here)
    means = activations.mean(dim=(1, 2))
    strongest = torch.argsort(means, descending=True, stable=True)[:2].tolist()
    for position, channel in enumerate(strongest):
        left = position * (tile_w + 2)
        tile = picture[:tile_h, left : left + tile_w]
        scaled = render.normalise_maps(activations[channel][None].numpy())[0]
        expected = render.colorize(
            scaled.repeat(zoom, axis=0).repeat(zoom, axis=1), render.DEFAULT_GRID_CMAP
        )
        # the lower half only: the channel label covers the tile's top-left corner
        assert np.array_equal(tile[tile_h // 2 :], expected[tile_h // 2 :]), channel


def test_feature_grid_picture_of_a_big_map_is_shrunk(resnet18):
    features = hookviz.feature_maps(resnet18, random_input(224, 224, seed=1), "conv1")
    # 64 channels of 112x112 at one pixel per cell would be 910 pixels wide
    assert render.tile_zoom(112, 112) == 1
    picture = _decode(features._repr_png_())
    assert max(picture.shape[:2]) <= LONG_SIDE
    _assert_same_aspect(picture, 8 * 112 + 7 * 2, 8 * 112 + 7 * 2)
    assert picture.std() > 0  # not a blank square


# ----------------------------------------------------------------------------- Analysis


def test_analysis_picture_is_overlay_and_grid_side_by_side(lite0, sample):
    analysis = hookviz.analyze(lite0, sample)
    overlay = _decode(analysis.cam._repr_png_())
    grid = _decode(analysis.features._repr_png_())
    both = _decode(analysis._repr_png_())
    height, width = overlay.shape[:2]
    assert both.shape[0] == height
    assert both.shape[1] > width + 2  # the overlay, a white gap, then something more
    # the left part is exactly the CAM's own picture
    assert np.array_equal(both[:, :width], overlay)
    # the right part is the grid scaled to the same height, its aspect ratio kept
    right = both[:, width:]
    white = np.all(right == 255, axis=(0, 2))
    start = int(np.argmin(white))  # first column that is not all white: the grid starts
    assert 0 < start <= 16
    grid_part = right[:, start:]
    assert abs(grid_part.shape[1] - grid.shape[1] * height / grid.shape[0]) <= 1.0
    # nearest-neighbour scaling keeps the grid's colours: every colour drawn there is one of the
    # grid's own
    grid_colours = {tuple(p) for p in grid.reshape(-1, 3)}
    sampled = grid_part[:: max(1, height // 50), :: max(1, grid_part.shape[1] // 50)]
    assert {tuple(p) for p in sampled.reshape(-1, 3)} <= grid_colours
    assert "heatmap" not in analysis.cam.__dict__


# ----------------------------------------------------------------------------- Overview


def test_overview_picture_is_each_stages_overlay_in_order(lite0, sample):
    found = hookviz.overview(lite0, sample)
    picture = _decode(found._repr_png_())
    canvas = render.fit_within(sample.convert("RGB"), render.OVERVIEW_TILE)
    tile_w, tile_h = canvas.width, canvas.height
    assert picture.shape[1] == len(found) * tile_w + (len(found) - 1) * 4  # one row of stages
    for position, stage in enumerate(found):
        left = position * (tile_w + 4)
        expected = render.overlay(canvas, stage.cam.heatmap_at((tile_h, tile_w)))
        assert np.array_equal(picture[:tile_h, left : left + tile_w], np.asarray(expected))
        caption = picture[tile_h:, left : left + tile_w]
        assert (caption < 128).any()  # its layer's name, in black under it
