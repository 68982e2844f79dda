"""A detected box's Grad-CAM: hookviz against pytorch-grad-cam, and hookviz's ForwardPass for
all the boxes of one image.

    pip install -r bench/requirements.txt   # the peer: grad-cam
    python bench/bench_box_cam.py           # about a minute on a 2-core CPU
    python bench/bench_box_cam.py --boxes 10 --repeats 7

Both explain the same boxes of the same random-weight ``fasterrcnn_mobilenet_v3_large_320_fpn``
at the same layer (``backbone.body.16``) and input: a 320x320 picture, which this detector
neither resizes nor pads, so both read the same grid and the heatmaps must agree (Pearson r,
printed: a fast wrong answer cannot win). Each is timed as its user pays it:

- hookviz: ``hookviz.grad_cam(loaded, image, layer, target=detection.target)`` per box, from the
  PIL image (its preprocessing included);
- pytorch-grad-cam: ``GradCAM`` constructed once on an unfrozen deep copy of the model (it needs
  gradients on the weights), then called per box with ``FasterRCNNBoxScoreTarget`` on the
  prepared tensor;
- hookviz ``ForwardPass``: one hooked forward pass, then one backward pass per box.

Each repeat runs the three in a shuffled order after a warm-up; the figures are medians over
repeats, and the ratios are taken within each repeat (shared machines are noisy). Nothing here
asserts.
"""

from __future__ import annotations

import argparse
import copy
import os
import platform
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import hookviz

MODEL = "fasterrcnn_mobilenet_v3_large_320_fpn"
LAYER = "backbone.body.16"
SIZE = 320  # this detector's own size: no resize, no padding inside the model


def picture() -> tuple:
    """The sample photo's top square at 320x320, as a PIL image and as the detector's input
    tensor ((1, 3, 320, 320) in [0, 1]: a torchvision detector normalises inside)."""
    photo = hookviz.sample_image()
    square = photo.crop((0, 0, photo.width, photo.width)).resize((SIZE, SIZE))
    x = torch.from_numpy(np.asarray(square, dtype=np.float32) / 255.0).permute(2, 0, 1)[None]
    return square, x


def pearson(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.corrcoef(a.ravel(), b.ravel())[0, 1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--boxes", type=int, default=5, help="boxes explained per image")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    from pytorch_grad_cam import GradCAM
    from pytorch_grad_cam.utils.model_targets import FasterRCNNBoxScoreTarget

    print("# a box's Grad-CAM: hookviz against pytorch-grad-cam")
    print(f"\ncommand: python bench/bench_box_cam.py {' '.join(sys.argv[1:])}".rstrip())
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} CPU cores; torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads; Python {platform.python_version()}"
    )
    loaded = hookviz.load_model(MODEL, pretrained=False, device="cpu")
    image, x = picture()
    found = hookviz.detect(loaded, image, min_score=0.0)[: args.boxes]
    boxes = len(found)
    print(f"{MODEL} (random weights) at {LAYER}, a {SIZE}x{SIZE} picture, {boxes} boxes")

    # the peer as its documentation shows, set up once (not timed): its own unfrozen copy
    peer_model = copy.deepcopy(loaded.model).requires_grad_(True).eval()
    cam = GradCAM(model=peer_model, target_layers=[peer_model.get_submodule(LAYER)])

    def hookviz_per_box() -> list[np.ndarray]:
        return [hookviz.grad_cam(loaded, image, LAYER, target=d.target).heatmap for d in found]

    def peer_per_box() -> list[np.ndarray]:
        return [
            cam(
                input_tensor=x,
                targets=[FasterRCNNBoxScoreTarget([d.label], torch.tensor([d.box]))],
            )[0]
            for d in found
        ]

    def forward_pass() -> list[np.ndarray]:
        kept = hookviz.ForwardPass(loaded, image, LAYER)
        return [kept.grad_cam(d.target).heatmap for d in found]

    impls: dict[str, Callable[[], list[np.ndarray]]] = {
        "hookviz.grad_cam per box": hookviz_per_box,
        "pytorch-grad-cam per box": peer_per_box,
        "hookviz ForwardPass": forward_pass,
    }
    maps = {name: run() for name, run in impls.items()}  # the warm-up, and the maps compared
    agreement = [
        pearson(ours, theirs)
        for ours, theirs in zip(
            maps["hookviz.grad_cam per box"], maps["pytorch-grad-cam per box"], strict=True
        )
    ]
    same = [
        float(np.abs(a - b).max())
        for a, b in zip(maps["hookviz ForwardPass"], maps["hookviz.grad_cam per box"], strict=True)
    ]
    print(
        f"heatmaps: pytorch-grad-cam against hookviz, Pearson r >= {min(agreement):.4f}; "
        f"ForwardPass against grad_cam, largest difference {max(same):.1e}"
    )

    seconds: dict[str, list[float]] = {name: [] for name in impls}
    order = list(impls)
    for _ in range(args.repeats):
        random.shuffle(order)
        for name in order:
            start = time.perf_counter()
            impls[name]()
            seconds[name].append(time.perf_counter() - start)
    cam.activations_and_grads.release()

    base = seconds["hookviz.grad_cam per box"]
    print(f"\nmedian of {args.repeats} repeats, {boxes} boxes each")
    print("\n| implementation | ms per box | ms for all boxes | x hookviz.grad_cam | range |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for name, times in seconds.items():
        ratios = [t / b for t, b in zip(times, base, strict=True)]
        total = statistics.median(times) * 1000
        print(
            f"| {name} | {total / boxes:.1f} | {total:.1f} | {statistics.median(ratios):.2f}x "
            f"| {min(ratios):.2f}-{max(ratios):.2f}x |"
        )
    peer = statistics.median(
        p / b for p, b in zip(seconds["pytorch-grad-cam per box"], base, strict=True)
    )
    kept = statistics.median(
        k / b for k, b in zip(seconds["hookviz ForwardPass"], base, strict=True)
    )
    print(
        f"\npytorch-grad-cam takes {peer:.2f}x hookviz's time per box; explaining {boxes} "
        f"boxes with one ForwardPass takes {kept:.2f}x the time of {boxes} grad_cam calls"
    )


if __name__ == "__main__":
    main()
