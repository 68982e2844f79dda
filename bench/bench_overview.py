"""The whole network at a glance against one layer sweep: ``hookviz.overview`` adds each
stage's shape, receptive field and strongest channels' maps to the Grad-CAMs ``layer_sweep``
computes from the same forward and backward pass.

    python bench/bench_overview.py            # about a minute on a 2-core CPU

For the bundled EfficientNet-Lite0 and a random-weight ResNet-50, on the sample photo and on
the same photo resized to 3000x2000: the median of ``--repeats`` calls of each (after a
warm-up), the same stages and class. Torch runs on one thread (``--threads``). The ratio is
what to read; the target is at most 1.5x.
"""

from __future__ import annotations

import argparse
import functools

import torch

# (run as a script: its own folder, bench/, is the first on the path)
from timing import median_seconds

import hookviz

MODELS = {"efficientnet_lite0": True, "resnet50": False}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    sample = hookviz.sample_image()
    photos = {"sample 512x600": sample, "3000x2000": sample.resize((3000, 2000))}
    print(f"{args.threads} thread(s), median of {args.repeats}")
    print(f"{'model':20} {'photo':15} {'sweep s':>8} {'overview s':>11} {'ratio':>6}")
    for name, pretrained in MODELS.items():
        torch.manual_seed(0)
        loaded = hookviz.load_model(name, pretrained=pretrained, device="cpu")
        for label, photo in photos.items():
            target = hookviz.predict(loaded, photo)[0].index
            sweep = median_seconds(
                functools.partial(hookviz.layer_sweep, loaded, photo, target=target), args.repeats
            )
            whole = median_seconds(
                functools.partial(hookviz.overview, loaded, photo, target=target), args.repeats
            )
            print(f"{name:20} {label:15} {sweep:8.3f} {whole:11.3f} {whole / sweep:6.2f}")


if __name__ == "__main__":
    main()
