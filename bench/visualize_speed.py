"""Channel visualisation (feature visualisation by optimisation) against the two peers on PyPI:
torch-lucent (Lucid for PyTorch: ``render_vis`` over a Fourier, colour-decorrelated image with
its standard jitter, scale and rotate transforms) and horama (Fel et al. 2023: ``maco``, phase
optimisation under a fixed ImageNet magnitude spectrum; its Lucid-style ``fourier`` where that
spectrum is not on disk). Same model, layer, channels, image size, step count and seed for all.

For each tool and channel it measures the wall time of one visualisation, and the objective
reached: the channel's mean activation on the FINAL picture (an RGB uint8 image, size x size),
measured here by one function for every tool (a forward hook on the layer, over the picture
normalised with the model's own mean/std at its own size), never a tool's internal loss.

    python bench/visualize_speed.py [--model efficientnet_lite0] [--layer blocks.5]
        [--channels 0 7 42] [--size 224] [--steps 128] [--seed 0] [--device cpu]
        [--json PATH] [--pictures bench/visualize_pictures/visualize_speed.png]
        [--maco-spectrum PATH] [--horama auto|maco|fourier]

The peers are optional (bench/requirements-visualize.txt says how to install them). A tool
that is missing is left out with a line saying so, hookviz too while ``hookviz.visualize`` is not
there. horama's ``maco`` downloads its magnitude spectrum at run time into the working folder
(``spectrum_decorrelated.npy``); offline, give that file with --maco-spectrum, or the horama row
is its ``fourier`` method. Both horama methods optimise 6 random crops a step (25-30% of the
image wide, near its centre, each resized to the model's input), so their picture is not drawn
for the whole frame that the measure reads. lucent puts its image on CUDA whenever CUDA is
available: use ``--device cuda`` on such a machine. Threads are left as torch sets them. On a
shared machine the load average is recorded and the fastest channel's time shown beside the
mean. Nothing is asserted: BENCHMARKS.md reports one run.
"""

from __future__ import annotations

import os

os.environ.setdefault("TQDM_DISABLE", "1")  # horama's loop has a progress bar it cannot turn off

import argparse
import copy
import json
import random
import sys
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image, ImageDraw

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import hookviz  # noqa: E402

DEFAULT_PICTURES = ROOT / "bench" / "visualize_pictures" / "visualize_speed.png"
MACO_CACHE = Path("spectrum_decorrelated.npy")  # where horama.maco looks for (and saves) it
# What a tool says it reached on its own final image, where it says (a check on the measure).
OWN_ACTIVATION: dict[str, list] = {}


# The one measure every tool is judged by ----------------------------------------------------


def normaliser(loaded):
    """``x in [0, 1]`` (N, 3, H, W) -> the model's input, with its own mean and std."""
    prep = loaded.preprocessing
    mean = torch.tensor(prep.mean, dtype=torch.float32, device=loaded.device).view(1, 3, 1, 1)
    std = torch.tensor(prep.std, dtype=torch.float32, device=loaded.device).view(1, 3, 1, 1)
    return lambda x: (x - mean) / std


@torch.no_grad()
def channel_activation(loaded, layer: str, channel: int, picture: Image.Image) -> float:
    """Mean activation of ``channel`` at ``layer`` over the whole picture, fed at its own size."""
    pixels = np.asarray(picture.convert("RGB"), dtype=np.float32) / 255.0
    tensor = torch.from_numpy(pixels).permute(2, 0, 1)[None].to(loaded.device)
    captured = {}
    module = loaded.model.get_submodule(layer)
    handle = module.register_forward_hook(lambda _m, _i, output: captured.update(out=output))
    try:
        loaded.model(normaliser(loaded)(tensor))
    finally:
        handle.remove()
    return float(captured["out"][0, channel].mean())


def to_picture(array) -> Image.Image:
    """A float image in [0, 1], (H, W, 3) or (3, H, W), tensor or array -> PIL RGB, rounded."""
    if isinstance(array, torch.Tensor):
        array = array.detach().cpu().numpy()
    array = np.asarray(array, dtype=np.float32)
    if array.ndim == 4:
        array = array[0]
    if array.shape[0] == 3 and array.shape[-1] != 3:
        array = array.transpose(1, 2, 0)
    return Image.fromarray(np.round(np.clip(array, 0.0, 1.0) * 255.0).astype(np.uint8), "RGB")


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)  # lucent draws its jitter, scale and angle from numpy
    torch.manual_seed(seed)  # both peers draw their initial image (and horama its crops) here


