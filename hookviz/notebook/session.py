"""What the notebook widget shows, computed without any widget: the model and image it was
given, read as the library reads them, and the result of one (layer, class, method).

One ``ForwardPass`` is kept for the layer shown: a class or method change at the same layer
costs a backward pass (or nothing, for a result asked for before), not a new forward. The last
few results are remembered, so that the widget's traits can be checked and computed when they
are set (a value that fails leaves the widget as it was) and then shown without computing again.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from PIL import Image
from torch import nn

from ..attributions import Attribution, attribute, attribution_methods
from ..core.baseline_maps import BASELINE_ALIASES, BASELINES
from ..core.cam import GradCAM
from ..core.features import FeatureMaps
from ..core.forward_pass import ForwardPass, Prediction, check_target, resolve_layer
from ..core.inputs import extract_logits, prepare_input
from ..core.layers import layer_table
from ..core.methods import METHODS, MethodError, check_method
from ..core.own_pass_cams import OWN_PASS_METHODS
from ..core.pipeline import grad_cam
from ..errors import ImageError, ModelError
from ..images import fit_within, load_image
from ..models import LoadedModel, wrap_model

# The long side of the picture the widget draws on (the heatmap is sent on its pixel grid):
# as large as the results' own notebook pictures.
DISPLAY_LONG_SIDE = 768
# Results remembered (a few classes and methods back), and the passes of layers shown before.
_REMEMBERED = 12
_PASSES = 2

Result = GradCAM | Attribution


@dataclass(frozen=True)
class Shown:
    """One (layer, class, method) and what it gives.

    Attributes:
        layer: the layer's name (its feature maps are the grid).
        target: the class explained (None for a model without classes: its default target).
        method: the method's canonical name.
        result: a ``GradCAM`` for a CAM method, an ``Attribution`` for a pixel attribution.
        features: the layer's feature maps.
        predictions: the top-5 classes (empty for a model that does not score classes).
    """

    layer: str
    target: int | None
    method: str
    result: Result
    features: FeatureMaps
    predictions: tuple[Prediction, ...]

    @property
    def kind(self) -> str:
        return "attribution" if isinstance(self.result, Attribution) else "cam"

    def heatmap_at(self, size: tuple[int, int]) -> np.ndarray:
        """The result's map on a (H, W) grid, in [0, 1]."""
        if isinstance(self.result, GradCAM):
            return self.result.heatmap_at(size)
        values = Image.fromarray(self.result.map.astype(np.float32), mode="F")
        resized = values.resize((size[1], size[0]), Image.Resampling.BILINEAR)
        return np.clip(np.asarray(resized, dtype=np.float32), 0.0, 1.0)


def as_loaded(model: nn.Module | LoadedModel, image: Any, categories=None) -> LoadedModel:
    """``model`` as the library takes it: a ``LoadedModel`` as it is, a plain module wrapped as
    ``wrap_model`` wraps it (``categories`` names its classes; without them, the number of
    classes is read from the module's output on ``image``)."""
    if isinstance(model, LoadedModel):
        if categories is not None:
            raise ModelError(
                "categories names a plain nn.Module's classes; a LoadedModel has its own"
            )
        return model
    if not isinstance(model, nn.Module):
        raise ModelError(
            f"hookviz.show takes an nn.Module or a hookviz.LoadedModel, got {type(model).__name__}"
        )
    if categories is not None:
        return wrap_model(model, categories=list(categories))
    probe = wrap_model(model, num_classes=1)
    batch, _ = prepare_input(probe, image)
    with torch.no_grad():
        count = int(extract_logits(probe.model(batch)).shape[1])
    return wrap_model(model, num_classes=count, preprocessing=probe.preprocessing)


def as_image(image: Any) -> Image.Image | torch.Tensor:
    """``image`` as the library takes it: whatever ``load_image`` reads (a path, bytes, a file,
    a PIL image), a NumPy array (H, W), (H, W, 3|4) or (3, H, W), 8-bit or in [0, 1], or a
    preprocessed tensor (kept as it is)."""
    if isinstance(image, torch.Tensor):
        return image
    if isinstance(image, np.ndarray):
        return _from_array(image)
    return load_image(image)


def _from_array(array: np.ndarray) -> Image.Image:
    values = np.asarray(array)
    if values.ndim == 3 and values.shape[0] in (1, 3) and values.shape[-1] not in (1, 3, 4):
        values = values.transpose(1, 2, 0)  # channels first, as a tensor holds them
    if values.ndim == 3 and values.shape[-1] == 1:
        values = values[..., 0]
    if values.ndim not in (2, 3) or (values.ndim == 3 and values.shape[-1] not in (3, 4)):
        raise ImageError(
            f"expected an image array of shape (H, W), (H, W, 3), (H, W, 4) or (3, H, W), "
            f"got {array.shape}"
        )
    if values.dtype != np.uint8:
        if np.issubdtype(values.dtype, np.floating) and values.size and values.max() <= 1.0:
            values = values * 255.0
        values = np.clip(np.nan_to_num(values.astype(np.float32)), 0, 255).round()
        values = values.astype(np.uint8)
    return load_image(Image.fromarray(np.ascontiguousarray(values)))


