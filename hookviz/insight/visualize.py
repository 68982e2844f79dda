"""Feature visualization: an image optimised from noise so that one channel of a layer (or one
class logit) is large (Olah, Mordvintsev & Schubert, "Feature Visualization", Distill 2017).

The parameterisation is the one that paper found to give recognisable pictures rather than
adversarial noise, written here from its description:

- the image lives in Fourier space, each frequency scaled by ``1 / f`` (natural images have
  that spectrum), so a step of the optimiser moves low frequencies as easily as high ones and
  the high-frequency patterns that fool a network in pixel space are not favoured;
- its colours live in a decorrelated space: the three principal components of ImageNet's
  pixel colours (the PCA of Krizhevsky et al. 2012, used for their colour augmentation), each
  scaled by its standard deviation, then a sigmoid to [0, 1];
- each step sees the image jittered, scaled and rotated at random (one ``grid_sample``), so
  only patterns that excite the channel wherever they fall survive.

Magnitude-constrained optimisation (Fel et al. 2023) fixes the Fourier magnitudes to those of
natural images and optimises the phase only; it needs a magnitude spectrum measured on a
dataset, which hookviz does not ship, and it spends its steps on a wider crop distribution.
The Lucid-style parameterisation needs nothing but the model.

The objective is read from the layer by a forward hook registered for the step and removed
after it, under the model's lock; for a channel the forward stops at the layer (nothing
downstream is computed). The model stays frozen: the only tensor with a gradient is the
spectrum. Deterministic for a given seed on the CPU (every random draw comes from one seeded
generator).
"""

from __future__ import annotations

import io
import itertools
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image

from ..core.forward_pass import check_target
from ..core.grids import grid_view
from ..core.hooks import StopForward, _grid_of, forward_hooks, resolve_modules
from ..core.inputs import extract_logits
from ..core.loaded import LoadedModel
from ..core.methods import CancelledError
from ..errors import LayerError, TargetError

# ImageNet's pixel-colour PCA (Krizhevsky et al. 2012): eigenvectors as columns, eigenvalues.
_COLOUR_VECTORS = torch.tensor(
    [[-0.5675, 0.7192, 0.4009], [-0.5808, -0.0045, -0.8140], [-0.5836, -0.6948, 0.4203]]
)
_COLOUR_VALUES = torch.tensor([0.2175, 0.0188, 0.0045])
# Each component scaled by its standard deviation, relative to the strongest (luminance), so a
# unit step in any component is a plausible colour change.
COLOUR_BASIS = _COLOUR_VECTORS * (_COLOUR_VALUES / _COLOUR_VALUES.max()).sqrt()

Progress = Callable[[int, int], "bool | None"]


@dataclass(frozen=True)
class Visualization:
    """An image optimised to excite one channel (or one class).

    Attributes:
        image: the picture, RGB, ``size`` x ``size``.
        objective: (steps,) float32, the objective at each step (on that step's jittered view).
        activation: the objective on ``image`` itself, untransformed (one forward at the end).
        layer: the layer read (None for a class visualization).
        channel: the channel maximised (None for a class visualization).
        target: the class whose logit was maximised (None for a channel).
        seed: the seed of the initial noise and of every transform.
        steps: optimisation steps.
        size: side of the image in pixels.
        fed_size: (h, w) the model saw (``size`` for a CNN; the native size for a ViT).
    """

    image: Image.Image = field(repr=False)
    objective: np.ndarray = field(repr=False)
    activation: float
    layer: str | None
    channel: int | None
    target: int | None
    seed: int
    steps: int
    size: int
    fed_size: tuple[int, int]

    def _repr_png_(self) -> bytes:
        buffer = io.BytesIO()
        self.image.save(buffer, format="PNG")
        return buffer.getvalue()