# The three tools: each takes (loaded, layer, channel, size, steps, seed) and gives a picture ---


def run_hookviz(loaded, layer, channel, size, steps, seed) -> Image.Image:
    result = hookviz.visualize(loaded, layer, channel=channel, steps=steps, size=size, seed=seed)
    own = getattr(result, "activation", None)  # on its float image, before the uint8 rounding
    OWN_ACTIVATION.setdefault("hookviz", []).append(None if own is None else round(own, 4))
    return result.image.convert("RGB")


def run_lucent(loaded, layer, channel, size, steps, seed) -> Image.Image:
    from lucent.optvis import param, render, transform

    # render_vis hooks every module and never removes the hooks: give it its own copy.
    model = copy.deepcopy(loaded.model).eval()
    seed_everything(seed)
    images = render.render_vis(
        model,
        f"{layer.replace('.', '_')}:{channel}",  # lucent names modules with "_" for "."
        param_f=lambda: param.image(size, fft=True, decorrelate=True),
        optimizer=lambda params: torch.optim.Adam(params, lr=5e-2),  # its default, spelt out
        # Its preprocess=True appends ImageNet mean/std; this model has its own, appended here.
        transforms=[*transform.standard_transforms, normaliser(loaded)],
        thresholds=(steps,),
        preprocess=False,
        progress=False,
        show_image=False,
    )
    return to_picture(images[-1])


def horama_method(choice: str, spectrum: Path | None) -> str:
    if choice != "auto":
        return choice
    return "maco" if spectrum is not None or MACO_CACHE.is_file() else "fourier"


def run_horama(loaded, layer, channel, size, steps, seed, method="maco") -> Image.Image:
    import horama

    normalise = normaliser(loaded)
    captured = {}
    module = loaded.model.get_submodule(layer)

    def objective(crops: torch.Tensor) -> torch.Tensor:  # horama maximises what this returns
        loaded.model(normalise(crops))
        return captured["out"][:, channel].mean()

    handle = module.register_forward_hook(lambda _m, _i, output: captured.update(out=output))
    try:
        seed_everything(seed)
        optimise = horama.maco if method == "maco" else horama.fourier
        image, _ = optimise(
            objective,
            total_steps=steps,
            image_size=size,
            model_input_size=size,
            values_range=(0.0, 1.0),  # the image itself, in [0, 1]; normalised in the objective
            device=str(loaded.device),
        )
    finally:
        handle.remove()
    return to_picture(image)


def available_tools(args) -> dict:
    """name -> callable, each peer only if it imports; a line for each one left out."""
    tools = {}
    if hasattr(hookviz, "visualize"):
        tools["hookviz"] = run_hookviz
    else:
        print("hookviz: hookviz.visualize is not there yet; peers only.")
    try:
        import lucent.optvis.render  # noqa: F401

        tools["lucent"] = run_lucent
    except Exception as error:  # an old kornia or a missing IPython shows up here
        print(f"lucent left out: {type(error).__name__}: {error}")
    try:
        import horama

        method = horama_method(args.horama, args.maco_spectrum)
        if method == "maco" and args.maco_spectrum is not None:
            horama.maco_fv.MACO_SPECTRUM_FILENAME = str(args.maco_spectrum)
        if method == "fourier" and args.horama == "auto":
            print(
                f"horama: no magnitude spectrum ({MACO_CACHE} here or --maco-spectrum) and maco "
                "would download it; running horama.fourier instead."
            )
        tools[f"horama ({method})"] = lambda *a: run_horama(*a, method=method)
    except Exception as error:
        print(f"horama left out: {type(error).__name__}: {error}")
    return tools


# Output -------------------------------------------------------------------------------------


