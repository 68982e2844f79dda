"""Drawing what a model found over the image: a detector's boxes with their labels, and a
segmenter's regions as outlines. Pictures for the page and for notebooks; drawn on any copy of
the image (a display-size one included), the boxes given in the original image's pixels."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from PIL import Image, ImageDraw, ImageFont

# Colour-blind-safe (Okabe-Ito), one per label, repeating: neighbouring labels differ.
PALETTE = (
    (230, 159, 0),
    (86, 180, 233),
    (0, 158, 115),
    (240, 228, 66),
    (0, 114, 178),
    (213, 94, 0),
    (204, 121, 167),
)
_DIMMED = (200, 200, 200)


def colour(index: int) -> tuple[int, int, int]:
    """The colour of label or category ``index``."""
    return PALETTE[index % len(PALETTE)]


def draw_boxes(
    image: Image.Image,
    detections: Sequence,
    size: tuple[int, int] | None = None,
    highlight: int | None = None,
) -> Image.Image:
    """``image`` with each detection's box and "name score" label.

    Args:
        image: the picture to draw on (a copy is returned).
        detections: objects with ``.box`` (x0, y0, x1, y1), ``.label``, ``.name``, ``.score``
            (``hookviz.Detection``), in the pixels of an image of ``size``.
        size: (width, height) of the image the boxes are in; default ``image``'s own.
        highlight: the position in ``detections`` of the box to stand out (the others thin
            and grey), or None for all alike.
    """
    picture = image.convert("RGB").copy()
    draw = ImageDraw.Draw(picture)
    scale = picture.width / (size or picture.size)[0]
    line = max(2, round(max(picture.size) / 300))
    font = ImageFont.load_default(size=max(11, round(max(picture.size) / 60)))
    order = [i for i in range(len(detections)) if i != highlight]
    order += [] if highlight is None else [highlight]  # the highlighted one on top
    for position in order:
        found = detections[position]
        box = [value * scale for value in found.box]
        dim = highlight is not None and position != highlight
        fill = _DIMMED if dim else colour(found.label)
        width = max(1, line // 2) if dim else (line * 2 if position == highlight else line)
        draw.rectangle(box, outline=fill, width=width)
        if dim:
            continue
        text = f"{found.name} {found.score:.0%}"
        left, top, right, bottom = draw.textbbox((box[0], box[1]), text, font=font)
        lift = bottom - top + 4
        y = box[1] - lift if box[1] - lift >= 0 else box[1]
        draw.rectangle((box[0], y, box[0] + right - left + 6, y + lift), fill=fill)
        draw.text((box[0] + 3, y + 1), text, fill=(0, 0, 0), font=font)
    return picture


def draw_regions(
    image: Image.Image, mask: np.ndarray, categories: Sequence[int], highlight: int | None = None
) -> Image.Image:
    """``image`` with the outline of each category's pixels in ``mask`` (category ids, at any
    size: resized to the picture's without blending), ``highlight``'s thicker and tinted."""
    picture = image.convert("RGB").copy()
    ids = np.asarray(
        Image.fromarray(mask.astype(np.int32)).resize(picture.size, Image.Resampling.NEAREST)
    )
    pixels = np.array(picture)
    for category in categories:
        inside = ids == category
        edge = inside & ~_eroded(inside, 2 if category == highlight else 1)
        if category == highlight:
            tint = np.asarray(colour(category), dtype=np.float32)
            pixels[inside] = (0.7 * pixels[inside] + 0.3 * tint).astype(np.uint8)
        pixels[edge] = colour(category)
    return Image.fromarray(pixels)


def _eroded(inside: np.ndarray, steps: int) -> np.ndarray:
    """The pixels of ``inside`` whose 4 neighbours, ``steps`` times over, are inside too. The
    outside of the image is not inside: a category on the border is outlined along it, and one
    that covers the whole image has the image's border as its outline."""
    kept = inside.copy()
    for _ in range(steps):
        shrunk = kept.copy()
        shrunk[[0, -1], :] = False
        shrunk[:, [0, -1]] = False
        shrunk[1:, :] &= kept[:-1, :]
        shrunk[:-1, :] &= kept[1:, :]
        shrunk[:, 1:] &= kept[:, :-1]
        shrunk[:, :-1] &= kept[:, 1:]
        kept = shrunk
    return kept
