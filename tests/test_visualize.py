"""Feature visualization (hookviz.visualize): the optimised image excites its channel far more
than natural photos do and more than another channel's image does, deterministically, through
the model's own preprocessing, with the model left exactly as it was."""

from __future__ import annotations

import dataclasses
import io
import time
from pathlib import Path

import matplotlib
import numpy as np
import pytest
import torch
from PIL import Image
from torch import nn

import hookviz

# Small and short: the measured margins (10x and more at these settings) leave room.
SIZE, STEPS = 128, 48


def natural_photos() -> list[Image.Image]:
    """The sample photo and the two photographs that ship with matplotlib."""
    folder = Path(matplotlib.get_data_path()) / "sample_data"
    shipped = [folder / "grace_hopper.jpg", folder / "Minduka_Present_Blue_Pack.png"]
    return [hookviz.sample_image()] + [Image.open(p).convert("RGB") for p in shipped]


def channel_means(loaded, image, layer) -> np.ndarray:
    """Each channel's mean activation at ``layer``: photos fed as the page feeds them, square
    visualizations at their own size (the size they were optimised at)."""
    if image.width == image.height:
        pixels = torch.from_numpy(np.array(image, np.float32) / 255).permute(2, 0, 1)
        mean = torch.tensor(loaded.preprocessing.mean).view(3, 1, 1)
        std = torch.tensor(loaded.preprocessing.std).view(3, 1, 1)
        image = ((pixels - mean) / std)[None]
    maps = hookviz.feature_maps(loaded, image, layer).activations
    return maps.float().mean(dim=(1, 2)).cpu().numpy()


@pytest.fixture(scope="module")
def made(lite0):
    """Visualizations of two channels in each of two late layers of the bundled model."""
    chosen = {"blocks.5": (3, 100), "blocks.6": (17, 250)}
    return {
        (layer, channel): hookviz.visualize(lite0, layer, channel, steps=STEPS, size=SIZE)
        for layer, channels in chosen.items()
        for channel in channels
    }


@pytest.mark.slow
def test_a_visualization_excites_its_channel_twice_as_much_as_any_natural_photo(lite0, made):
    photos = natural_photos()
    for (layer, channel), vis in made.items():
        best_photo = max(channel_means(lite0, photo, layer)[channel] for photo in photos)
        own = channel_means(lite0, vis.image, layer)[channel]
        assert own >= 2 * max(best_photo, 0.0), (layer, channel, own, best_photo)


@pytest.mark.slow
def test_a_channels_visualization_excites_it_more_than_another_channels_does(lite0, made):
    for layer in ("blocks.5", "blocks.6"):
        (a, vis_a), (b, vis_b) = [(c, v) for (name, c), v in made.items() if name == layer]
        on_a = channel_means(lite0, vis_a.image, layer)
        on_b = channel_means(lite0, vis_b.image, layer)
        assert on_a[a] > on_b[a] and on_b[b] > on_a[b], (layer, a, b)


def test_the_result_describes_itself_and_its_objective_rises(made):
    vis = made[("blocks.5", 3)]
    assert vis.image.mode == "RGB" and vis.image.size == (SIZE, SIZE)
    assert (vis.layer, vis.channel, vis.target, vis.steps) == ("blocks.5", 3, None, STEPS)
    assert vis.objective.shape == (STEPS,) and vis.objective.dtype == np.float32
    assert vis.objective[-5:].mean() > 5 * abs(vis.objective[:3].mean())
    png = Image.open(io.BytesIO(vis._repr_png_()))
    assert png.size == (SIZE, SIZE)
    assert np.array_equal(np.asarray(png.convert("RGB")), np.asarray(vis.image))


def test_the_default_size_is_the_models_native_size(lite0):
    vis = hookviz.visualize(lite0, "blocks.2", 0, steps=2)
    assert vis.image.size == (lite0.preprocessing.size,) * 2 == vis.fed_size