def contact_sheet(pictures, scores, channels, size, path: Path) -> None:
    """Columns: the tools; rows: the channels; each cell labelled with its measured objective."""
    names = list(pictures)
    label_w, head_h, foot_h, gap = 70, 24, 18, 6
    width = label_w + len(names) * (size + gap)
    height = head_h + len(channels) * (size + foot_h + gap)
    sheet = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(sheet)
    for column, name in enumerate(names):
        draw.text((label_w + column * (size + gap) + 4, 6), name, fill="black")
    for row, channel in enumerate(channels):
        top = head_h + row * (size + foot_h + gap)
        draw.text((6, top + size // 2), f"channel {channel}", fill="black")
        for column, name in enumerate(names):
            left = label_w + column * (size + gap)
            sheet.paste(pictures[name][row], (left, top))
            text = f"mean act. {scores[name][row]:.3f}"
            draw.text((left + 4, top + size + 3), text, fill="black")
    path.parent.mkdir(parents=True, exist_ok=True)
    sheet.save(path)


def table(rows: list[dict]) -> str:
    lines = [
        "| tool | s per visualisation | x faster peer | s, fastest channel | mean objective "
        "| x lucent |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in rows:
        lines.append(
            f"| {row['tool']} | {row['seconds']:.2f} | {_ratio(row['x faster peer'])} "
            f"| {min(row['seconds per channel']):.2f} | {row['objective']:.3f} "
            f"| {_ratio(row['x lucent'])} |"
        )
    return "\n".join(lines)


def _ratio(value) -> str:
    return "-" if value is None else f"{value:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="efficientnet_lite0")
    parser.add_argument("--layer", default="blocks.5")
    parser.add_argument("--channels", type=int, nargs="+", default=[0, 7, 42])
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--steps", type=int, default=128)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--pictures", type=Path, default=DEFAULT_PICTURES)
    parser.add_argument("--maco-spectrum", type=Path, help="horama's spectrum_decorrelated.npy")
    parser.add_argument("--horama", choices=["auto", "maco", "fourier"], default="auto")
    args = parser.parse_args()

    load_before = [round(value, 2) for value in os.getloadavg()]
    loaded = hookviz.load_model(args.model, device=args.device)
    tools = available_tools(args)
    if not tools:
        raise SystemExit("no tool to run")
    first = args.channels[0]
    for run in tools.values():  # warm up each tool (first-call costs), not timed
        run(loaded, args.layer, first, args.size, 2, args.seed)

    OWN_ACTIVATION.clear()  # the warm-up's
    seconds = {name: [] for name in tools}
    scores = {name: [] for name in tools}
    pictures = {name: [] for name in tools}
    for channel in args.channels:  # tools interleaved per channel: a busy spell hits them all
        for name, run in tools.items():
            started = time.perf_counter()
            picture = run(loaded, args.layer, channel, args.size, args.steps, args.seed)
            seconds[name].append(time.perf_counter() - started)
            pictures[name].append(picture)
            scores[name].append(channel_activation(loaded, args.layer, channel, picture))

    mean_s = {name: float(np.mean(values)) for name, values in seconds.items()}
    mean_obj = {name: float(np.mean(values)) for name, values in scores.items()}
    peer_s = [mean_s[name] for name in tools if name != "hookviz"]
    lucent_obj = mean_obj.get("lucent")
    rows = [
        {
            "tool": name,
            "seconds": round(mean_s[name], 3),
            "x faster peer": round(mean_s[name] / min(peer_s), 2) if peer_s else None,
            "objective": round(mean_obj[name], 4),
            "x lucent": round(mean_obj[name] / lucent_obj, 2) if lucent_obj else None,
            "seconds per channel": [round(value, 3) for value in seconds[name]],
            "objective per channel": [round(value, 4) for value in scores[name]],
            "its own final objective per channel": OWN_ACTIVATION.get(name),
        }
        for name in tools
    ]
    photo = hookviz.sample_image().resize((args.size, args.size), Image.BICUBIC)
    photo_scores = [channel_activation(loaded, args.layer, c, photo) for c in args.channels]
    contact_sheet(pictures, scores, args.channels, args.size, args.pictures)

    print(table(rows))
    threads = torch.get_num_threads()
    print(
        f"\n{args.model} {args.layer} channels {args.channels}, {args.size} px, {args.steps} "
        f"steps, seed {args.seed}, {args.device}, {threads} threads. The sample photo, for "
        f"scale: mean objective {np.mean(photo_scores):.3f}. Pictures: {args.pictures}"
    )
    if args.json:
        report = {
            "model": args.model,
            "layer": args.layer,
            "channels": args.channels,
            "size": args.size,
            "steps": args.steps,
            "seed": args.seed,
            "device": args.device,
            "threads": torch.get_num_threads(),
            "load average before (1, 5, 15 min)": load_before,
            "load average after": [round(value, 2) for value in os.getloadavg()],
            "versions": _versions(),
            "sample photo objective per channel": [round(v, 4) for v in photo_scores],
            "tools": rows,
            "pictures": str(args.pictures),
        }
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2) + "\n")


def _versions() -> dict:
    from importlib.metadata import PackageNotFoundError, version

    found = {}
    for package in ("torch", "torchvision", "torch-lucent", "kornia", "horama"):
        try:
            found[package] = version(package)
        except PackageNotFoundError:
            found[package] = None
    return found


if __name__ == "__main__":
    main()
