"""LeGrad's time against TorchCAM's ``LeGrad`` on a torchvision ViT-B/16, on the same input,
class and blocks (all twelve), with random weights (the head and class token drawn from a
normal distribution: torchvision starts them at zero, which makes every map blank).

    python bench/bench_legrad.py [--repeats 3]

Prints each side's median time, their ratio (TorchCAM / hookviz) and the Pearson r of the two
maps, then the time of a plain forward pass of the model for scale (``grad_cam`` runs LeGrad on
a forward pass of its own, which also gives the target: one forward pass in all, as TorchCAM's).
Nothing asserts: the test suite checks the numbers (tests/test_legrad.py).
"""

from __future__ import annotations

import argparse
import copy
import os
import platform
import random
import statistics
import time

import numpy as np
import torch
from torchcam.methods import LeGrad

import hookviz

BLOCKS = [f"encoder.layers.encoder_layer_{i}" for i in range(12)]
SEED = 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    loaded = hookviz.load_model("vit_b_16", pretrained=False, device="cpu")
    with torch.no_grad():
        generator = torch.Generator().manual_seed(SEED)
        head = loaded.model.heads.head.weight
        head.copy_(torch.randn(head.shape, generator=generator) * 0.05)
        token = loaded.model.class_token
        token.copy_(torch.randn(token.shape, generator=generator) * 0.5)
    x = torch.randn(1, 3, 224, 224, generator=torch.Generator().manual_seed(SEED))
    peer = copy.deepcopy(loaded.model).requires_grad_(True).eval()
    target = int(hookviz.predict(loaded, x, k=1)[0].index)

    def ours() -> np.ndarray:
        return hookviz.grad_cam(loaded, x, BLOCKS[-1], target, method="legrad").cam

    def theirs() -> np.ndarray:
        with torch.enable_grad(), LeGrad(peer, BLOCKS) as extractor:
            (cam,) = extractor(target, scores=peer(x))
        return cam[0].detach().numpy()

    def plain_forward() -> None:  # for scale
        with torch.no_grad():
            loaded.model(x)

    mine, reference = ours(), theirs()  # (the warm-up, and the maps compared)
    r = float(np.corrcoef(mine.ravel(), reference.ravel())[0, 1])
    calls = {"hookviz": ours, "TorchCAM": theirs, "plain forward": plain_forward}
    seconds: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(args.repeats):
        order = list(calls)
        random.shuffle(order)
        for name in order:
            started = time.perf_counter()
            calls[name]()
            seconds[name].append(time.perf_counter() - started)
    ratios = [t / h for t, h in zip(seconds["TorchCAM"], seconds["hookviz"], strict=True)]
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} CPU cores; torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads"
    )
    print("vit_b_16 (random weights), a (1, 3, 224, 224) input, all 12 blocks, class", target)
    print(
        f"legrad: hookviz {statistics.median(seconds['hookviz']) * 1000:.1f} ms, TorchCAM "
        f"{statistics.median(seconds['TorchCAM']) * 1000:.1f} ms, "
        f"{statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f}x over "
        f"{args.repeats}), r = {r:.4f}"
    )
    plain = statistics.median(seconds["plain forward"])
    print(f"a plain forward pass of the model (no gradient): {plain * 1000:.1f} ms")


if __name__ == "__main__":
    main()