def test_the_same_seed_gives_the_same_picture_and_another_seed_another(lite0):
    first = hookviz.visualize(lite0, "blocks.4", 5, steps=6, size=64, seed=3)
    again = hookviz.visualize(lite0, "blocks.4", 5, steps=6, size=64, seed=3)
    other = hookviz.visualize(lite0, "blocks.4", 5, steps=6, size=64, seed=4)
    assert np.array_equal(np.asarray(first.image), np.asarray(again.image))
    assert np.array_equal(first.objective, again.objective)
    assert not np.array_equal(np.asarray(first.image), np.asarray(other.image))


def test_the_model_is_left_frozen_without_hooks_or_gradients(lite0):
    before = {k: v.clone() for k, v in lite0.model.state_dict().items()}
    hooks = hookviz.count_hooks(lite0.model)
    hookviz.visualize(lite0, "blocks.3", 1, steps=3, size=64)
    hookviz.visualize(lite0, target=1, steps=2, size=64)
    with pytest.raises(hookviz.CancelledError):
        hookviz.visualize(lite0, "blocks.3", 1, steps=10, size=64, progress=lambda i, n: i == 2)
    assert hookviz.count_hooks(lite0.model) == hooks
    assert all(p.grad is None and not p.requires_grad for p in lite0.model.parameters())
    after = lite0.model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert not lite0.model.training


def test_grad_mode_of_the_caller_is_kept_and_no_grad_callers_still_get_a_picture(lite0):
    with torch.no_grad():
        vis = hookviz.visualize(lite0, "blocks.3", 1, steps=6, size=64, transforms=False)
        assert not torch.is_grad_enabled()
    assert vis.objective[-1] > vis.objective[0]


def test_progress_sees_every_step_and_cancelling_stops_it(lite0):
    seen = []
    hookviz.visualize(
        lite0, "blocks.2", 0, steps=5, size=48, progress=lambda i, n: seen.append((i, n))
    )
    assert seen == [(i, 5) for i in range(5)]
    calls = []

    def cancel_at_three(step, steps):
        calls.append(step)
        return step == 3

    with pytest.raises(hookviz.CancelledError):
        hookviz.visualize(lite0, "blocks.2", 0, steps=50, size=48, progress=cancel_at_three)
    assert calls == [0, 1, 2, 3]


@pytest.mark.slow
def test_a_class_visualization_raises_that_class_above_what_photos_give_it(lite0):
    goldfish = lite0.class_index("goldfish")
    vis = hookviz.visualize(lite0, target="goldfish", steps=STEPS, size=SIZE)
    assert vis.target == goldfish and vis.layer is None and vis.channel is None

    def probability(image) -> float:
        return {p.index: p.probability for p in hookviz.predict(lite0, image, k=1000)}[goldfish]

    assert probability(vis.image) > 10 * max(probability(p) for p in natural_photos())
    by_index = hookviz.visualize(lite0, target=goldfish, steps=2, size=48)
    assert by_index.target == goldfish


@pytest.mark.parametrize(
    ("kwargs", "error", "words"),
    [
        ({}, ValueError, "not both or neither"),
        ({"layer": "blocks.5", "channel": 1, "target": 3}, ValueError, "not both or neither"),
        ({"channel": 1}, ValueError, "needs its layer"),
        ({"layer": "blocks.5", "channel": 1000}, hookviz.LayerError, "channels 0 to 191"),
        ({"layer": "blocks.55", "channel": 1}, hookviz.LayerError, "not found"),
        ({"target": 1000}, hookviz.TargetError, "out of range"),
        ({"target": "no such class"}, hookviz.TargetError, "no class named"),
        ({"layer": "blocks.5", "channel": 1, "steps": 0}, ValueError, "at least 1"),
    ],
)
def test_bad_requests_get_a_clear_message(lite0, kwargs, error, words):
    hooks = hookviz.count_hooks(lite0.model)
    with pytest.raises(error, match=words):
        hookviz.visualize(lite0, **{"steps": 2, "size": 48, **kwargs})
    assert hookviz.count_hooks(lite0.model) == hooks


