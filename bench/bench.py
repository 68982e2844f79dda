"""hookviz against the peers, in one process, round-robin: Grad-CAM speed, agreement and memory,
the feature-map grid against matplotlib subplots, and an app session replayed with and without
hookviz's reuse of work.

    pip install -r bench/requirements.txt
    python bench/bench.py                   # CPU: batches 1 and 8
    python bench/bench.py --device cuda     # adds batches 64 and 256, bf16 + channels_last
    python bench/bench.py --rounds 5 --cases resnet50:layer4 --batches 1

Every case runs each implementation once per round, in a shuffled order, after a warm-up; the
ratio of each implementation to hookviz is taken round by round (shared machines are noisy:
paired ratios from one run are the figures that count). The heatmaps of every implementation
are compared with hookviz's (Pearson r), so a fast wrong answer cannot win. Peak extra memory is
the rise of the process's peak resident set over the memory in use before the call, measured in a
separate process whose large allocations are forced to mmap so that freed memory really leaves
(timings are taken without that setting, which slows allocation), or CUDA's peak allocation.

Torchvision models use random weights (no download); the bundled EfficientNet-Lite0 is real.
"""

from __future__ import annotations

import argparse
import copy
import gc
import io
import json
import os
import platform
import random
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import hookviz
from hookviz import render

CPU_CASES = [
    "resnet50:layer4",
    "resnet50:layer2",
    "vgg16:features.29",
    "mobilenet_v3_large:features.16",
    "efficientnet_lite0:bn2",
]


# ---------------------------------------------------------------- implementations


def floor_call(model: torch.nn.Module, layer: torch.nn.Module) -> Callable:
    """The least any Grad-CAM can do: one forward with the layer's output made differentiable,
    one backward from the top-1 scores to that output (no hookviz bookkeeping at all)."""

    def run(x: torch.Tensor) -> torch.Tensor:
        kept = {}

        def hook(module, inputs, output):
            kept["a"] = output.detach().requires_grad_(True)
            return kept["a"]

        handle = layer.register_forward_hook(hook)
        try:
            with torch.enable_grad():
                logits = model(x)
                scores = logits.gather(1, logits.argmax(1, keepdim=True)).sum()
                (grad,) = torch.autograd.grad(scores, kept["a"])
        finally:
            handle.remove()
        cam = torch.relu((grad.mean((2, 3), keepdim=True) * kept["a"].detach()).sum(1))
        return _upsample(cam, x.shape[-2:])

    return run


def hookviz_call(loaded: hookviz.LoadedModel, layer: str, autocast=None) -> Callable:
    def run(x: torch.Tensor) -> np.ndarray:
        if x.shape[0] == 1 and autocast is None:
            return hookviz.grad_cam(loaded, x, layer).heatmap[None]
        return hookviz.grad_cam_batch(loaded, x, layer, autocast=autocast).heatmaps

    return run


def pytorch_grad_cam_call(model: torch.nn.Module, layer: torch.nn.Module) -> Callable:
    from pytorch_grad_cam import GradCAM

    def run(x: torch.Tensor) -> np.ndarray:
        # its documented use: a context manager per call; targets=None means top-1
        with GradCAM(model=model, target_layers=[layer]) as cam:
            return cam(input_tensor=x, targets=None)

    return run


def torchcam_call(model: torch.nn.Module, layer_name: str) -> Callable:
    from torchcam.methods import GradCAM

    def run(x: torch.Tensor) -> torch.Tensor:
        extractor = GradCAM(model, target_layer=layer_name, input_shape=tuple(x.shape[1:]))
        try:
            scores = model(x)
            cams = extractor(class_idx=scores.argmax(1).tolist(), scores=scores)[0]
        finally:
            extractor.remove_hooks()
        return _upsample(cams, x.shape[-2:])

    return run