def visualize(
    loaded: LoadedModel,
    layer: str | None = None,
    channel: int | None = None,
    target: int | str | None = None,
    steps: int = 256,
    size: int | None = None,
    seed: int = 0,
    progress: Progress | None = None,
    *,
    learning_rate: float = 0.05,
    transforms: bool = True,
) -> Visualization:
    """Optimise an image from noise so that ``channel`` of ``layer`` (its mean activation) or
    the logit of class ``target`` is large.

    Args:
        loaded: the model (stays frozen; no hook or gradient is left on it).
        layer: the layer whose channel is maximised (dotted name, as in ``list_layers``).
        channel: the channel of ``layer``; give this or ``target``, not both.
        target: a class index or name: a class visualization (the logit is maximised).
        steps: optimisation steps (Adam).
        size: side of the square image; default the model's native size.
        seed: seeds the initial noise and the random transforms.
        progress: called before each step with (steps done, steps); returning True cancels
            (raises ``CancelledError``); a UI may also raise from it.
        learning_rate: Adam's step size on the spectrum (0.05 suits every model tried).
        transforms: random jitter, scale and rotation at each step (off: plain optimisation,
            which drifts towards high-frequency patterns that only work at one position).

    Raises:
        ValueError: neither or both of ``channel`` and ``target``, or bad steps/size.
        LayerError: an unknown layer, a channel out of range.
        TargetError: a class out of range or unknown.
    """
    return visualize_diverse(
        loaded,
        layer,
        channel,
        target,
        count=1,
        steps=steps,
        size=size,
        seed=seed,
        progress=progress,
        learning_rate=learning_rate,
        transforms=transforms,
        diversity=0.0,
    )[0]


def visualize_diverse(
    loaded: LoadedModel,
    layer: str | None = None,
    channel: int | None = None,
    target: int | str | None = None,
    count: int = 4,
    steps: int = 256,
    size: int | None = None,
    seed: int = 0,
    progress: Progress | None = None,
    *,
    learning_rate: float = 0.05,
    transforms: bool = True,
    diversity: float = 1.0,
) -> list[Visualization]:
    """``count`` visualizations of one channel (or class) that differ from each other.

    They are optimised together, and the objective subtracts ``diversity`` times the mean
    cosine similarity between the images' Gram matrices at ``layer`` (their channel
    co-activation, which captures style rather than position), scaled to the objective's size,
    so each image has to find its own way to excite the channel (Lucid's diversity term).

    Args: as ``visualize``, plus ``count`` (images) and ``diversity`` (0: independent; no
    effect on one image).
    """
    target_index = _resolve_target(loaded, target)
    if (channel is None) == (target_index is None):
        raise ValueError("give a channel (of a layer) or a target class, not both or neither")
    if channel is not None and layer is None:
        raise ValueError("a channel needs its layer")
    if channel is not None:
        if isinstance(channel, bool) or not float(channel).is_integer():
            raise LayerError(f"channel must be an integer index, got {channel!r}")
        channel = int(channel)
    if diversity and count > 1 and layer is None:
        raise ValueError("diversity is measured at a layer: give one")
    if steps < 1 or count < 1:
        raise ValueError(f"steps and count must be at least 1, got {steps} and {count}")
    preprocessing = loaded.preprocessing
    size = int(size or preprocessing.size)
    if size < 16:
        raise ValueError(f"size must be at least 16 pixels, got {size}")
    fed = _fed_size(loaded, size)
    modules = resolve_modules(loaded.model, [layer]) if layer is not None else {}

    generator = torch.Generator().manual_seed(int(seed))
    image = FourierImage(count, size, generator, loaded.device)
    optimiser = torch.optim.Adam([image.spectrum], lr=learning_rate)
    mean = torch.tensor(preprocessing.mean, device=loaded.device).view(1, 3, 1, 1)
    std = torch.tensor(preprocessing.std, device=loaded.device).view(1, 3, 1, 1)
    dtype = _model_dtype(loaded)

    def objective_of(pixels: torch.Tensor, with_gram: bool) -> tuple[torch.Tensor, Any]:
        batch = ((pixels - mean) / std).to(dtype)
        if loaded.channels_last:
            batch = batch.contiguous(memory_format=torch.channels_last)
        maps = _read(loaded, modules, layer, batch, need_logits=target_index is not None)
        if target_index is not None:
            values = maps.logits[:, target_index].float()
        else:
            if not 0 <= channel < maps.grid.shape[1]:
                raise LayerError(
                    f"channel {channel} is out of range: {layer!r} has channels 0 to "
                    f"{maps.grid.shape[1] - 1}"
                )
            values = maps.grid[:, channel].float().mean(dim=(1, 2))
        return values, (maps.grid if with_gram else None)

    trace = np.zeros(steps, dtype=np.float32)
    with torch.enable_grad():
        for step in range(steps):
            if progress is not None and progress(step, steps):
                raise CancelledError("the visualization was cancelled")
            pixels = image.pixels()
            if transforms:
                pixels = random_view(pixels, fed, generator)
            elif tuple(pixels.shape[-2:]) != fed:
                pixels = F.interpolate(pixels, size=fed, mode="bilinear", align_corners=False)
            values, grid = objective_of(pixels, with_gram=diversity > 0 and count > 1)
            loss = -values.mean()
            if grid is not None:
                loss = loss + diversity * values.detach().abs().mean() * gram_similarity(grid)
            # the gradient of the spectrum alone: nothing is accumulated on the shared model
            (image.spectrum.grad,) = torch.autograd.grad(loss, [image.spectrum])
            optimiser.step()
            trace[step] = float(values.detach().mean())

    with torch.no_grad():
        final = image.pixels()
        view = (
            final
            if tuple(final.shape[-2:]) == fed
            else F.interpolate(final, size=fed, mode="bilinear", align_corners=False)
        )
        activations = objective_of(view, with_gram=False)[0].cpu().tolist()
    pictures = (final.permute(0, 2, 3, 1).cpu().numpy() * 255.0 + 0.5).astype(np.uint8)
    return [
        Visualization(
            image=Image.fromarray(pictures[index]),
            objective=trace.copy(),
            activation=float(activations[index]),
            layer=layer,
            channel=channel,
            target=target_index,
            seed=int(seed),
            steps=int(steps),
            size=size,
            fed_size=fed,
        )
        for index in range(count)
    ]


