"""The cost estimates the page shows before a slow job, against the job's real time.

    python bench/bench_estimates.py                  # about 6 minutes on a 2-core CPU
    python bench/bench_estimates.py --json estimates.json --models efficientnet_lite0

For each model (the bundled, trained EfficientNet-Lite0 and a random-weight torchvision
ResNet-18) and each photo (the sample photo, 512x600, and the same photo resized to 3000x2000):

- every CAM method of ``hookviz.METHODS``: a fresh ``ForwardPass`` per method (so nothing
  cached hides the cost), ``method_cost(method).seconds`` asked on it before anything else runs
  (what a page gets on a new image: no backward timed yet), then once one backward pass of
  another class has run (what a page gets once it has drawn one Grad-CAM), then the method's
  real time (``grad_cam`` of the top class) on a pass of its own (an estimate may have run
  the top class's backward). The fast methods run at the model's last layer, the four slow
  ones (a forward pass per channel or per sample) at a layer of few channels (Lite0
  ``blocks.2``, 40 channels; ResNet-18 ``layer1``, 64), SS-CAM and IS-CAM with 1 sample
  instead of 35 and 10: at the last layer (1280 and 512 channels) with their defaults they take
  many minutes each here. Their passes are linear in the channels and samples, and the
  estimate is asked with the same options;
- what the Methods page estimates with ``hookviz/app/pages/method_estimates.py``, on the page's own
  display-size image (at most 1024 pixels): the slow pixel attributions (``slow_seconds``,
  with fewer steps, windows and masks than their defaults: ``PIXEL_OPTIONS``), one Grad-CAM
  map's quick faithfulness scores (``scores_seconds``), ROAD scores (``road_seconds``: of a
  Grad-CAM map and of a saliency map, whose scattered pixels impute differently) and the
  sanity check of Grad-CAM (``sanity_seconds``).

Torch runs on one thread by default (``--threads``): on a shared 2-core machine two threads
wait on each other at every op, and the same forward pass measured 1-4.6 s with two threads and
0.2-0.3 s with one while other jobs ran. The estimates time their passes in the same process
as the jobs, so the ratio compares like with like either way.

"ratio" is the real time divided by the estimate (above 1: the job took longer than said). One
run, no repeats: the point is the factor, not the millisecond. Nothing here asserts.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import hookviz
from hookviz import render
from hookviz.app.pages import method_estimates
from hookviz.insight.faithfulness import road_imputation_seconds

# model -> (pretrained, layer of the fast methods, layer of the slow ones)
MODELS = {
    "efficientnet_lite0": (True, "bn2", "blocks.2"),
    "resnet18": (False, "layer4", "layer1"),
}
SLOW_OPTIONS = {"sscam": {"num_samples": 1}, "iscam": {"num_samples": 1}}
DISPLAY_LONG_SIDE = 1024  # the Methods page's image (hookviz/app/caches/images.py)
SANITY_STEPS = 6  # the Methods page's
QUICK = ["deletion", "insertion", "average_drop", "increase_in_confidence"]
ROAD = ["road_morf", "road_lerf"]
# The slow pixel attributions with fewer passes than their defaults (50 steps; 2000 masks;
# 16-pixel windows at stride 8 in the photo's pixels, thousands of them): minutes each here.
# Their passes are linear in these, and the estimate is asked with the same options.
PIXEL_OPTIONS = {
    "integrated_gradients": {"steps": 8},
    "occlusion": {"window": 96, "stride": 96},
    "rise": {"masks": 48},
}


def photos() -> dict[str, object]:
    sample = hookviz.sample_image().convert("RGB")
    return {"sample 512x600": sample, "large 3000x2000": sample.resize((3000, 2000))}


def timed(call) -> tuple[object, float]:
    started = time.perf_counter()
    value = call()
    return value, time.perf_counter() - started


def cam_rows(
    loaded, name: str, photo: str, image, fast: str, slow: str, skip: list[str]
) -> list[dict]:
    rows = []
    for method in (m for m in hookviz.METHODS if m not in skip):
        layer = slow if method in hookviz.SLOW_METHODS else fast
        options = SLOW_OPTIONS.get(method, {})
        try:
            asked = hookviz.ForwardPass(loaded, image, layer)
            cost = asked.method_cost(method, **options)
            asked.grad_cam(asked.predictions[1].index, "gradcam")  # a backward, another class
            warm = asked.method_cost(method, **options)
            # (the estimate may have computed the top class's gradient: time a pass of its own)
            kept = hookviz.ForwardPass(loaded, image, layer)
            _, seconds = timed(lambda k=kept, m=method, o=options: k.grad_cam(None, m, **o))
        except hookviz.HookvizError as exc:
            print(f"{name:20} {photo:16} {method:18} n/a: {exc}"[:120], flush=True)
            continue
        label = method + (f" ({options['num_samples']} samples)" if options else "")
        rows.append(
            _row(name, photo, label, layer, cost.seconds, seconds, warm.seconds, cost.forwards)
        )
    return rows


def page_rows(loaded, name: str, photo: str, image, fast: str) -> list[dict]:
    """The Methods page's estimates, on its display-size image."""
    display = render.fit_within(image, DISPLAY_LONG_SIDE)
    kept = hookviz.ForwardPass(loaded, display, fast)
    rows = []
    gradcam, own = timed(lambda: kept.grad_cam(None, "gradcam"))
    for method, options in PIXEL_OPTIONS.items():
        said = method_estimates.slow_seconds(kept, method, **options)
        _, seconds = timed(lambda m=method, o=options: hookviz.attribute(loaded, display, m, **o))
        shown = ", ".join(f"{k} {v}" for k, v in options.items())
        rows.append(_row(name, photo, f"{method} ({shown})", "input", said, seconds))
    said = method_estimates.scores_seconds(kept)
    _, seconds = timed(lambda: hookviz.faithfulness(loaded, display, gradcam.heatmap, None, QUICK))
    rows.append(_row(name, photo, "quick scores, one map", "input", said, seconds))
    imputation = road_imputation_seconds(loaded, display)
    said = method_estimates.road_seconds(kept, imputation)
    _, seconds = timed(lambda: hookviz.faithfulness(loaded, display, gradcam.heatmap, None, ROAD))
    rows.append(_row(name, photo, "ROAD, a Grad-CAM map", "input", said, seconds))
    saliency = hookviz.attribute(loaded, display, "saliency", None).map
    _, seconds = timed(lambda: hookviz.faithfulness(loaded, display, saliency, None, ROAD))
    rows.append(_row(name, photo, "ROAD, a saliency map", "input", said, seconds))
    said = method_estimates.sanity_seconds(kept.forward_seconds, own, SANITY_STEPS)
    _, seconds = timed(
        lambda: hookviz.sanity_check(loaded, display, "gradcam", fast, None, steps=SANITY_STEPS)
    )
    rows.append(_row(name, photo, "sanity check, Grad-CAM", fast, said, seconds))
    return rows