class _RecordsInput(nn.Module):
    """A tiny CNN that keeps the last input it saw."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.head = nn.Linear(8, 4)
        self.seen: torch.Tensor | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.seen = x.detach()
        return self.head(self.conv(x).relu().mean(dim=(2, 3)))


def test_the_optimiser_feeds_the_models_own_normalisation():
    module = _RecordsInput()
    mean, std = (0.2, 0.5, 0.7), (0.1, 0.3, 0.2)
    prep = hookviz.Preprocessing(size=32, mean=mean, std=std)
    loaded = hookviz.wrap_model(module, num_classes=4, preprocessing=prep, device="cpu")
    vis = hookviz.visualize(loaded, "conv", 2, steps=3, size=32, transforms=False)
    pixels = module.seen[0] * torch.tensor(std).view(3, 1, 1) + torch.tensor(mean).view(3, 1, 1)
    assert float(pixels.min()) >= 0.0 and float(pixels.max()) <= 1.0  # a [0, 1] image inside
    shown = torch.from_numpy(np.array(vis.image)).permute(2, 0, 1).float() / 255
    assert float((shown - pixels).abs().max()) <= 1 / 255 + 1e-6  # and it is the picture shown


@pytest.mark.slow
def test_diverse_visualizations_differ_more_than_independent_ones(lite0):
    from hookviz.insight.visualize import gram_similarity

    def similarity(visualizations) -> float:
        maps = [hookviz.feature_maps(lite0, v.image, "blocks.5") for v in visualizations]
        batch = torch.stack([m.activations for m in maps])
        return float(gram_similarity(batch))

    kwargs = {"count": 3, "steps": STEPS, "size": 96}
    plain = hookviz.visualize_diverse(lite0, "blocks.5", 3, diversity=0.0, **kwargs)
    diverse = hookviz.visualize_diverse(lite0, "blocks.5", 3, **kwargs)
    assert len(diverse) == 3 and len({np.asarray(v.image).tobytes() for v in diverse}) == 3
    assert similarity(diverse) < similarity(plain)
    best_photo = max(channel_means(lite0, p, "blocks.5")[3] for p in natural_photos())
    assert all(channel_means(lite0, v.image, "blocks.5")[3] > 2 * best_photo for v in diverse)


def test_a_vision_transformer_is_visualized_at_its_own_input_size():
    loaded = hookviz.load_model("timm:vit_tiny_patch16_224", pretrained=False)
    assert loaded.tokens is not None
    assert loaded.preprocessing.multiple == 16  # dynamic image size: any multiple of a patch
    vis = hookviz.visualize(loaded, "blocks.3", 7, steps=3, size=70)
    assert vis.image.size == (70, 70) and vis.fed_size == (64, 64)
    assert np.isfinite(vis.objective).all() and vis.objective[-1] > vis.objective[0]
    fixed = hookviz.wrap_model(
        loaded.model,
        num_classes=loaded.num_classes,
        preprocessing=dataclasses.replace(loaded.preprocessing, fixed=True),
        device="cpu",
    )
    assert hookviz.visualize(fixed, target=2, steps=1, size=48).fed_size == (224, 224)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_visualization_matches_the_cpu_one_in_what_it_reaches():
    gpu = hookviz.load_model("efficientnet_lite0", device="cuda")
    vis = hookviz.visualize(gpu, "blocks.5", 3, steps=STEPS, size=SIZE)
    best_photo = max(channel_means(gpu, p, "blocks.5")[3] for p in natural_photos())
    assert channel_means(gpu, vis.image, "blocks.5")[3] >= 2 * best_photo
    assert all(p.grad is None for p in gpu.model.parameters())


class _StallsOnce(nn.Module):
    """Costs 20 ms per forward, and a second once (the third call): a step slowed by other work
    on the machine, which an estimate should not take for the rate."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        time.sleep(1.0 if self.calls == 3 else 0.02)
        return x


def test_a_visualization_estimate_is_not_moved_by_one_slow_step():
    torch.manual_seed(0)
    stall = _StallsOnce()
    module = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), stall, nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        nn.Linear(8, 4),
    )  # fmt: skip
    loaded = hookviz.wrap_model(module, num_classes=4, device="cpu")
    per_step = hookviz.visualization_seconds(loaded, "2", 0, steps=99, size=32) / 100
    assert stall.calls >= 4
    assert per_step < 0.3, per_step  # the 20 ms steps', not the slow one's
