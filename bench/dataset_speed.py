"""Dataset runs end to end (read, decode, preprocess, CAM, write) against (a) the compute floor
measured in the same run (the batched hooked forward + backward on already-decoded tensors at
the same batch size) and (b) a per-image loop with pytorch-grad-cam over the same files, the
way its users run it over a folder (one GradCAM object, a loop of open, transform, CAM).

    python bench/dataset_speed.py [--model resnet50] [--images 64] [--device cpu]
        [--batch-size 32] [--workers 1] [--bf16] [--crop none|center]

Weights are random (speed does not depend on them; nothing is downloaded). Nothing is asserted:
BENCHMARKS.md reports one run.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import hookviz  # noqa: E402
from hookviz.core.batch import explain_batch  # noqa: E402
from hookviz.dataset import run_cam  # noqa: E402


def make_folder(folder: Path, count: int, size: tuple[int, int] = (500, 375)) -> list[Path]:
    """``count`` JPEGs of ``size`` (by default 500x375, the typical ImageNet validation photo;
    4032x3024 is a 12 MP phone photo), from the sample with fine noise."""
    sample = hookviz.sample_image()
    rng = np.random.default_rng(0)
    paths = []
    for index in range(count):
        pixels = np.asarray(sample.resize(size), np.int16)
        pixels = np.clip(pixels + rng.integers(-20, 21, pixels.shape), 0, 255).astype(np.uint8)
        path = folder / f"{index:04d}.jpg"
        Image.fromarray(pixels).save(path, quality=90)
        paths.append(path)
    return paths


def end_to_end(loaded, folder: Path, out: Path, layer: str, args) -> float:
    started = time.perf_counter()
    summary = run_cam(
        loaded,
        [folder],
        out,
        layer=layer,
        batch_size=args.batch_size,
        workers=args.workers,
        bf16=args.bf16,
        crop=args.crop,
    )
    assert summary.ok == summary.rows
    return summary.rows / (time.perf_counter() - started)


class GpuUtilisation:
    """The GPU's utilisation sampled by nvidia-smi while a block runs (mean and max, percent);
    None where there is no nvidia-smi."""

    def __enter__(self):
        import shutil
        import subprocess

        self.samples: list[float] = []
        self._process = None
        if shutil.which("nvidia-smi"):
            self._process = subprocess.Popen(
                [
                    "nvidia-smi",
                    "--query-gpu=utilization.gpu",
                    "--format=csv,noheader,nounits",
                    "-lms",
                    "200",
                ],
                stdout=subprocess.PIPE,
                text=True,
            )
        return self

    def __exit__(self, *exc) -> None:
        if self._process is None:
            return
        self._process.terminate()
        output, _ = self._process.communicate(timeout=10)
        self.samples = [float(v) for v in output.split() if v.replace(".", "").isdigit()]

    def report(self) -> dict | None:
        if not self.samples:
            return None
        mean = sum(self.samples) / len(self.samples)
        return {"mean %": round(mean, 1), "max %": max(self.samples)}


def compute_floor(loaded, paths: list[Path], layer: str, args) -> float:
    """The same batches, already decoded, resized and normalised on the device: only the
    hooked forward, the backward to the layer and the CAM are timed."""
    crop = args.crop == "center"
    pixels = [loaded.preprocessing.resized(hookviz.load_image(p), crop=crop) for p in paths]
    batches = [
        loaded.preprocessing.normalise(
            torch.from_numpy(np.stack(pixels[i : i + args.batch_size]))
        ).to(loaded.device)
        for i in range(0, len(pixels), args.batch_size)
    ]
    autocast = torch.bfloat16 if args.bf16 else None
    _synchronise(loaded)
    started = time.perf_counter()
    for batch in batches:
        explain_batch(loaded, batch, layer, autocast=autocast)
    _synchronise(loaded)
    return len(pixels) / (time.perf_counter() - started)


def _synchronise(loaded) -> None:
    if loaded.device.type == "cuda":
        torch.cuda.synchronize(loaded.device)


def grad_cam_loop(loaded, paths: list[Path], layer: str) -> float:
    from pytorch_grad_cam import GradCAM
    from torchvision import transforms

    model = _unfrozen_copy(loaded)
    prep = loaded.preprocessing
    transform = transforms.Compose(
        [
            transforms.Resize(int(prep.size * 256 / 224)),
            transforms.CenterCrop(prep.size),
            transforms.ToTensor(),
            transforms.Normalize(prep.mean, prep.std),
        ]
    )
    module = dict(model.named_modules())[layer]
    started = time.perf_counter()
    with GradCAM(model=model, target_layers=[module]) as cam:
        for path in paths:
            image = Image.open(path).convert("RGB")
            tensor = transform(image)[None].to(loaded.device)
            cam(input_tensor=tensor, targets=None)
    return len(paths) / (time.perf_counter() - started)


def _unfrozen_copy(loaded) -> torch.nn.Module:
    import copy

    model = copy.deepcopy(loaded.model)
    model.requires_grad_(True)
    return model.eval()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet50")
    parser.add_argument("--layer", default="layer4")
    parser.add_argument("--images", type=int, default=64)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--bf16", action="store_true")
    parser.add_argument("--channels-last", action="store_true")
    parser.add_argument("--crop", choices=("none", "center"), default="none")
    parser.add_argument("--photo-size", default="500x375", help="WIDTHxHEIGHT of the JPEGs")
    parser.add_argument("--skip-peer", action="store_true", help="no pytorch-grad-cam loop")
    args = parser.parse_args()
    loaded = hookviz.load_model(
        args.model, pretrained=False, device=args.device, channels_last=args.channels_last
    )
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch) / "images"
        folder.mkdir()
        width, height = (int(v) for v in args.photo_size.lower().split("x"))
        paths = make_folder(folder, args.images, (width, height))
        hookviz.grad_cam(loaded, hookviz.load_image(paths[0]), args.layer)  # warm up
        floor = compute_floor(loaded, paths, args.layer, args)
        with GpuUtilisation() as utilisation:
            ours = end_to_end(loaded, folder, Path(scratch) / "run", args.layer, args)
        theirs = float("nan") if args.skip_peer else grad_cam_loop(loaded, paths, args.layer)
    report = {
        "model": args.model,
        "layer": args.layer,
        "device": args.device,
        "images": args.images,
        "photo size": args.photo_size,
        "batch size": args.batch_size,
        "workers": args.workers,
        "bf16": args.bf16,
        "crop": args.crop,
        "channels last": args.channels_last,
        "threads": torch.get_num_threads(),
        "end to end (img/s)": round(ours, 2),
        "compute floor, same inputs (img/s)": round(floor, 2),
        "pytorch-grad-cam loop, 224x224 centre crops (img/s)": round(theirs, 2),
        "x floor": round(ours / floor, 2),
        "x pytorch-grad-cam loop": round(ours / theirs, 2),
        "GPU utilisation end to end": utilisation.report() if args.device != "cpu" else None,
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
