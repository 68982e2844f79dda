"""Turning results into pictures: feature-map grids, heatmaps, overlays, PNG/NPY bytes.

Everything is drawn as whole arrays with one colormap lookup (matplotlib's colormaps, no
figures): 64 matplotlib subplots take 30-55x longer for the same grid. The page's colormaps are
stored tables (``stored_colormaps``): matplotlib is imported only for another colormap.
"""

from __future__ import annotations

import io
import math
from collections.abc import Sequence

import numpy as np
import torch
from PIL import Image, ImageDraw, ImageFont

from .images import fit_within
from .marks import colour
from .stored_colormaps import stored_table

# Perceptually uniform, colour-blind-safe maps first; jet only for those who ask for it.
COLORMAPS = ("viridis", "inferno", "magma", "plasma", "cividis", "turbo", "gray", "jet")
SCALES = ("channel", "shared")

_GAP = 2  # pixels between tiles
_MIN_TILE = 64  # small maps (7x7) are enlarged until their long side has this many pixels
# ... and until their short side can hold a label ("1279+" at the largest font is 34 px wide):
# a 47x7 map of a tall photo would otherwise give 14-pixel tiles under 34-pixel labels.
_MIN_TILE_SHORT = 40
_MAX_ZOOM = 64  # a 1x1 map becomes a 40-pixel square, wide enough for "1279+"
# The display's defaults: what notebooks show (``_repr_png_``), the page's first view and the
# "Reproduce in Python" snippet's settings.
DEFAULT_CHANNELS = 64
DEFAULT_ORDER = "mean"
DEFAULT_SCALE = "channel"
DEFAULT_GRID_CMAP = "viridis"
DEFAULT_CAM_CMAP = "inferno"
DEFAULT_ALPHA = 0.5
_NOTEBOOK_LONG_SIDE = 768


def colorize(values: np.ndarray, cmap: str = "viridis") -> np.ndarray:
    """Map values in [0, 1] to RGB.

    Args:
        values: (..., ) float array in [0, 1] (clipped).
        cmap: a matplotlib colormap name.

    Returns:
        (..., 3) uint8 RGB.
    """
    array = np.asarray(values, dtype=np.float64)
    table = stored_table(cmap)
    if table is not None and np.isfinite(array).all():
        # matplotlib's colours exactly (NaN, which it colours black, goes to matplotlib)
        return table[colormap_indices(array)]
    colormap = _colormap(cmap)
    # matplotlib returns a tuple, not an array, for a single value: colour it as a 1-array
    rgba = colormap(np.clip(array.reshape(-1), 0.0, 1.0), bytes=True)
    return np.ascontiguousarray(rgba[:, :3].reshape(*array.shape, 3))


def colormap_indices(values: np.ndarray) -> np.ndarray:
    """The colormap entry (0-255) ``colorize`` picks for each value in [0, 1], as uint8: with
    ``colormap_table``, ``table[indices] == colorize(values)`` exactly. The page sends these to
    the browser, which then recolours and blends a heatmap itself, without a server run.
    (Finite values only: matplotlib colours NaN black, which no index stands for.)"""
    scaled = np.clip(np.asarray(values, dtype=np.float64), 0.0, 1.0) * 256
    # matplotlib's rule: x * N, truncated; exactly 1.0 is the last entry, not one past it
    return np.minimum(scaled, 255).astype(np.uint8)


def colormap_table(cmap: str) -> np.ndarray:
    """A colormap's 256 entries as (256, 3) uint8 RGB (what ``colorize`` looks up)."""
    table = stored_table(cmap)
    return table.copy() if table is not None else colorize((np.arange(256) + 0.5) / 256, cmap)


