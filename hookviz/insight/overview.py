"""The whole network at a glance: every stage in execution order, each with its output's shape,
its receptive field, its strongest channels and the Grad-CAM of the class there, from one
forward pass and one backward pass for every stage at once (as the layer sweep)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from PIL import Image

from ..core.cam import GradCAM, grad_cam_result
from ..core.forward_pass import check_target
from ..core.inputs import ImageInput, prepare_input
from ..core.layers import layer_table
from ..core.loaded import LoadedModel
from ..core.pipeline import hooked_gradients
from ..errors import LayerError
from .evidence import stage_layers
from .receptive_fields import FieldRecorder, recording

STRONGEST = 4  # channels shown per stage
_MOST_STAGES = 64  # ``stage_layers``'s count: every stage a network has


@dataclass(frozen=True)
class Stage:
    """One layer of an overview.

    Attributes:
        layer: its name.
        shape: (C, h, w) of its output for this image.
        receptive_field: (height, width) of the part of the model's input one cell of its grid
            sees, in input pixels; None where it is not known (after a windowed attention).
        channels: the indices of its strongest channels (by mean activation), strongest first.
        maps: (len(channels), h, w) float32, those channels' activations.
        cam: the Grad-CAM of the overview's class at this layer.
    """

    layer: str
    shape: tuple[int, int, int]
    receptive_field: tuple[int, int] | None
    channels: tuple[int, ...]
    maps: np.ndarray = field(repr=False)
    cam: GradCAM = field(repr=False)


@dataclass(frozen=True)
class Overview:
    """Every stage of a network on one image, in execution order (iterable, indexable).

    Attributes:
        stages: the ``Stage`` of each layer.
        class_index, class_name, probability: the class every stage's Grad-CAM explains.
        input_size: (H, W) of the model's input the receptive fields are counted on.
        image: the analysed picture, when there is one (never compared).
    """

    stages: tuple[Stage, ...]
    class_index: int
    class_name: str
    probability: float
    input_size: tuple[int, int]
    image: Image.Image | None = field(default=None, repr=False, compare=False)

    def __iter__(self) -> Iterator[Stage]:
        return iter(self.stages)

    def __len__(self) -> int:
        return len(self.stages)

    def __getitem__(self, index: int) -> Stage:
        return self.stages[index]

    @property
    def layers(self) -> list[str]:
        return [stage.layer for stage in self.stages]

    def _repr_png_(self) -> bytes:
        """Each stage's Grad-CAM over the analysed image, in order and named, for Jupyter."""
        from .. import render  # deferred: pictures only when asked for

        return render.png_bytes(render.overview_picture(self))


def overview(
    loaded: LoadedModel,
    image: ImageInput,
    layers: Sequence[str] | str | None = None,
    target: int | None = None,
    *,
    channels: int = STRONGEST,
) -> Overview:
    """The network's stages on ``image``, from one forward and one backward pass.

    Args:
        loaded: a classifier (the Grad-CAMs explain a class).
        image: a PIL image or a preprocessed (1, 3, H, W) tensor.
        layers: None for the stages (a CNN's blocks at each resolution, a vision
            transformer's blocks: ``stage_layers``), ``"all"`` for every layer with a map of
            its own (``LayerTable.distinct``), or a list of layer names (put in execution
            order).
        target: the class (default: the top-1).
        channels: how many strongest channels each stage keeps (at least 1).

    Raises:
        LayerError: an unknown layer, or one whose grid does not follow the image.
        TargetError: a model without classes, or a class out of range.
    """
    if isinstance(channels, bool) or not isinstance(channels, int) or channels < 1:
        raise ValueError(
            f"channels is how many strongest channels to keep (1 or more); got {channels!r}"
        )
    names = _layers(loaded, layers)
    check_target(loaded, target, classes_only=True)
    batch, size = prepare_input(loaded, image)
    input_size = (int(batch.shape[-2]), int(batch.shape[-1]))
    modules = dict(loaded.model.named_modules())
    recorder = FieldRecorder(input_size)
    result = hooked_gradients(
        loaded,
        batch,
        names,
        target,
        during=lambda: recording(loaded.model, {n: modules[n] for n in names}, recorder),
    )
    probability = float(torch.softmax(result.logits.float(), dim=0)[result.index])
    stages = []
    for name in names:
        if name not in result.activations:
            continue
        activations = result.activations[name].float()
        strongest = activations.mean(dim=(-2, -1)).argsort(descending=True, stable=True)
        kept = strongest[: min(channels, activations.shape[0])]
        cam = grad_cam_result(
            activations,
            result.gradients[name],
            size,
            class_index=result.index,
            class_name=loaded.class_name(result.index),
            score=float(result.logits[result.index]),
            probability=probability,
            layer=name,
            method="gradcam",
            image=image if isinstance(image, Image.Image) else None,
        )
        stages.append(
            Stage(
                layer=name,
                shape=tuple(int(n) for n in activations.shape),
                receptive_field=recorder.fields.get(name),
                channels=tuple(int(c) for c in kept),
                maps=activations[kept].cpu().numpy(),
                cam=cam,
            )
        )
    return Overview(
        stages=tuple(stages),
        class_index=result.index,
        class_name=loaded.class_name(result.index),
        probability=probability,
        input_size=input_size,
        image=image if isinstance(image, Image.Image) else None,
    )


def _layers(loaded: LoadedModel, layers: Sequence[str] | str | None) -> list[str]:
    """The layers asked for, by their canonical names, in execution order."""
    table = layer_table(loaded)
    if layers is None:
        return stage_layers(loaded, count=_MOST_STAGES)
    if isinstance(layers, str) and layers == "all":
        return [layer.name for layer in table.distinct if layer.aligned]
    if isinstance(layers, str):
        layers = [layers]
    order = {layer.name: position for position, layer in enumerate(table.layers)}
    chosen = []
    for name in layers:
        found = table.get(name)
        if not found.aligned:
            raise LayerError(
                f"layer {name!r} has an output of fixed size that does not follow the image; "
                "pick a layer with a grid of its own"
            )
        if found.name not in chosen:
            chosen.append(found.name)
    return sorted(chosen, key=order.__getitem__)