def method_groups() -> dict[str, tuple[str, ...]]:
    """The methods the widget offers, by group, as its method picker lists them."""
    pixels = tuple(name for name in attribution_methods() if name not in BASELINES)
    return {"CAM": tuple(METHODS), "pixel attribution": pixels, "baseline": tuple(BASELINES)}


def check_any_method(method: object) -> str:
    """The canonical name of a CAM method, baseline or pixel attribution method; else a
    ``MethodError`` listing them."""
    try:
        return check_method(method)  # type: ignore[arg-type]
    except MethodError:
        name = BASELINE_ALIASES.get(method, method) if isinstance(method, str) else method
        if name in attribution_methods():
            return name  # type: ignore[return-value]
    groups = method_groups()
    raise MethodError(
        f"unknown method {method!r}; choose a CAM method ({', '.join(groups['CAM'])}), a "
        f"pixel attribution ({', '.join(groups['pixel attribution'])}) or a baseline "
        f"({', '.join(groups['baseline'])})"
    )


class Session:
    """A model and an image, and the results of the (layer, class, method) asked for."""

    def __init__(self, loaded: LoadedModel, image: Image.Image | torch.Tensor) -> None:
        self.loaded = loaded
        self.image = image
        self._passes: OrderedDict[str, ForwardPass] = OrderedDict()
        self._shown: OrderedDict[tuple, Shown] = OrderedDict()
        self._display: Image.Image | None = None

    def layers(self) -> list[str]:
        """The layers the picker offers: every hookable one, in execution order."""
        return [layer.name for layer in layer_table(self.loaded).hookable]

    def layer(self, name: str | None) -> str:
        """The hookable layer called ``name`` (None: the default one), or a ``LayerError``
        naming the closest names."""
        if name is not None and not isinstance(name, str):
            raise TypeError(f"layer must be a layer's name, got {type(name).__name__}")
        return resolve_layer(self.loaded, name)

    def target(self, target: object) -> int | None:
        """``target`` checked: None or a class index in range (else a ``TargetError``)."""
        if isinstance(target, np.integer):
            target = int(target)
        check_target(self.loaded, target, classes_only=self.loaded.scores_classes)
        return None if target is None else int(target)  # type: ignore[arg-type]

    def forward_pass(self, layer: str) -> ForwardPass:
        found = self._passes.get(layer)
        if found is None:
            found = ForwardPass(self.loaded, self.image, layer)
            self._passes[layer] = found
            while len(self._passes) > _PASSES:
                self._passes.popitem(last=False)
        self._passes.move_to_end(layer)
        return found

    def show(self, layer: str | None, target: object, method: object) -> Shown:
        """The result of ``method`` for class ``target`` at ``layer`` (each checked first; a
        class of None is the top-1)."""
        name = self.layer(layer)
        chosen = self.target(target)
        method = check_any_method(method)
        key = (name, chosen, method)
        kept = self._shown.get(key)
        if kept is not None:
            self._shown.move_to_end(key)
            return kept
        fp = self.forward_pass(name)
        if chosen is None and fp.predictions:
            chosen = fp.predictions[0].index
        result = self._result(fp, chosen, method)
        shown = Shown(name, chosen, method, result, fp.features, fp.predictions)
        for remembered in {key, (name, chosen, method)}:
            self._shown[remembered] = shown
        while len(self._shown) > _REMEMBERED:
            self._shown.popitem(last=False)
        return shown

    def _result(self, fp: ForwardPass, target: int | None, method: str) -> Result:
        if method in attribution_methods() and method not in BASELINES:
            options = {"layer": fp.layer} if method == "guided_gradcam" else {}
            return attribute(self.loaded, self.image, method, target, **options)
        if method in OWN_PASS_METHODS:
            # (a pass of their own, as hookviz.grad_cam runs them)
            return grad_cam(self.loaded, self.image, fp.layer, target, method)
        return fp.grad_cam(target, method)

    def display_picture(self) -> Image.Image:
        """The picture the overlay is drawn on: the analysed image (a tensor's with its
        normalisation undone), at most ``DISPLAY_LONG_SIDE`` pixels on its long side."""
        if self._display is None:
            if isinstance(self.image, Image.Image):
                picture = self.image
            else:
                batch, _ = prepare_input(self.loaded, self.image)
                picture = self.loaded.preprocessing.to_picture(batch)
            self._display = fit_within(picture.convert("RGB"), DISPLAY_LONG_SIDE)
        return self._display

    def image_digest(self) -> str:
        """An id of the display picture's content (the browser decodes each once)."""
        return hashlib.sha1(self.display_picture().tobytes()).hexdigest()[:16]