def visualization_seconds(
    loaded: LoadedModel,
    layer: str | None = None,
    channel: int | None = None,
    target: int | str | None = None,
    steps: int = 256,
    size: int | None = None,
    count: int = 1,
) -> float:
    """About how long ``visualize`` (``count`` > 1: ``visualize_diverse``) takes with these
    settings here, from five real steps timed now: the median of steps 2 to 4 (the first,
    which allocates, is not counted; one step slowed by other work on the machine does not
    move a median). Costs about five steps."""
    marks: list[float] = []

    def mark(step: int, total: int) -> None:
        marks.append(time.perf_counter())

    visualize_diverse(
        loaded,
        layer,
        channel,
        target,
        count=count,
        steps=5,
        size=size,
        progress=mark,
    )
    per_step = statistics.median(b - a for a, b in itertools.pairwise(marks[1:]))
    return per_step * (steps + 1)  # + 1: the closing forward and the picture


class FourierImage:
    """``count`` RGB images of ``size`` x ``size`` parameterised by a 1/f-scaled spectrum in
    decorrelated colour; ``pixels()`` gives them in [0, 1]."""

    def __init__(
        self, count: int, size: int, generator: torch.Generator, device: torch.device
    ) -> None:
        fy = torch.fft.fftfreq(size)[:, None]
        fx = torch.fft.rfftfreq(size)[None, :]
        frequency = (fy * fy + fx * fx).sqrt()
        # 1/f, with the zero frequency treated as the lowest non-zero one
        self.scale = (1.0 / frequency.clamp(min=1.0 / size)).to(device)
        self.size = size
        # small: the first image is a near-uniform grey, so no initial pattern is favoured
        shape = (count, 3, size, size // 2 + 1, 2)
        self.spectrum = (0.01 * torch.randn(shape, generator=generator)).to(device)
        self.spectrum.requires_grad_(True)
        self.basis = COLOUR_BASIS.to(device)

    def pixels(self) -> torch.Tensor:
        spectrum = torch.view_as_complex(self.spectrum) * self.scale
        # a quarter: Adam's first steps then move the sigmoid's input by about 0.1, a visible
        # but not saturating change (larger factors saturate colours within a few steps)
        decorrelated = torch.fft.irfft2(spectrum, s=(self.size, self.size), norm="ortho") / 4
        rgb = torch.einsum("ij,njhw->nihw", self.basis, decorrelated)
        return torch.sigmoid(rgb)


def random_view(
    pixels: torch.Tensor, out_size: tuple[int, int], generator: torch.Generator
) -> torch.Tensor:
    """Each image jittered (up to 1/14 of its side: 16 px at 224), scaled (0.95 to 1.05) and
    rotated (up to 10 degrees) at random, with grey beyond its edges (as if padded by 1/18 of
    its side), resampled once to ``out_size``."""
    count = pixels.shape[0]
    angle = (torch.rand(count, generator=generator) * 2 - 1) * math.radians(10)
    scale = 0.95 + torch.rand(count, generator=generator) * 0.10
    shift = (torch.rand(count, 2, generator=generator) * 2 - 1) * (2.0 / 14)
    zoom = (1 + 2 / 18) / scale  # > 1: the view reaches past the image, into the grey padding
    cos, sin = angle.cos() * zoom, angle.sin() * zoom
    theta = torch.stack(
        [
            torch.stack([cos, -sin, shift[:, 0]], dim=1),
            torch.stack([sin, cos, shift[:, 1]], dim=1),
        ],
        dim=1,
    ).to(pixels.device, pixels.dtype)
    grid = F.affine_grid(theta, [count, 3, *out_size], align_corners=False)
    # sampled around grey (0.5), so the region beyond the image reads as grey, not black
    return F.grid_sample(pixels - 0.5, grid, mode="bilinear", align_corners=False) + 0.5


def gram_similarity(grid: torch.Tensor) -> torch.Tensor:
    """Mean cosine similarity between the Gram matrices of the images of ``grid`` (N, C, h, w),
    over all pairs (N >= 2)."""
    flat = grid.float().flatten(2)
    grams = F.normalize((flat @ flat.transpose(1, 2)).flatten(1), dim=1)
    similarity = grams @ grams.T
    count = grid.shape[0]
    return (similarity.sum() - similarity.diagonal().sum()) / (count * (count - 1))


@dataclass
class _Read:
    grid: torch.Tensor | None = None
    logits: torch.Tensor | None = None


def _read(
    loaded: LoadedModel,
    modules: dict[str, Any],
    layer: str | None,
    batch: torch.Tensor,
    *,
    need_logits: bool,
) -> _Read:
    """One forward of ``batch`` with the layer's output (as an (N, C, h, w) grid, for a
    transformer too) and, when asked, the logits."""
    read = _Read()
    grids = grid_view(loaded.tokens, batch)

    def hook_for(name: str):
        def hook(module: Any, inputs: Any, output: Any) -> None:
            if not isinstance(output, torch.Tensor):
                raise LayerError(
                    f"layer {name!r} returns {type(output).__name__}, not a feature-map tensor"
                )
            grid = _grid_of(name, output, grids) if grids is not None else output
            if grid.dim() == 2:
                grid = grid[:, :, None, None]  # a pooled or linear layer: one value a channel
            if grid.dim() != 4:
                raise LayerError(f"layer {name!r} outputs {tuple(output.shape)}: not a map")
            read.grid = grid
            if not need_logits:
                raise StopForward

        return hook

    with loaded.lock, forward_hooks(modules, hook_for):
        try:
            output = loaded.model(batch)
        except StopForward:
            return read
    if layer is not None and read.grid is None:
        raise LayerError(f"layer {layer!r} did not run in the forward pass")
    read.logits = extract_logits(output)
    return read


def _resolve_target(loaded: LoadedModel, target: int | str | None) -> int | None:
    if target is None:
        return None
    if isinstance(target, str):
        try:
            return loaded.class_index(target)
        except Exception as error:
            raise TargetError(str(error)) from error
    check_target(loaded, target, classes_only=True)
    return int(target)


def _fed_size(loaded: LoadedModel, size: int) -> tuple[int, int]:
    """What the model sees for a ``size`` x ``size`` image: the image itself for a CNN, the
    native square for a ViT of fixed size, rounded to its patch multiple otherwise."""
    preprocessing = loaded.preprocessing
    if preprocessing.fixed:
        return preprocessing.size, preprocessing.size
    side = max(size, preprocessing.min_side)
    if preprocessing.multiple > 1:
        step = preprocessing.multiple
        side = max(step, round(side / step) * step)
    return side, side


def _model_dtype(loaded: LoadedModel) -> torch.dtype:
    param = next(loaded.model.parameters(), None)
    return param.dtype if param is not None and param.is_floating_point() else torch.float32