def captum_call(model: torch.nn.Module, layer: torch.nn.Module) -> Callable:
    from captum.attr import LayerAttribution, LayerGradCam

    def run(x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():  # the usual top-1 use: a forward to find the class first
            target = model(x).argmax(1)
        attribution = LayerGradCam(model, layer).attribute(x, target=target, relu_attributions=True)
        return LayerAttribution.interpolate(attribution, tuple(x.shape[-2:]), "bilinear")[:, 0]

    return run


def _upsample(cam: torch.Tensor, size) -> torch.Tensor:
    return F.interpolate(
        cam[:, None].float(), size=tuple(size), mode="bilinear", align_corners=False
    )[:, 0]


# ---------------------------------------------------------------- measuring


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def _as_numpy(result) -> np.ndarray:
    if isinstance(result, torch.Tensor):
        return result.detach().float().cpu().numpy()
    return np.asarray(result, dtype=np.float32)


def _pearson(a: np.ndarray, b: np.ndarray) -> float:
    rows = [np.corrcoef(x.ravel(), y.ravel())[0, 1] for x, y in zip(a, b, strict=True)]
    return float(np.nanmin(rows))


def _rss_kb(field_name: str) -> int:
    status = Path("/proc/self/status").read_text()
    return int(re.search(rf"{field_name}:\s+(\d+)", status).group(1))


def peak_extra_mb(run: Callable, x: torch.Tensor, device: torch.device) -> tuple[float, float]:
    """(peak extra MB during one call, MB still held after it) over the memory in use before."""
    gc.collect()
    if device.type == "cuda":
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        result = run(x)
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() - before
        del result
        gc.collect()
        kept = torch.cuda.memory_allocated() - before
        return peak / 2**20, kept / 2**20
    if not Path("/proc/self/clear_refs").exists():
        return float("nan"), float("nan")
    before = _rss_kb("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")  # reset the peak RSS to the current RSS
    result = run(x)
    peak = _rss_kb("VmHWM") - before
    del result
    gc.collect()
    kept = _rss_kb("VmRSS") - before
    return peak / 1024, kept / 1024


@dataclass
class Row:
    name: str
    times: list[float] = field(default_factory=list)
    ratios: list[float] = field(default_factory=list)
    r: float = float("nan")
    peak_mb: float = float("nan")
    kept_mb: float = float("nan")


def compare(
    impls: dict[str, Callable],
    x: torch.Tensor,
    device: torch.device,
    rounds: int,
    reference: str = "hookviz",
) -> list[Row]:
    """Round-robin timing (shuffled order each round) and agreement with ``reference``."""
    outputs = {}
    for name, run in impls.items():  # warm-up, and the heatmaps for agreement
        outputs[name] = _as_numpy(run(x))
        _sync(device)
    rows = {name: Row(name) for name in impls}
    order = list(impls)
    for _ in range(rounds):
        random.shuffle(order)
        this_round = {}
        for name in order:
            _sync(device)
            started = time.perf_counter()
            impls[name](x)
            _sync(device)
            this_round[name] = time.perf_counter() - started
        for name, seconds in this_round.items():
            rows[name].times.append(seconds)
            rows[name].ratios.append(seconds / this_round[reference])
    for name in impls:
        rows[name].r = _pearson(outputs[name], outputs[reference])
    return list(rows.values())


def _p90(values: list[float]) -> float:
    return float(np.percentile(values, 90))


def print_rows(title: str, rows: list[Row], batch: int) -> None:
    print(f"\n### {title}\n")
    print(
        "| implementation | median ms | p90 ms | images/s | x hookviz (median of paired) "
        "| Pearson r vs hookviz | peak extra MB | MB kept after |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        median = statistics.median(row.times)
        print(
            f"| {row.name} | {median * 1000:.1f} | {_p90(row.times) * 1000:.1f} "
            f"| {batch / median:.1f} | {statistics.median(row.ratios):.2f} | {row.r:.4f} "
            f"| {row.peak_mb:.0f} | {row.kept_mb:.0f} |"
        )


# ---------------------------------------------------------------- cases


def load(name: str, device: torch.device, channels_last: bool = False) -> hookviz.LoadedModel:
    torch.manual_seed(0)
    pretrained = name in hookviz.models.bundled.BUNDLED
    return hookviz.load_model(
        name, pretrained=pretrained, device=device, channels_last=channels_last
    )


def gradcam_impls(
    spec: str, batch: int, device: torch.device, peers: bool
) -> tuple[dict[str, Callable], torch.Tensor, hookviz.LoadedModel]:
    name, layer = spec.split(":")
    loaded = load(name, device)
    size = loaded.preprocessing.size
    x = torch.randn(batch, 3, size, size, generator=torch.Generator().manual_seed(1)).to(device)
    # The peers get their own copy in the state a user has it: eval mode, weights requiring
    # grad (the default). hookviz's copy is frozen at load, as always.
    peer_model = copy.deepcopy(loaded.model).requires_grad_(True).eval()
    peer_layer = dict(peer_model.named_modules())[layer]
    impls = {
        "hookviz": hookviz_call(loaded, layer),
        "floor (forward + backward to the layer)": floor_call(
            loaded.model, dict(loaded.model.named_modules())[layer]
        ),
    }
    if peers:
        impls["pytorch-grad-cam"] = pytorch_grad_cam_call(peer_model, peer_layer)
        impls["TorchCAM"] = torchcam_call(peer_model, layer)
        impls["Captum"] = captum_call(peer_model, peer_layer)
    impls["plain inference forward"] = lambda t: _no_grad_forward(loaded.model, t)
    return impls, x, loaded


def gradcam_case(
    spec: str, batch: int, device: torch.device, rounds: int, peers: bool = True
) -> None:
    impls, x, _ = gradcam_impls(spec, batch, device, peers)
    forward = impls.pop("plain inference forward")
    rows = compare(impls, x, device, rounds)
    started = time.perf_counter()
    for _ in range(rounds):
        forward(x)
    _sync(device)
    forward_ms = (time.perf_counter() - started) / rounds * 1000
    memory = measure_memory(spec, batch, device, peers)
    for row in rows:
        row.peak_mb, row.kept_mb = memory.get(row.name, (float("nan"), float("nan")))
    name, layer = spec.split(":")
    print_rows(f"Grad-CAM · {name} at {layer} · batch {batch} · {device.type}", rows, batch)
    plain_peak = memory.get("plain inference forward", (float("nan"),))[0]
    print(f"\nplain inference forward: {forward_ms:.1f} ms, peak extra {plain_peak:.0f} MB")


def measure_memory(
    spec: str, batch: int, device: torch.device, peers: bool
) -> dict[str, tuple[float, float]]:
    """Peak and kept memory of each implementation; on the CPU in a child process started with
    large allocations forced to mmap (so freed memory leaves and peak RSS means something)."""
    if device.type == "cuda":
        impls, x, _ = gradcam_impls(spec, batch, device, peers)
        for run in impls.values():
            run(x)
        return {name: peak_extra_mb(run, x, device) for name, run in impls.items()}
    command = [sys.executable, __file__, "--memory-case", f"{spec}@{batch}@{int(peers)}"]
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "131072"}
    output = subprocess.run(command, env=env, capture_output=True, text=True, check=True).stdout
    return {name: tuple(values) for name, values in json.loads(output.splitlines()[-1]).items()}


def memory_only(case: str) -> None:
    spec, batch, peers = case.split("@")
    impls, x, _ = gradcam_impls(spec, int(batch), torch.device("cpu"), peers == "1")
    for run in impls.values():  # warm-up: first-call allocations are not the call's cost
        run(x)
    print(
        json.dumps(
            {name: peak_extra_mb(run, x, torch.device("cpu")) for name, run in impls.items()}
        )
    )


def _no_grad_forward(model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(x)


def gpu_throughput_case(batch: int, device: torch.device, rounds: int) -> None:
    """resnet50 layer4 at large batches: fp32, bf16 + channels_last, the bf16 forward alone,
    and pytorch-grad-cam, in one run."""
    fp32 = load("resnet50", device)
    fast = load("resnet50", device, channels_last=True)
    x = torch.randn(batch, 3, 224, 224, device=device)
    x_last = x.contiguous(memory_format=torch.channels_last)
    peer_model = copy.deepcopy(fp32.model).requires_grad_(True).eval()

    def bf16_forward(t):
        with torch.no_grad(), torch.autocast(device.type, dtype=torch.bfloat16):
            return fast.model(t)

    impls = {
        "hookviz": hookviz_call(fp32, "layer4"),
        "hookviz bf16 + channels_last": lambda t: hookviz_call(fast, "layer4", torch.bfloat16)(
            x_last
        ),
        "pytorch-grad-cam": pytorch_grad_cam_call(peer_model, peer_model.layer4),
    }
    rows = compare(impls, x, device, rounds)
    started = time.perf_counter()
    for _ in range(rounds):
        bf16_forward(x_last)
    _sync(device)
    forward_rate = batch * rounds / (time.perf_counter() - started)
    print_rows(f"GPU throughput · resnet50 at layer4 · batch {batch}", rows, batch)
    print(f"\nplain bf16 channels_last forward: {forward_rate:.0f} images/s")


def grid_case(rounds: int) -> None:
    """64 channels of 14x14 drawn as one array + one colormap lookup + PNG, against 64
    matplotlib subplots saved to a PNG of the same pixel size."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    maps = torch.rand(64, 14, 14)
    channels = list(range(64))

    def ours():
        return render.png_bytes(render.feature_grid(maps, channels, labels=True, columns=8))

    height, width = render.feature_grid(maps, channels, columns=8).shape[:2]

    def subplots():
        figure, axes = plt.subplots(8, 8, figsize=(width / 100, height / 100), dpi=100)
        for channel, axis in zip(channels, axes.ravel(), strict=True):
            axis.imshow(maps[channel].numpy(), cmap="viridis")
            axis.set_title(str(channel), fontsize=6)
            axis.axis("off")
        buffer = io.BytesIO()
        figure.savefig(buffer, format="png", dpi=100)
        plt.close(figure)
        return buffer.getvalue()

    times = {"hookviz grid": [], "matplotlib subplots": []}
    ratios = []
    ours()
    subplots()
    for _ in range(rounds):
        round_times = {}
        for name, run in (("hookviz grid", ours), ("matplotlib subplots", subplots)):
            started = time.perf_counter()
            run()
            round_times[name] = time.perf_counter() - started
            times[name].append(round_times[name])
        ratios.append(round_times["matplotlib subplots"] / round_times["hookviz grid"])
    print(f"\n### Feature-map grid · 64 channels of 14x14 · {width}x{height} px PNG\n")
    print("| implementation | median ms | p90 ms |")
    print("|---|---:|---:|")
    for name, values in times.items():
        print(f"| {name} | {statistics.median(values) * 1000:.1f} | {_p90(values) * 1000:.1f} |")
    print(
        f"\nmatplotlib subplots take {statistics.median(ratios):.1f}x as long "
        "(median of paired rounds)"
    )


def app_session_case(device: torch.device, rounds: int) -> None:
    """The sequence of control changes a user makes, replayed the way app.py caches work
    (ForwardPass per image+layer, analyses per target, rendering always) and naively (a fresh
    analysis for every change)."""
    loaded = load("efficientnet_lite0", device)
    image = hookviz.sample_image()
    steps = [
        ("open the page", "bn2", None, "viridis", 0.5),
        ("class #2 from the top-5", "bn2", 834, "viridis", 0.5),
        ("class #3 from the top-5", "bn2", 465, "viridis", 0.5),
        ("class typed by name", "bn2", 1, "viridis", 0.5),
        ("heatmap colormap", "bn2", 1, "turbo", 0.5),
        ("heatmap opacity", "bn2", 1, "turbo", 0.7),
        ("another layer", "blocks.3", 1, "turbo", 0.7),
        ("class on that layer", "blocks.3", 652, "turbo", 0.7),
        ("back to the first layer", "bn2", 1, "turbo", 0.7),
        ("back to a seen class", "bn2", 834, "turbo", 0.7),
    ]

    def jpeg(picture) -> bytes:
        buffer = io.BytesIO()
        render.fit_within(picture, 1024).save(buffer, format="JPEG", quality=90)
        return buffer.getvalue()

    def draw(analysis: hookviz.Analysis, cmap: str, alpha: float) -> None:
        """What app.py draws on every update: three photos as JPEG, the grid and the
        downloads (overlay PNG, heatmap .npy)."""
        overlay = render.overlay(image, analysis.cam.heatmap, alpha=alpha, cmap=cmap)
        jpeg(image)
        jpeg(overlay)
        jpeg(render.heatmap_image(analysis.cam.heatmap, cmap))
        order = analysis.features.channel_order("mean", 64)
        render.png_bytes(render.feature_grid(analysis.features.activations, order, columns=8))
        render.png_bytes(overlay)
        render.npy_bytes(analysis.cam.heatmap)

    def replay_cached() -> tuple[dict[str, float], dict[str, float]]:
        passes: dict[str, hookviz.ForwardPass] = {}
        analyses: dict[tuple, hookviz.Analysis] = {}
        spent, computing = {}, {}
        for label, layer, target, cmap, alpha in steps:
            started = time.perf_counter()
            key = (layer, target)
            if key not in analyses:
                if layer not in passes:
                    passes[layer] = hookviz.ForwardPass(loaded, image, layer)
                analyses[key] = passes[layer].analysis(target)
            computing[label] = time.perf_counter() - started
            draw(analyses[key], cmap, alpha)
            spent[label] = time.perf_counter() - started
        return spent, computing

    def replay_naive() -> tuple[dict[str, float], dict[str, float]]:
        spent, computing = {}, {}
        for label, layer, target, cmap, alpha in steps:
            started = time.perf_counter()
            analysis = hookviz.analyze(loaded, image, layer, target)
            computing[label] = time.perf_counter() - started
            draw(analysis, cmap, alpha)
            spent[label] = time.perf_counter() - started
        return spent, computing

    replay_cached()
    replay_naive()
    cached_runs, naive_runs, cached_compute, naive_compute = [], [], [], []
    for _ in range(rounds):
        spent, computing = replay_cached()
        cached_runs.append(spent)
        cached_compute.append(computing)
        spent, computing = replay_naive()
        naive_runs.append(spent)
        naive_compute.append(computing)

    def median_ms(runs: list[dict[str, float]], label: str) -> float:
        return statistics.median(run[label] for run in runs) * 1000

    print("\n### App session · bundled EfficientNet-Lite0 · sample photo\n")
    print("| step | with reuse: compute ms | total ms | naive: compute ms | total ms |")
    print("|---|---:|---:|---:|---:|")
    for label, *_ in steps:
        print(
            f"| {label} | {median_ms(cached_compute, label):.1f} "
            f"| {median_ms(cached_runs, label):.1f} | {median_ms(naive_compute, label):.1f} "
            f"| {median_ms(naive_runs, label):.1f} |"
        )
    totals = [
        statistics.median(sum(run.values()) for run in runs) * 1000
        for runs in (cached_compute, cached_runs, naive_compute, naive_runs)
    ]
    print(
        "| **whole session** | **{:.0f}** | **{:.0f}** | **{:.0f}** | **{:.0f}** |".format(*totals)
    )
    print(
        f"\nwith reuse the session's compute takes {totals[0] / totals[2]:.2f}x the naive "
        f"compute, and {totals[1] / totals[3]:.2f}x its total time (rendering included)"
    )
    for label in ("class #2 from the top-5", "class on that layer"):
        ratio = median_ms(cached_compute, label) / median_ms(naive_compute, label)
        print(f"'{label}': {ratio:.2f}x a fresh analysis (a backward pass only, no forward)")


# ---------------------------------------------------------------- main


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument(
        "--cases", nargs="*", default=None, help="model:layer, e.g. vgg16:features.29"
    )
    parser.add_argument("--batches", nargs="*", type=int, default=None)
    parser.add_argument("--skip", nargs="*", default=[], choices=["gradcam", "grid", "app", "gpu"])
    parser.add_argument("--memory-case", help=argparse.SUPPRESS)  # internal: child process
    args = parser.parse_args()
    if args.memory_case:
        memory_only(args.memory_case)
        return
    device = torch.device(args.device)
    batches = args.batches or ([1, 8] if device.type == "cpu" else [1, 8, 64, 256])

    print("# hookviz benchmark")
    print(f"\ncommand: python bench/bench.py {' '.join(sys.argv[1:])}".rstrip())
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} CPU cores, "
        f"{hookviz.core.devices.describe_device(device)}; torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads; Python {platform.python_version()}"
    )
    if "gradcam" not in args.skip:
        for spec in args.cases or CPU_CASES:
            for batch in batches:
                if batch > 8 and device.type == "cpu":
                    continue
                gradcam_case(spec, batch, device, args.rounds, peers=batch <= 64)
    if device.type == "cuda" and "gpu" not in args.skip:
        for batch in (64, 256):
            gpu_throughput_case(batch, device, args.rounds)
    if "grid" not in args.skip:
        grid_case(args.rounds)
    if "app" not in args.skip:
        app_session_case(device, args.rounds)


if __name__ == "__main__":
    main()
