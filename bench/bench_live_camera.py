"""Frames per second the Live camera reaches, without the browser: the page's own frame callback
(``hookviz.app.live_explainer.LiveExplainer.explain_newest``) on camera-like 640x480 YUV frames,
with the bundled model, its default layer and Grad-CAM (issue 43's target: at least 5 frames/s on a
2-core CPU).

    python bench/bench_live_camera.py                      # about 20 s on a 2-core CPU
    python bench/bench_live_camera.py --frames 60 --threads 1 --model resnet18 --device cuda

Each frame costs what it costs on the page: YUV -> RGB, the resize to the model's own size,
``hookviz.analyze`` (one forward, one backward, top-5; the model's lock), the overlay, and the
overlay back to a video frame. No picture is encoded (the frame goes back over WebRTC as it is).

Printed: frames per second by the wall clock, and by this process's CPU time (the work itself:
on a machine other jobs share, the wall clock also measures the queue for the cores; on an idle
2-core machine, one thread's frames per second is about the CPU-time figure), with the median
time of each step. Nothing here asserts.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

import av
import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # (run from a clone)

import hookviz
from hookviz.app.live_explainer import LiveExplainer, LiveSettings


def camera_frames(count: int, width: int = 640, height: int = 480) -> list[av.VideoFrame]:
    """``count`` frames as a browser's camera sends them (YUV 4:2:0): the sample photo panned
    sideways a few pixels a frame, so no two frames are the same."""
    photo = np.asarray(hookviz.sample_image().convert("RGB").resize((width + count, height)))
    return [
        av.VideoFrame.from_ndarray(
            np.ascontiguousarray(photo[:, step : step + width]), format="rgb24"
        ).reformat(format="yuv420p")
        for step in range(count)
    ]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="efficientnet_lite0")
    parser.add_argument("--layer", default=None, help="default: the model's default layer")
    parser.add_argument("--method", default="gradcam")
    parser.add_argument("--frames", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--threads", type=int, help="torch threads (default: torch's)")
    parser.add_argument("--device", default=None, help="default: hookviz.default_device()")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    loaded = hookviz.load_model(args.model, device=args.device)
    layer = args.layer or hookviz.default_layer(loaded)
    explainer = LiveExplainer(LiveSettings(loaded, layer, args.method))
    frames = camera_frames(args.warmup + args.frames)
    for frame in frames[: args.warmup]:
        asyncio.run(explainer.explain_newest([frame]))
    walls, cpus = [], []
    for frame in frames[args.warmup :]:
        wall, cpu = time.perf_counter(), time.process_time()
        asyncio.run(explainer.explain_newest([frame]))
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    latest = explainer.latest()
    print(
        f"{args.model} at {layer}, {args.method}, {loaded.device}, "
        f"{torch.get_num_threads()} torch thread(s); 640x480 frames explained at "
        f"{latest.overlay.width}x{latest.overlay.height}; top-1 {latest.predictions[0].name}"
    )
    print(
        f"{args.frames} frames: {args.frames / sum(walls):.1f} frames/s by the wall clock "
        f"(median {1000 * statistics.median(walls):.0f} ms a frame), "
        f"{args.frames / sum(cpus):.1f} frames/s of CPU time "
        f"(median {1000 * statistics.median(cpus):.0f} ms a frame)"
    )


if __name__ == "__main__":
    main()