def _row(model, photo, method, layer, said, seconds, warm=None, forwards=None) -> dict:
    row = {
        "model": model,
        "photo": photo,
        "method": method,
        "layer": layer,
        "estimate_s": said,
        "estimate_after_a_backward_s": warm,
        "real_s": seconds,
        "ratio": seconds / said if said > 0 else None,
        "forward_passes": forwards,
    }
    warm_text = f"{warm:8.3f}" if warm is not None else " " * 8
    ratio = f"{row['ratio']:6.2f}" if row["ratio"] is not None else "   inf"
    flag = "  <-- off by more than 2x" if row["ratio"] and not 0.5 <= row["ratio"] <= 2 else ""
    print(
        f"{model:20} {photo:16} {method:26} {said:8.3f} {warm_text} {seconds:8.3f} {ratio}{flag}",
        flush=True,
    )
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", nargs="*", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--no-page", action="store_true", help="the CAM methods only")
    parser.add_argument("--skip", nargs="*", default=[], help="CAM methods to leave out")
    parser.add_argument("--page-only", action="store_true", help="the Methods page's jobs only")
    parser.add_argument("--json", type=Path, help="write the rows here")
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads (1 by default: on a shared 2-core machine two threads wait on each "
        "other at every op, and one forward pass measured 1-4.6 s with 2, 0.2-0.3 s with 1)",
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, {platform.machine()}; "
        "columns: estimate s, estimate after a backward s, real s, real / estimate"
    )
    started = time.perf_counter()
    rows = []
    for name in args.models:
        pretrained, fast, slow = MODELS[name]
        loaded = hookviz.load_model(name, pretrained=pretrained)
        for photo, image in photos().items():
            hookviz.ForwardPass(loaded, image, fast).grad_cam()  # warm-up, not counted
            if not args.page_only:
                rows += cam_rows(loaded, name, photo, image, fast, slow, args.skip)
            if not args.no_page:
                rows += page_rows(loaded, name, photo, image, fast)
    print(f"in all {time.perf_counter() - started:.0f} s")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
