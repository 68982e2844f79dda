"""Each pixel attribution and each newer CAM method against its reference: hookviz's time and
the reference's on the same model, layer, input and target (issue 34).

    pip install -r bench/requirements.txt   # captum, grad-cam (it brings scikit-learn)
    python bench/bench_methods.py           # about 1.5 minutes on a 2-core CPU, more if busy
    python bench/bench_methods.py --json methods.json --repeats 7 --slow-repeats 3
    python bench/bench_methods.py --only smoothgrad "refinecam (layer2-4)" --threads 1 --clock cpu

On the CPU, torch's default threads, a random-weight ``resnet18`` (``hookviz.load_model(...,
pretrained=False)``), one seeded (1, 3, 224, 224) input and a fixed target class:

- pixel attributions: ``hookviz.attribute(loaded, x, method, target=...)`` against Captum's
  class for the method, called as ``tests/test_attributions_reference.py`` calls it, on a deep
  copy of the model with its ReLUs made out-of-place (Captum hooks them): ``Saliency``,
  ``InputXGradient``, ``GuidedBackprop``, ``Deconvolution``, ``GuidedGradCam`` at ``layer4``,
  ``IntegratedGradients`` (50 steps), ``NoiseTunnel`` SmoothGrad over ``Saliency`` (5 samples,
  stdev 1.0) and ``Occlusion`` (32x32 windows, stride 32);
- the CAM methods added in issue 34: ``hookviz.grad_cam(loaded, x, "layer4", target,
  method=...)`` against pytorch-grad-cam's class (``GradCAMElementWise``, ``EigenGradCAM``,
  ``KPCA_CAM``, ``FEM``, ``RandomCAM``, ``AblationCAM``, ``ShapleyCAM``, ``FinerCAM``,
  ``FullGrad``; Grad-CAM with ``eigen_smooth`` and ``aug_smooth``) on a deep copy with
  gradients on, in a ``with`` block per call, with ``ClassifierOutputTarget``, as
  ``tests/test_more_methods.py`` calls it; and against TorchCAM's (``SmoothGradCAMpp``,
  ``SSCAM`` and ``ISCAM`` with ``SAMPLES`` samples on both sides, ``RefineCAM`` over Grad-CAM
  at layer2-4), its generator seeded as hookviz's seed 0 draws, as
  ``tests/test_sampled_methods.py`` calls it.

Each method gets one warm-up call of each implementation (whose results are compared: Pearson r,
printed, so a fast wrong answer cannot win), then ``--repeats`` repeats (``--slow-repeats`` for
integrated gradients, SmoothGrad and occlusion), each running the two in a shuffled order, with a
pause of ``PAUSE`` seconds before each timed call. The times are medians over repeats; the ratio
(reference / hookviz: above 1, hookviz is faster) is the median of the ratios taken within each
repeat (shared machines are noisy). Nothing here asserts.

On a machine other jobs share, wall-clock times measure the queue for the cores as much as the
work (two torch threads on two busy cores wait on each other at every op).``--threads 1
--clock cpu`` times the CPU time of this process instead: the work each side does, on one
thread, whatever else runs.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import random
import statistics
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import hookviz
from hookviz.core import methods

MODEL = "resnet18"
LAYER = "layer4"
TARGET = 243  # a fixed class
SEED = 0
# Seconds of quiet before each timed call. The BLAS and OpenMP threads of the call before keep
# spinning for a while after their work (NumPy's SVD in pytorch-grad-cam, torch's own), and on a
# 2-core machine they slow whatever runs next: hookviz's Eigen-Grad-CAM took 40 ms alone and
# 107 ms right after pytorch-grad-cam's. The pause lets them go idle, before either side.
PAUSE = 0.3
# SS-CAM and IS-CAM run a forward pass per channel per sample (35 and 10 by default: 17,920
# and 5,120 passes at layer4); both sides run this many samples here
SAMPLES = 2
FUSED = ("layer2", "layer3", "layer4")
SLOW = {"integrated_gradients", "smoothgrad", "occlusion", "ablationcam", "gradcam aug_smooth",
        f"sscam ({SAMPLES} samples)", f"iscam ({SAMPLES} samples)"}


@dataclass
class Row:
    method: str
    reference: str
    hookviz_ms: float
    reference_ms: float
    ratio: float  # reference / hookviz, median of the per-repeat ratios
    ratio_min: float
    ratio_max: float
    repeats: int
    pearson_r: float


def captum_peer(loaded: hookviz.LoadedModel) -> torch.nn.Module:
    """The model as Captum gets it: a copy of its own with out-of-place ReLUs."""
    peer = copy.deepcopy(loaded.model).eval()
    for module in peer.modules():
        if isinstance(module, torch.nn.ReLU):
            module.inplace = False
    return peer


def gradcam_peer(loaded: hookviz.LoadedModel) -> torch.nn.Module:
    """The model as pytorch-grad-cam gets it: a copy of its own with gradients on."""
    return copy.deepcopy(loaded.model).requires_grad_(True).eval()


def pearson(a: np.ndarray, b: np.ndarray) -> float:
    a, b = np.ravel(a), np.ravel(b)
    if not a.any() and not b.any():
        return 1.0
    return float(np.corrcoef(a, b)[0, 1])


@contextmanager
def eigen_sign_fixed() -> Iterator[None]:
    """pytorch-grad-cam's ``get_2d_projection`` with hookviz's sign rule applied to its result,
    for the compared (untimed) call only: an SVD's sign is arbitrary, and the reference's ReLU
    after it keeps the other half of the map when the sign comes out the other way."""
    from pytorch_grad_cam import base_cam, eigen_grad_cam

    original = eigen_grad_cam.get_2d_projection

    def fixed(batch: np.ndarray) -> np.ndarray:
        found = original(batch)
        for one in found:
            if np.abs(one.min()) > one.max():
                one *= -1
        return found

    eigen_grad_cam.get_2d_projection = base_cam.get_2d_projection = fixed
    try:
        yield
    finally:
        eigen_grad_cam.get_2d_projection = base_cam.get_2d_projection = original


Pair = tuple[str, str, Callable[[], np.ndarray], Callable[[], np.ndarray]]


def pairs(loaded: hookviz.LoadedModel, x: torch.Tensor) -> list[Pair]:
    """(method, reference's name, hookviz's call, the reference's call), each call returning
    the map that is compared."""
    import pytorch_grad_cam
    from captum import attr as captum_attr
    from pytorch_grad_cam.utils.model_targets import ClassifierOutputTarget

    cpeer = captum_peer(loaded)
    gpeer = gradcam_peer(loaded)

    def ours(method: str, **options) -> Callable:
        return lambda: hookviz.attribute(loaded, x, method, target=TARGET, **options).raw

    def captum(make: Callable, **options) -> Callable:
        return lambda: make().attribute(x, target=TARGET, **options).detach()[0].numpy()

    def smoothgrad() -> np.ndarray:
        torch.manual_seed(SEED)  # hookviz's seed 0 draws the noise this draws
        tunnel = captum_attr.NoiseTunnel(captum_attr.Saliency(cpeer))
        found = tunnel.attribute(x, nt_type="smoothgrad", nt_samples=5, stdevs=1.0, target=TARGET)
        return found.detach()[0].numpy()

    rows = [
        ("saliency", "Captum `Saliency`", ours("saliency"),
         captum(lambda: captum_attr.Saliency(cpeer))),
        ("input_x_gradient", "Captum `InputXGradient`", ours("input_x_gradient"),
         captum(lambda: captum_attr.InputXGradient(cpeer))),
        ("guided_backprop", "Captum `GuidedBackprop`", ours("guided_backprop"),
         captum(lambda: captum_attr.GuidedBackprop(cpeer))),
        ("deconvolution", "Captum `Deconvolution`", ours("deconvolution"),
         captum(lambda: captum_attr.Deconvolution(cpeer))),
        ("guided_gradcam", "Captum `GuidedGradCam`", ours("guided_gradcam", layer=LAYER),
         captum(lambda: captum_attr.GuidedGradCam(cpeer, cpeer.get_submodule(LAYER)))),
        ("integrated_gradients", "Captum `IntegratedGradients`", ours("integrated_gradients"),
         captum(lambda: captum_attr.IntegratedGradients(cpeer))),
        ("smoothgrad", "Captum `NoiseTunnel(Saliency)`", ours("smoothgrad", samples=5),
         smoothgrad),
        ("occlusion", "Captum `Occlusion`", ours("occlusion", window=32, stride=32),
         captum(lambda: captum_attr.Occlusion(cpeer),
                sliding_window_shapes=(3, 32, 32), strides=(3, 32, 32))),
    ]  # fmt: skip

    references = {
        "gradcamelementwise": "GradCAMElementWise",
        "eigengradcam": "EigenGradCAM",
        "kpcacam": "KPCA_CAM",
        "fem": "FEM",
        "randomcam": "RandomCAM",
    }
    for method, name in references.items():
        cam_class = getattr(pytorch_grad_cam, name)

        def theirs(cam_class=cam_class, method=method) -> np.ndarray:
            if method == "randomcam":
                np.random.seed(methods.RANDOMCAM_SEED)  # the weights hookviz draws
            with cam_class(model=gpeer, target_layers=[gpeer.get_submodule(LAYER)]) as cam:
                return cam(input_tensor=x, targets=[ClassifierOutputTarget(TARGET)])[0]

        def mine(method=method) -> np.ndarray:
            return hookviz.grad_cam(loaded, x, LAYER, TARGET, method=method).heatmap

        rows.append((method, f"pytorch-grad-cam `{name}`", mine, theirs))
    return rows + more_cam_pairs(loaded, x, gpeer)


def more_cam_pairs(loaded: hookviz.LoadedModel, x: torch.Tensor, gpeer) -> list[Pair]:
    """The CAM methods that probe the model further, the smoothing options and layer fusion,
    each against its reference (called as the tests call it)."""
    import pytorch_grad_cam
    from pytorch_grad_cam.utils.model_targets import ClassifierOutputTarget
    from torchcam import methods as torchcam_methods

    def grad_cam_peer(name: str, layers=(LAYER,), **call) -> Callable:
        def theirs() -> np.ndarray:
            cam_class = getattr(pytorch_grad_cam, name)
            modules = [] if name == "FullGrad" else [gpeer.get_submodule(n) for n in layers]
            with cam_class(gpeer, modules) as cam:
                if name == "FinerCAM":
                    return cam(input_tensor=x, target_idx=TARGET)[0]
                return cam(input_tensor=x, targets=[ClassifierOutputTarget(TARGET)], **call)[0]

        return theirs

    def torchcam_peer(name: str, **settings) -> Callable:
        def theirs() -> np.ndarray:
            extractor_class = getattr(torchcam_methods, name)
            with extractor_class(gpeer, LAYER, input_shape=(3, 224, 224), **settings) as found:
                with torch.no_grad():
                    gpeer(x)
                torch.manual_seed(SEED)  # the noise hookviz's seed 0 draws
                return found(class_idx=TARGET)[0][0].numpy()

        return theirs

    def refined() -> np.ndarray:
        with torchcam_methods.RefineCAM(
            gpeer, list(FUSED), input_shape=(3, 224, 224), base_method=torchcam_methods.GradCAM
        ) as found:
            scores = gpeer(x)
            return found(TARGET, scores)[0][0].detach().numpy()

    def mine(method: str, layer=LAYER, cam=False, **options) -> Callable:
        def run() -> np.ndarray:
            found = hookviz.grad_cam(loaded, x, layer, TARGET, method=method, **options)
            return found.cam if cam else found.heatmap

        return run

    samples = {"num_samples": SAMPLES}
    return [
        ("ablationcam", "pytorch-grad-cam `AblationCAM`", mine("ablationcam"),
         grad_cam_peer("AblationCAM")),
        ("shapleycam", "pytorch-grad-cam `ShapleyCAM`", mine("shapleycam"),
         grad_cam_peer("ShapleyCAM")),
        ("finercam", "pytorch-grad-cam `FinerCAM`", mine("finercam"), grad_cam_peer("FinerCAM")),
        ("fullgrad", "pytorch-grad-cam `FullGrad`", mine("fullgrad"), grad_cam_peer("FullGrad")),
        ("gradcam eigen_smooth", "pytorch-grad-cam `GradCAM(eigen_smooth=True)`",
         mine("gradcam", eigen_smooth=True), grad_cam_peer("GradCAM", eigen_smooth=True)),
        ("gradcam aug_smooth", "pytorch-grad-cam `GradCAM(aug_smooth=True)`",
         mine("gradcam", aug_smooth=True), grad_cam_peer("GradCAM", aug_smooth=True)),
        ("smoothgradcam++", "TorchCAM `SmoothGradCAMpp`", mine("smoothgradcam++", cam=True),
         torchcam_peer("SmoothGradCAMpp")),
        (f"sscam ({SAMPLES} samples)", f"TorchCAM `SSCAM(num_samples={SAMPLES})`",
         mine("sscam", cam=True, **samples), torchcam_peer("SSCAM", **samples)),
        (f"iscam ({SAMPLES} samples)", f"TorchCAM `ISCAM(num_samples={SAMPLES})`",
         mine("iscam", cam=True, **samples), torchcam_peer("ISCAM", **samples)),
        ("refinecam (layer2-4)", "TorchCAM `RefineCAM(base_method=GradCAM)`",
         mine("gradcam", layer=list(FUSED), cam=True, fuse="refinecam"), refined),
    ]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="repeats of the fast methods")
    parser.add_argument(
        "--slow-repeats", type=int, default=2,
        help="repeats of integrated gradients, SmoothGrad and occlusion",
    )  # fmt: skip
    parser.add_argument("--only", nargs="*", default=None, help="these methods only")
    parser.add_argument("--json", type=Path, help="also write the numbers here")
    parser.add_argument("--threads", type=int, help="torch's threads (default: torch's own)")
    parser.add_argument(
        "--clock", choices=("wall", "cpu"), default="wall",
        help="wall-clock time, or this process's CPU time (with --threads 1 on a shared machine)",
    )  # fmt: skip
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    # Captum's notes that it sets requires_grad and hooks the ReLUs, once per call
    warnings.filterwarnings("ignore", category=UserWarning, module="captum")

    print("# each method against its reference: Captum 0.9, pytorch-grad-cam 1.5.7")
    print(f"\ncommand: python bench/bench_methods.py {' '.join(sys.argv[1:])}".rstrip())
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} CPU cores; torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads; Python {platform.python_version()}; {args.clock} clock"
    )
    loaded = hookviz.load_model(MODEL, pretrained=False, device="cpu")
    x = torch.randn(1, 3, 224, 224, generator=torch.Generator().manual_seed(SEED))
    print(f"{MODEL} (random weights), a (1, 3, 224, 224) input (seed {SEED}), class {TARGET}")

    results: list[Row] = []
    for method, reference, mine, theirs in pairs(loaded, x):
        if args.only and method not in args.only:
            continue
        impls = {"hookviz": mine, "reference": theirs}
        ours = mine()  # the warm-up, and the maps compared
        with eigen_sign_fixed() if "eigen" in method else nullcontext():
            reference_map = theirs()
        r = pearson(ours, reference_map)
        repeats = args.slow_repeats if method in SLOW else args.repeats
        seconds: dict[str, list[float]] = {name: [] for name in impls}
        order = list(impls)
        for _ in range(repeats):
            random.shuffle(order)
            for name in order:
                time.sleep(PAUSE)
                start = clock()
                impls[name]()
                seconds[name].append(clock() - start)
        ratios = [t / h for t, h in zip(seconds["reference"], seconds["hookviz"], strict=True)]
        row = Row(
            method=method,
            reference=reference,
            hookviz_ms=statistics.median(seconds["hookviz"]) * 1000,
            reference_ms=statistics.median(seconds["reference"]) * 1000,
            ratio=statistics.median(ratios),
            ratio_min=min(ratios),
            ratio_max=max(ratios),
            repeats=repeats,
            pearson_r=r,
        )
        results.append(row)
        print(
            f"  {method}: {row.hookviz_ms:.1f} ms against {row.reference_ms:.1f} ms, "
            f"{row.ratio:.2f}x (r = {r:.4f})",
            file=sys.stderr,
        )

    print(
        "\n| method | reference | hookviz ms | reference ms | reference / hookviz | range "
        "| repeats | Pearson r |"
    )
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for row in results:
        print(
            f"| {row.method} | {row.reference} | {row.hookviz_ms:.1f} | {row.reference_ms:.1f} "
            f"| {row.ratio:.2f}x | {row.ratio_min:.2f}-{row.ratio_max:.2f}x | {row.repeats} "
            f"| {row.pearson_r:.4f} |"
        )
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "model": MODEL,
                    "layer": LAYER,
                    "target": TARGET,
                    "input": [1, 3, 224, 224],
                    "threads": torch.get_num_threads(),
                    "clock": args.clock,
                    "torch": torch.__version__,
                    "cpu_count": os.cpu_count(),
                    "methods": [asdict(row) for row in results],
                },
                indent=2,
            )
            + "\n"
        )
        print(f"\nwrote {args.json}")


if __name__ == "__main__":
    main()
