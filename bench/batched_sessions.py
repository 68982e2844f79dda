"""Sessions per second when a class's analyses share batches, and when each runs alone.

N threads (a class's sessions) each ask, at the same moment, for what a student's first view
costs: a hooked forward pass of their own photo at the default layer and the Grad-CAM of its
top-1 class. Alone: one ``ForwardPass`` each (as the page does on a CPU). Batched: through one
``hookviz.Batcher`` (as the page does on a GPU), which runs the requests that arrive within its
window as one forward and one backward. Every batched result is checked against the one alone.

    python bench/batched_sessions.py [--device cuda] [--sessions 32] [--model resnet50]
        [--window-ms 5] [--batch 8] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import threading
import time

import numpy as np

import hookviz


def photos(count: int) -> list:
    """Distinct photos of one size (the sample, cropped and turned a little differently)."""
    base = hookviz.sample_image()
    return [
        base.rotate(3 * index, expand=False).crop((index, index, 400 + index, 300 + index))
        for index in range(count)
    ]


def one_round(loaded, images, batcher) -> tuple[float, list]:
    """Wall time for every session's first view, all asked at once, and the CAMs."""
    cams: list = [None] * len(images)
    start = threading.Barrier(len(images) + 1)

    def session(index: int) -> None:
        start.wait()
        if batcher is None:
            made = hookviz.ForwardPass(loaded, images[index])
        else:
            made = batcher.forward_pass(images[index])
        cams[index] = made.grad_cam()

    threads = [threading.Thread(target=session, args=(i,)) for i in range(len(images))]
    for thread in threads:
        thread.start()
    start.wait()
    began = time.perf_counter()
    for thread in threads:
        thread.join()
    return time.perf_counter() - began, cams


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--sessions", type=int, default=32)
    parser.add_argument("--model", default="efficientnet_lite0")
    parser.add_argument("--weights", choices=("pretrained", "untrained"), default="pretrained")
    parser.add_argument("--window-ms", type=float, default=5.0)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    loaded = hookviz.load_model(
        args.model, pretrained=args.weights == "pretrained", device=args.device
    )
    images = photos(args.sessions)
    one_round(loaded, images[:2], None)  # warm up (the layer table, the kernels)
    alone_times, batched_times, worst = [], [], 0.0
    for _ in range(args.rounds):
        alone, alone_cams = one_round(loaded, images, None)
        batcher = hookviz.Batcher(loaded, window_s=args.window_ms / 1000, max_batch=args.batch)
        batched, batched_cams = one_round(loaded, images, batcher)
        alone_times.append(alone)
        batched_times.append(batched)
        for ours, theirs in zip(batched_cams, alone_cams, strict=True):
            assert ours.class_index == theirs.class_index
            worst = max(worst, float(np.abs(ours.cam - theirs.cam).max()))
    alone, batched = statistics.median(alone_times), statistics.median(batched_times)
    report = {
        "device": str(loaded.device),
        "cpus": os.cpu_count(),
        "model": f"{args.model} ({args.weights})",
        "sessions": args.sessions,
        "window_ms": args.window_ms,
        "max_batch": args.batch,
        "batches": sorted(batcher.batches_run),
        "alone_s": round(alone, 3),
        "batched_s": round(batched, 3),
        "sessions_per_s_alone": round(args.sessions / alone, 2),
        "sessions_per_s_batched": round(args.sessions / batched, 2),
        "speed_up": round(alone / batched, 2),
        "largest_difference_of_a_cam": worst,
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