def normalise_maps(maps: np.ndarray, scale: str = "channel") -> np.ndarray:
    """Scale (N, h, w) maps to [0, 1], each on its own range or all on one shared range.

    A flat map (no spread) becomes all zeros rather than amplified float noise.
    """
    if scale not in SCALES:
        raise ValueError(f"scale {scale!r} is not one of {SCALES}")
    maps = maps.astype(np.float32, copy=False)
    if maps.size == 0:
        return maps
    axes = (1, 2) if scale == "channel" else None
    low = maps.min(axis=axes, keepdims=True)
    spread = maps.max(axis=axes, keepdims=True) - low
    safe = np.where(spread > 0, spread, 1.0)
    return np.where(spread > 0, (maps - low) / safe, 0.0).astype(np.float32)


def feature_grid(
    activations: torch.Tensor | np.ndarray,
    channels: Sequence[int],
    *,
    cmap: str = "viridis",
    scale: str = "channel",
    labels: bool = True,
    columns: int | None = None,
    background: tuple[int, int, int] = (255, 255, 255),
    signs: Sequence[float] | None = None,
) -> np.ndarray:
    """Tile the chosen channels of a layer into one RGB image.

    Args:
        activations: (C, h, w) feature maps.
        channels: channel indices, in display order.
        cmap: matplotlib colormap name.
        scale: ``"channel"`` (each tile on its own range: shows every channel's pattern) or
            ``"shared"`` (one range: shows which channels are strong).
        labels: write each channel's number in its tile's corner.
        columns: tiles per row (default: a near-square grid).
        background: colour of the gaps and empty slots (match the page's theme).
        signs: one value per tile (e.g. its Grad-CAM weight): the label then ends in "+" on a
            blue box when positive, "−" on an orange box when negative (a colour-blind-safe
            pair), so evidence for and against the class stands out.

    Returns:
        (H, W, 3) uint8 RGB.
    """
    maps = (
        activations.detach().cpu().numpy()
        if isinstance(activations, torch.Tensor)
        else (np.asarray(activations))
    )
    if maps.ndim != 3:
        raise ValueError(f"expected (C, h, w) activations, got shape {maps.shape}")
    if not channels:
        raise ValueError("no channels to draw")
    bad = [c for c in channels if not 0 <= c < maps.shape[0]]
    if bad:
        raise ValueError(f"channels {bad[:5]} out of range 0..{maps.shape[0] - 1}")
    chosen = normalise_maps(maps[list(channels)], scale)
    zoom = tile_zoom(chosen.shape[1], chosen.shape[2])
    # nearest on purpose: each cell of a feature map is one value, not a smooth field
    tiles = colorize(chosen.repeat(zoom, axis=1).repeat(zoom, axis=2), cmap)
    count, tile_h, tile_w, _ = tiles.shape
    cols = columns or math.ceil(math.sqrt(count))
    rows = math.ceil(count / cols)
    grid = np.empty(
        (rows * tile_h + (rows - 1) * _GAP, cols * tile_w + (cols - 1) * _GAP, 3), np.uint8
    )
    grid[:] = background
    for position in range(count):
        top = (position // cols) * (tile_h + _GAP)
        left = (position % cols) * (tile_w + _GAP)
        grid[top : top + tile_h, left : left + tile_w] = tiles[position]
    if labels:
        grid = _label_tiles(grid, channels, cols, tile_h, tile_w, signs)
    return grid


def tile_zoom(height: int, width: int) -> int:
    """How many pixels each feature-map cell gets in a grid tile: the smallest zoom giving a
    64-pixel long side and a label-wide (40-pixel) short side, at most 64."""
    wanted = max(_MIN_TILE / max(height, width), _MIN_TILE_SHORT / min(height, width))
    return max(1, min(_MAX_ZOOM, math.ceil(wanted)))


def laid_out_grid(
    activations: torch.Tensor | np.ndarray,
    channels: Sequence[int],
    *,
    cmap: str = DEFAULT_GRID_CMAP,
    scale: str = "channel",
    signs: Sequence[float] | None = None,
    background: tuple[int, int, int] = (255, 255, 255),
) -> np.ndarray:
    """``feature_grid`` laid out as the page and notebooks show it (``grid_columns``)."""
    return feature_grid(
        activations,
        list(channels),
        cmap=cmap,
        scale=scale,
        columns=grid_columns(len(channels), *activations.shape[1:]),
        background=background,
        signs=None if signs is None else list(signs),
    )


def grid_columns(count: int, height: int = 1, width: int = 1) -> int:
    """Tiles per row the page and notebooks use for ``count`` maps of ``height`` x ``width``
    cells: 8 up to 64 tiles, 16 beyond, for roughly square maps; for long maps (a panorama's
    7x47 maps) as many as make the grid about square, so tiles are not drawn 6 pixels tall."""
    aspect = width / height
    if 0.5 <= aspect <= 2.0:
        return min(count, 8 if count <= 64 else 16)
    return max(1, min(count, round(math.sqrt(count / aspect))))


def colorbar(cmap: str = "inferno", width: int = 256, height: int = 12) -> np.ndarray:
    """A horizontal colour bar from 0 (left) to 1 (right): (height, width, 3) uint8 RGB."""
    ramp = np.linspace(0.0, 1.0, width, dtype=np.float32)
    return np.ascontiguousarray(np.broadcast_to(colorize(ramp, cmap), (height, width, 3)))


def heatmap_image(heatmap: np.ndarray, cmap: str = "inferno") -> Image.Image:
    """A (H, W) heatmap in [0, 1] as an RGB image."""
    return Image.fromarray(colorize(heatmap, cmap))


def overlay(
    image: Image.Image, heatmap: np.ndarray, *, alpha: float = 0.5, cmap: str = "inferno"
) -> Image.Image:
    """Blend a coloured heatmap over the image: ``(1 - alpha) * image + alpha * colour``.

    Args:
        image: the original RGB image, (W, H) = heatmap's (W, H).
        heatmap: (H, W) in [0, 1].
        alpha: heatmap opacity in [0, 1].
        cmap: matplotlib colormap name.
    """
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must be in [0, 1], got {alpha}")
    if heatmap.shape != (image.height, image.width):
        raise ValueError(
            f"heatmap shape {heatmap.shape} does not match the image ({image.height}, "
            f"{image.width})"
        )
    return blend(image, Image.fromarray(colorize(heatmap, cmap)), alpha)


def blend(image: Image.Image, colour: Image.Image, alpha: float) -> Image.Image:
    """``(1 - alpha) * image + alpha * colour`` for two RGB images of one size (an already
    coloured heatmap: an opacity change then costs the blend alone).

    Pillow's blend works on the 8-bit pixels in C: 10x faster than the same sum in float32
    numpy (1.5 vs 15 ms at 512x600), which matters for an opacity slider.
    """
    base = image if image.mode == "RGB" else image.convert("RGB")
    return Image.blend(base, colour, alpha)


def png_bytes(picture: Image.Image | np.ndarray, compress_level: int = 1) -> bytes:
    """Encode an image (PIL or (H, W, 3) uint8 array) as PNG (lossless).

    Level 1 by default: on a 512x600 photo it encodes in about a fifth of the time of Pillow's
    default level 6 for a file about 10% larger, and this runs on every page update.
    """
    image = picture if isinstance(picture, Image.Image) else Image.fromarray(picture)
    buffer = io.BytesIO()
    image.save(buffer, format="PNG", compress_level=compress_level)
    return buffer.getvalue()


def jpeg_bytes(picture: Image.Image | np.ndarray, quality: int = 90) -> bytes:
    """Encode an image as JPEG: for photos on screen (about 0.2 ms for 224 px against 4-19 ms
    for PNG); downloads and feature maps stay PNG."""
    image = picture if isinstance(picture, Image.Image) else Image.fromarray(picture)
    buffer = io.BytesIO()
    image.convert("RGB").save(buffer, format="JPEG", quality=quality)
    return buffer.getvalue()


def npy_bytes(array: np.ndarray) -> bytes:
    """Serialise an array in NumPy's ``.npy`` format (loadable with ``np.load``)."""
    buffer = io.BytesIO()
    np.save(buffer, np.asarray(array), allow_pickle=False)
    return buffer.getvalue()


def _colormap(name: str):  # -> matplotlib.colors.Colormap
    import matplotlib

    try:
        return matplotlib.colormaps[name]
    except KeyError as exc:
        raise ValueError(f"unknown colormap {name!r}; try one of {COLORMAPS}") from exc


def label_font(
    channels: Sequence[int], tile_h: int, tile_w: int, signed: bool
) -> ImageFont.ImageFont | ImageFont.FreeTypeFont:
    """The largest font (13 px at most, 7 at least) whose widest label, in its box, fits the
    tile's width. (It depends on the first of the longest labels only.)"""
    widest = max((str(c) for c in channels), key=len) + ("+" if signed else "")
    for size in range(max(7, min(13, tile_h // 7)), 6, -1):
        font = ImageFont.load_default(size=size)
        left, _, right, _ = font.getbbox(widest)
        if right - left + 6 <= tile_w:
            return font
    return font


_POSITIVE_BOX = (0, 90, 181)  # blue
_NEGATIVE_BOX = (220, 50, 32)  # orange-red


def _label_tiles(
    grid: np.ndarray,
    channels: Sequence[int],
    cols: int,
    tile_h: int,
    tile_w: int,
    signs: Sequence[float] | None = None,
) -> np.ndarray:
    picture = Image.fromarray(grid)
    draw_labels(ImageDraw.Draw(picture), channels, cols, tile_h, tile_w, signs)
    return np.asarray(picture)


def draw_labels(
    draw: ImageDraw.ImageDraw,
    channels: Sequence[int],
    cols: int,
    tile_h: int,
    tile_w: int,
    signs: Sequence[float] | None = None,
    font: ImageFont.ImageFont | ImageFont.FreeTypeFont | None = None,
    margin: int = 0,
) -> list[tuple[int, int, int, int] | None]:
    """Write each tile's channel number (and sign) in its corner, on a box.

    ``font``: the one these channels get (``label_font``) unless given; ``margin``: how far
    down and right of the picture's corner the first tile is. Returns each position's box
    (left, top, right, bottom, inclusive), None where the label is left out (it cannot fit)."""
    font = font or label_font(channels, tile_h, tile_w, signs is not None)
    drawn: list[tuple[int, int, int, int] | None] = []
    for position, channel in enumerate(channels):
        left = margin + (position % cols) * (tile_w + _GAP)
        top = margin + (position // cols) * (tile_h + _GAP)
        text, fill = str(channel), (0, 0, 0)
        if signs is not None:
            positive = signs[position] >= 0
            text += "+" if positive else "−"
            fill = _POSITIVE_BOX if positive else _NEGATIVE_BOX
        box = draw.textbbox((left + 2, top + 1), text, font=font)
        if box[2] + 2 > left + tile_w:
            drawn.append(None)
            continue  # a label that cannot fit its tile is left out
        # a dark box behind white text stays readable on every colormap
        rectangle = (box[0] - 2, box[1] - 1, box[2] + 2, box[3] + 1)
        draw.rectangle(rectangle, fill=fill)
        draw.text((left + 2, top + 1), text, fill=(255, 255, 255), font=font)
        drawn.append(rectangle)
    return drawn


# ---------------------------------------------------------------- results drawing themselves


def grid_picture_png(features) -> bytes:
    """A ``FeatureMaps`` as the page first shows it: the 64 strongest channels by mean."""
    order = features.channel_order(DEFAULT_ORDER, DEFAULT_CHANNELS)
    grid = laid_out_grid(features.activations, order)
    return png_bytes(fit_within(Image.fromarray(grid), _NOTEBOOK_LONG_SIDE))


def cam_picture(cam) -> Image.Image:
    """A ``GradCAM`` over the picture it explains (or its heatmap alone if it has none), at
    most 768 pixels on the long side."""
    if cam.image is None:
        size = _fit_size(cam.size, _NOTEBOOK_LONG_SIDE)
        return heatmap_image(cam.heatmap_at(size), DEFAULT_CAM_CMAP)
    picture = fit_within(cam.image.convert("RGB"), _NOTEBOOK_LONG_SIDE)
    heat = cam.heatmap_at((picture.height, picture.width))
    return overlay(picture, heat, alpha=DEFAULT_ALPHA, cmap=DEFAULT_CAM_CMAP)


def cam_picture_png(cam) -> bytes:
    """``cam_picture`` as PNG bytes."""
    return png_bytes(cam_picture(cam))


def analysis_picture_png(analysis) -> bytes:
    """An ``Analysis``: its CAM overlay and its feature-map grid side by side, same height."""
    left = cam_picture(analysis.cam)
    right = Image.open(io.BytesIO(grid_picture_png(analysis.features))).convert("RGB")
    right = right.resize(
        (max(1, round(right.width * left.height / right.height)), left.height),
        Image.Resampling.NEAREST,
    )
    both = Image.new("RGB", (left.width + _GAP * 4 + right.width, left.height), "white")
    both.paste(left, (0, 0))
    both.paste(right, (left.width + _GAP * 4, 0))
    return png_bytes(both)


def concepts_overlay(
    image: Image.Image, heatmaps: np.ndarray, *, alpha: float = 0.7
) -> Image.Image:
    """Concepts coloured over the image: each pixel in the colour of its strongest concept
    there (``marks.colour(j)`` for concept j, as pytorch-grad-cam's DFF pictures give each
    pixel to one concept), at an opacity of ``alpha`` times that concept's value (where no
    concept is strong the photo shows through).

    Args:
        image: the picture, (W, H) = the heatmaps' (W, H).
        heatmaps: (k, H, W) in [0, 1].
    """
    if heatmaps.shape[1:] != (image.height, image.width):
        raise ValueError(
            f"heatmaps of shape {heatmaps.shape[1:]} do not match the image ({image.height}, "
            f"{image.width})"
        )
    colours = np.array([colour(j) for j in range(len(heatmaps))], dtype=np.float32)  # (k, 3)
    strongest = heatmaps.argmax(axis=0)
    opacity = alpha * np.take_along_axis(heatmaps, strongest[None], axis=0)[0][..., None]
    base = np.asarray(image.convert("RGB"), dtype=np.float32)
    blended = (1 - opacity) * base + opacity * colours[strongest]
    return Image.fromarray(np.clip(blended + 0.5, 0, 255).astype(np.uint8))


def concepts_picture(found) -> Image.Image:
    """A ``Concepts`` over the picture it was found in (its concepts' colours alone on grey
    if it has none), at most 768 pixels on the long side."""
    picture = _notebook_canvas(found.image, found.size)
    return concepts_overlay(picture, found.heatmaps_at((picture.height, picture.width)))


# The share of the largest magnitudes a signed map lets saturate (as ``display_map`` does).
SIGNED_OUTLIER_SHARE = 0.005


def signed_scale(values: np.ndarray) -> float:
    """The magnitude a signed map's colours saturate at: the value below which all but the
    largest ``SIGNED_OUTLIER_SHARE`` of the magnitudes lie (1.0 for an all-zero map)."""
    magnitude = np.abs(values[np.isfinite(values)])
    if magnitude.size == 0:
        return 1.0
    scale = float(np.quantile(magnitude, 1 - SIGNED_OUTLIER_SHARE))
    return scale if scale > 0 else float(magnitude.max()) or 1.0


def relevance_overlay(
    image: Image.Image, heatmap: np.ndarray, *, alpha: float = 0.8, scale: float | None = None
) -> Image.Image:
    """A signed map over the image: red where it is positive (relevance for the score), blue
    where negative (against), at an opacity of ``alpha`` times the square root of its
    magnitude over ``scale`` (default ``signed_scale``): where it is near zero the photo shows
    through, and weak relevance, which LRP spreads thin, still shows.

    Args:
        image: the picture, (W, H) = the heatmap's (W, H).
        heatmap: (H, W), signed.
    """
    if heatmap.shape != (image.height, image.width):
        raise ValueError(
            f"heatmap shape {heatmap.shape} does not match the image ({image.height}, "
            f"{image.width})"
        )
    scale = signed_scale(heatmap) if scale is None else scale
    share = np.clip(np.nan_to_num(heatmap) / scale, -1, 1)[..., None].astype(np.float32)
    red, blue = np.array([220, 30, 30], np.float32), np.array([30, 80, 230], np.float32)
    colours = np.where(share >= 0, red, blue)
    opacity = alpha * np.sqrt(np.abs(share))
    base = np.asarray(image.convert("RGB"), dtype=np.float32)
    blended = (1 - opacity) * base + opacity * colours
    return Image.fromarray(np.clip(blended + 0.5, 0, 255).astype(np.uint8))


def relevance_picture(found) -> Image.Image:
    """A ``Relevance`` over the picture it was computed for (on grey if it has none), at most
    768 pixels on the long side."""
    picture = _notebook_canvas(found.image, found.size)
    return relevance_overlay(picture, found.heatmap_at((picture.height, picture.width)))


OVERVIEW_TILE = 200  # the long side of each stage's picture in an overview's notebook picture
OVERVIEW_PER_ROW = 6
_CAPTION_HEIGHT = 18


def overview_picture(found) -> Image.Image:
    """An ``Overview``: each stage's Grad-CAM over the picture, in execution order, its
    layer's name under it, ``OVERVIEW_PER_ROW`` to a row on white."""
    size = found.stages[0].cam.size if found.stages else (1, 1)
    canvas = _notebook_canvas(found.image, size, OVERVIEW_TILE)
    tile_w, tile_h = canvas.width, canvas.height + _CAPTION_HEIGHT
    count = len(found.stages)
    cols = max(1, min(OVERVIEW_PER_ROW, count))
    rows = max(1, -(-count // cols))
    sheet = Image.new(
        "RGB", (cols * tile_w + (cols - 1) * 4, rows * tile_h + (rows - 1) * 4), "white"
    )
    draw = ImageDraw.Draw(sheet)
    font = ImageFont.load_default(size=12)
    for position, stage in enumerate(found.stages):
        left = (position % cols) * (tile_w + 4)
        top = (position // cols) * (tile_h + 4)
        heat = stage.cam.heatmap_at((canvas.height, canvas.width))
        sheet.paste(overlay(canvas, heat), (left, top))
        draw.text((left + 2, top + canvas.height + 2), stage.layer, fill=(0, 0, 0), font=font)
    return sheet


def _notebook_canvas(
    image: Image.Image | None, size: tuple[int, int], longest: int = _NOTEBOOK_LONG_SIDE
) -> Image.Image:
    """What a result's notebook picture is drawn on: the analysed image, or grey of its
    ``size`` (H, W) without one, at most ``longest`` pixels on the long side."""
    if image is None:
        height, width = _fit_size(size, longest)
        return Image.new("RGB", (width, height), (128, 128, 128))
    return fit_within(image.convert("RGB"), longest)


def _fit_size(size: tuple[int, int], longest: int) -> tuple[int, int]:
    height, width = size
    scale = min(1.0, longest / max(height, width))
    return max(1, round(height * scale)), max(1, round(width * scale))
