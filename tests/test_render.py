"""Pictures: the grid layout and ordering, colour scales, overlays, file encodings."""

from __future__ import annotations

import base64
import io
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import matplotlib
import numpy as np
import pytest
import torch
from PIL import Image

from hookviz import channel_order, render, stored_colormaps

ROOT = Path(__file__).resolve().parent.parent


def _hot_pixel_maps(channels: int = 6, size: int = 8) -> torch.Tensor:
    maps = torch.zeros(channels, size, size)
    for c in range(channels):
        maps[c, c % size, (2 * c) % size] = float(c + 1)  # channel c: one hot cell, value c + 1
    return maps


def test_grid_places_each_channel_in_order():
    maps = _hot_pixel_maps()
    order = [4, 0, 2]
    grid = render.feature_grid(maps, order, cmap="gray", labels=False)
    zoom = 64 // 8
    tile = 8 * zoom
    assert grid.shape == (2 * tile + 2, 2 * tile + 2, 3)  # 3 tiles -> 2 x 2 grid, 2 px gaps
    for position, channel in enumerate(order):
        top = (position // 2) * (tile + 2)
        left = (position % 2) * (tile + 2)
        tile_pixels = grid[top : top + tile, left : left + tile, 0]
        y, x = np.unravel_index(int(tile_pixels.argmax()), tile_pixels.shape)
        assert (y // zoom, x // zoom) == (channel % 8, (2 * channel) % 8)
        assert tile_pixels.max() == 255  # per-channel scale: every hot cell is white
    # the unused fourth slot stays white padding
    assert (grid[tile + 2 :, tile + 2 :] == 255).all()


def test_shared_scale_keeps_relative_strength():
    maps = _hot_pixel_maps()
    shared = render.normalise_maps(maps.numpy(), "shared")
    per_channel = render.normalise_maps(maps.numpy(), "channel")
    assert shared.max() == 1.0 and shared[0].max() == pytest.approx(1 / 6)
    assert all(per_channel[c].max() == 1.0 for c in range(6))
    flat = render.normalise_maps(np.ones((2, 3, 3)), "channel")
    assert not flat.any()


def test_labels_write_channel_numbers():
    maps = _hot_pixel_maps()
    plain = render.feature_grid(maps, [5], cmap="gray", labels=False)
    labelled = render.feature_grid(maps, [5], cmap="gray", labels=True)
    corner = (slice(0, 14), slice(0, 14))
    assert not np.array_equal(plain[corner], labelled[corner])
    assert np.array_equal(plain[40:, 40:], labelled[40:, 40:])


def test_colorize_matches_matplotlib():
    values = np.linspace(0, 1, 11)
    expected = (matplotlib.colormaps["viridis"](values)[:, :3] * 255).round()
    np.testing.assert_allclose(render.colorize(values, "viridis"), expected, atol=1)
    with pytest.raises(ValueError, match="unknown colormap"):
        render.colorize(values, "no-such-map")


def test_overlay_blends_with_alpha():
    image = Image.new("RGB", (4, 3), (10, 200, 30))
    heat = np.linspace(0, 1, 12, dtype=np.float32).reshape(3, 4)
    colour = render.colorize(heat, "inferno").astype(float)
    assert np.array_equal(np.asarray(render.overlay(image, heat, alpha=0.0)), np.asarray(image))
    np.testing.assert_array_equal(np.asarray(render.overlay(image, heat, alpha=1.0)), colour)
    half = np.asarray(render.overlay(image, heat, alpha=0.5)).astype(float)
    np.testing.assert_allclose(half, (np.asarray(image) + colour) / 2, atol=1)
    with pytest.raises(ValueError, match="does not match"):
        render.overlay(image, heat.T, alpha=0.5)


def test_channel_ordering():
    maps = torch.zeros(4, 2, 2)
    maps[0] = 1.0  # mean 1, max 1
    maps[1, 0, 0] = 3.0  # mean 0.75, max 3
    maps[2] = -1.0
    assert channel_order(maps, "mean") == [0, 1, 3, 2]
    assert channel_order(maps, "max") == [1, 0, 3, 2]
    assert channel_order(maps, "index", 2) == [0, 1]
    assert channel_order(maps, "mean", 99) == [0, 1, 3, 2]
    with pytest.raises(ValueError, match="ordering"):
        channel_order(maps, "loudest")


def test_png_and_npy_round_trip():
    grid = render.feature_grid(_hot_pixel_maps(), list(range(6)))
    decoded = Image.open(io.BytesIO(render.png_bytes(grid)))
    assert decoded.format == "PNG" and np.array_equal(np.asarray(decoded), grid)
    heat = np.random.default_rng(0).random((5, 7), dtype=np.float32)
    assert np.array_equal(np.load(io.BytesIO(render.npy_bytes(heat))), heat)


def test_fit_within_only_shrinks():
    big = Image.new("RGB", (3000, 1000))
    assert render.fit_within(big, 1024).size == (1024, 341)
    small = Image.new("RGB", (100, 50))
    assert render.fit_within(small, 1024) is small


def test_signed_labels_mark_evidence_for_and_against():
    maps = _hot_pixel_maps()
    plain = render.feature_grid(maps, [1, 2], cmap="gray", labels=True)
    signed = render.feature_grid(maps, [1, 2], cmap="gray", labels=True, signs=[0.5, -0.2])
    corner = signed[0:12, 0:12].reshape(-1, 3)
    assert any(tuple(p) == render._POSITIVE_BOX for p in corner)
    second = signed[0:12, 66:78].reshape(-1, 3)
    assert any(tuple(p) == render._NEGATIVE_BOX for p in second)
    assert not np.array_equal(plain, signed)


def test_order_by_weight_sorts_by_magnitude_and_keeps_signs():
    from hookviz.core.features import order_by_weight

    activations = torch.ones(4, 2, 2)
    activations[3] *= 10
    order, values = order_by_weight(activations, np.array([0.1, -0.5, 0.3, 0.05]), "weight")
    assert order == [1, 2, 0, 3] and values[0] == pytest.approx(-0.5)
    order, values = order_by_weight(activations, np.array([0.1, -0.5, 0.3, 0.06]), "weight_x_mean")
    assert order[0] == 3 and values[0] == pytest.approx(0.6)  # 0.06 x mean 10


def test_colormap_indices_and_tables_give_colorize_exactly():
    """What the page's browser-drawn pictures rely on: a colormap's table at each value's index
    is ``colorize`` of the value, at the bin edges and the ends too; the colour bar is the
    table in order."""
    rng = np.random.default_rng(0)
    edges = np.arange(257) / 256
    values = np.concatenate(
        [rng.random(50_000), edges, np.nextafter(edges, -1), np.nextafter(edges, 2), [-0.5, 1.5]]
    ).astype(np.float32)
    indices = render.colormap_indices(values)
    assert indices.dtype == np.uint8 and indices.shape == values.shape
    for cmap in render.COLORMAPS:
        table = render.colormap_table(cmap)
        assert table.shape == (256, 3) and table.dtype == np.uint8
        assert np.array_equal(table[indices], render.colorize(values, cmap)), cmap
        assert np.array_equal(render.colorbar(cmap, 256, 10)[0], table), cmap
    assert len({render.colormap_table(c).tobytes() for c in render.COLORMAPS}) == 8


def _value_set() -> np.ndarray:
    """Random values, every bin edge and its neighbours on both sides, and values outside
    [0, 1] (clipped), as float32: the values a heatmap or a feature map brings."""
    rng = np.random.default_rng(1)
    edges = np.arange(257) / 256
    return np.concatenate(
        [rng.random(20_000), edges, np.nextafter(edges, -1), np.nextafter(edges, 2), [-3, 7]]
    ).astype(np.float32)


def test_the_stored_colormaps_give_matplotlibs_own_colours() -> None:
    """The oracle is matplotlib's colormap itself, asked now: the tables stored so that the
    page need not import matplotlib give the same bytes, in float32 and float64, in any
    shape."""
    values = _value_set()
    for cmap in render.COLORMAPS:
        assert stored_colormaps.stored_table(cmap) is not None, (
            "hookviz/colormap_tables.json is stale: run python scripts/write_colormap_tables.py"
        )
        clipped = np.clip(values.astype(np.float64), 0.0, 1.0)
        expected = matplotlib.colormaps[cmap](clipped, bytes=True)[:, :3]
        assert np.array_equal(render.colorize(values, cmap), expected), cmap
        assert np.array_equal(render.colorize(values.astype(np.float64), cmap), expected), cmap
        square = values[:19_600].reshape(140, 140)
        assert np.array_equal(render.colorize(square, cmap), expected[:19_600].reshape(140, 140, 3))
    # NaN, which matplotlib colours black and no table entry stands for, is matplotlib's
    with_nan = np.array([np.nan, 0.5, 1.0])
    expected = matplotlib.colormaps["inferno"](with_nan, bytes=True)[:, :3]
    assert np.array_equal(render.colorize(with_nan, "inferno"), expected)
    assert (expected[0] == 0).all()


@pytest.fixture
def tables_at(monkeypatch):
    """Point the stored tables at another file (the cache cleared before and after)."""

    def point(path: Path) -> None:
        monkeypatch.setattr(stored_colormaps, "TABLES_PATH", path)
        stored_colormaps._stored.cache_clear()

    yield point
    monkeypatch.undo()
    stored_colormaps._stored.cache_clear()


def test_tables_written_from_another_matplotlib_are_not_used(tmp_path, tables_at) -> None:
    written = json.loads(stored_colormaps.TABLES_PATH.read_text(encoding="utf-8"))
    written["matplotlib"] = "0.0.1"
    wrong = np.zeros((256, 3), np.uint8).tobytes()
    written["tables"] = {name: base64.b64encode(wrong).decode() for name in written["tables"]}
    path = tmp_path / "colormap_tables.json"
    path.write_text(json.dumps(written), encoding="utf-8")
    tables_at(path)
    assert stored_colormaps.stored_table("viridis") is None
    values = _value_set()
    expected = matplotlib.colormaps["viridis"](np.clip(values, 0, 1).astype(np.float64), bytes=True)
    assert np.array_equal(render.colorize(values, "viridis"), expected[:, :3])
    entries = matplotlib.colormaps["viridis"]((np.arange(256) + 0.5) / 256, bytes=True)[:, :3]
    assert np.array_equal(render.colormap_table("viridis"), entries)
    # a missing file: the same
    tables_at(tmp_path / "missing.json")
    assert stored_colormaps.stored_table("inferno") is None
    assert render.colormap_table("inferno").any()


@pytest.mark.slow
def test_the_default_page_draws_without_importing_matplotlib() -> None:
    """A fresh process, as a cold server: the sample photo, the bundled model, an analysis and
    every picture the default page draws, in the page's colormaps; matplotlib stays unimported
    (0.15 s of a cold start)."""
    code = textwrap.dedent(
        """
        import sys
        import hookviz
        from hookviz import colour_layers, render
        image = hookviz.sample_image()
        loaded = hookviz.load_model("efficientnet_lite0", device="cpu")
        analysis = hookviz.analyze(loaded, image, "blocks.5")
        heat = analysis.cam.heatmap
        render.overlay(image, heat, alpha=0.5, cmap="inferno")
        render.heatmap_image(heat, "magma")
        render.colorbar("turbo")
        maps = analysis.features.activations
        render.feature_grid(maps, range(8), cmap="viridis")
        [render.colormap_table(name) for name in render.COLORMAPS]
        print("matplotlib" in sys.modules)
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "False"
