"""Regenerate the README's feature-visualization picture (assets/visualization.png): channels of
the bundled efficientnet_lite0 (offline, trained weights) and one class, each labelled with the
activation it reaches against the best of the sample photo.

Usage:  python scripts/visualization_picture.py [OUTPUT.png] [--steps 256]
About a minute per picture on a 2-core CPU.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from PIL import Image, ImageDraw

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import hookviz  # noqa: E402

CHANNELS = (("blocks.3", 20), ("blocks.4", 48), ("blocks.5", 7), ("blocks.6", 42))
CLASS = "goldfish"
LABEL = 36  # pixels of caption under each picture


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("output", nargs="?", default=str(ROOT / "assets" / "visualization.png"))
    parser.add_argument("--steps", type=int, default=256)
    args = parser.parse_args()

    loaded = hookviz.load_model("efficientnet_lite0")
    photo = hookviz.sample_image()
    tiles = []
    for layer, channel in CHANNELS:
        vis = hookviz.visualize(loaded, layer, channel, steps=args.steps)
        on_photo = float(hookviz.feature_maps(loaded, photo, layer).activations[channel].mean())
        tiles.append(
            (vis.image, f"{layer} #{channel}", f"{vis.activation:.1f} (photo {on_photo:.1f})")
        )
        print(layer, channel, round(vis.activation, 2), round(on_photo, 2), flush=True)
    vis = hookviz.visualize(loaded, target=CLASS, steps=args.steps)
    tiles.append((vis.image, f"class: {CLASS}", f"logit {vis.activation:.1f}"))

    size = tiles[0][0].width
    sheet = Image.new("RGB", (size * len(tiles), size + LABEL), "white")
    draw = ImageDraw.Draw(sheet)
    for index, (picture, title, value) in enumerate(tiles):
        sheet.paste(picture, (index * size, 0))
        draw.text((index * size + 6, size + 3), title, fill="black")
        draw.text((index * size + 6, size + 19), value, fill=(90, 90, 90))
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    sheet.save(args.output, optimize=True)
    print(args.output)


if __name__ == "__main__":
    main()
