"""A user's checkpoint on a known architecture: the head sized from the checkpoint, every key
and shape checked, the class names matched to the head.

The architecture is a torchvision name, a bundled name (built here to match timm's
``tf_efficientnet_lite{N}``, so its checkpoints are timm's) or ``timm:NAME``.
It is built once with its default head to learn its keys, the checkpoint's keys are fitted to
them (``checkpoints.fit_keys``), the class count is read from the checkpoint's classifier weights,
and the architecture is built again with that head and loaded strictly.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from ..core.preprocess import Preprocessing
from ..errors import CheckpointError, ModelError
from . import checkpoints, timm_zoo, torchvision_zoo
from .bundled import BUNDLED
from .checkpoints import CheckpointSource, ClassNames
from .efficientnet_lite import build_efficientnet_lite


@dataclass(frozen=True)
class Built:
    """A module with the user's weights, ready for ``registry._ready``."""

    module: nn.Module
    preprocessing: Preprocessing
    categories: tuple[str, ...]
    loaded_from: str


def build_from_checkpoint(
    name: str, source: CheckpointSource, class_names: ClassNames | None
) -> Built:
    """Build ``name`` with the weights in ``source``.

    Raises:
        CheckpointError: unreadable or unsafe file, keys or shapes that do not fit, or class
            names whose count differs from the checkpoint's classes.
        ModelError: unknown architecture.
    """
    make, preprocessing = _architecture(name)
    checkpoint = checkpoints.read_checkpoint(source)
    # Building initialises weights at random: the caller's random state stays untouched.
    with torch.random.fork_rng(devices=[]):
        default = make(None, checkpoint.state)
        expected = default.state_dict()
        state, fitted = checkpoints.fit_keys(checkpoint.state, expected)
        module = default
        classes = _head_classes(default, expected, state)
        count = classes if classes is not None else _default_classes(default, expected)
        if classes is not None and classes != _default_classes(default, expected):
            module = make(classes, state)
            expected = module.state_dict()
    report = checkpoints.key_report(state, expected)
    if report is not None:
        raise CheckpointError(
            f"the checkpoint {checkpoint.label} does not fit the architecture {name!r}: its "
            f"keys or shapes differ (state dict keys: {len(state)}, architecture: "
            f"{len(expected)}).\n{report}\nPick the architecture the model was trained as; "
            "hookviz never loads part of a checkpoint."
        )
    module.load_state_dict(state, strict=True)
    if name in torchvision_zoo.AUX_HEADS:
        torchvision_zoo.drop_aux_heads(module)
    categories = _categories(class_names, checkpoint, count)
    described = checkpoints.describe(checkpoint, fitted)
    return Built(module, preprocessing(module), categories, described)


def _architecture(
    name: str,
) -> tuple[Callable[[int | None, dict], nn.Module], Callable[[nn.Module], Preprocessing]]:
    """How to build ``name`` with a given class count (None: its default), and its
    preprocessing."""
    if name in BUNDLED:
        spec = BUNDLED[name]
        return _bundled_maker(spec.variant), lambda module: spec.preprocessing
    if timm_zoo.is_timm_name(name):
        return _timm_maker(timm_zoo.check_name(name)), timm_zoo.preprocessing
    if name in torchvision_zoo.cnn_names():
        prep = torchvision_zoo.preprocessing_of(name)
        return _torchvision_maker(name), lambda module: prep
    raise ModelError(
        f"unknown architecture {name!r}: give a torchvision name such as 'resnet50' "
        "(see hookviz.model_names()) or a timm name with the prefix 'timm:', such as "
        "'timm:convnext_tiny'"
    )


def _bundled_maker(variant: int) -> Callable[[int | None, dict], nn.Module]:
    def make(classes: int | None, state: dict) -> nn.Module:
        return build_efficientnet_lite(variant, num_classes=1000 if classes is None else classes)

    return make


def _timm_maker(bare: str) -> Callable[[int | None, dict], nn.Module]:
    def make(classes: int | None, state: dict) -> nn.Module:
        import timm

        extra = {} if classes is None else {"num_classes": classes}
        return timm.create_model(bare, pretrained=False, **extra, **timm_zoo.family_kwargs(bare))

    return make


def _torchvision_maker(name: str) -> Callable[[int | None, dict], nn.Module]:
    def make(classes: int | None, state: dict) -> nn.Module:
        from torchvision import models

        extra: dict = {} if classes is None else {"num_classes": classes}
        if name in torchvision_zoo.AUX_HEADS:
            # the auxiliary heads are there when they were trained (torchvision's default)
            aux = any(key.split(".")[0] in ("aux1", "aux2", "AuxLogits") for key in state)
            extra.update(aux_logits=aux, init_weights=False)
        return models.get_model(name, weights=None, **extra)

    return make


def _default_classes(module: nn.Module, expected: dict) -> int:
    count = getattr(module, "num_classes", None)
    if isinstance(count, int) and count > 0:
        return count
    return 1000  # torchvision's default head


def _head_classes(module: nn.Module, expected: dict, state: dict) -> int | None:
    """The checkpoint's class count: the first dimension of its classifier weight."""
    heads = checkpoints.head_keys(expected, _default_classes(module, expected))
    weight = next((key for key in heads if key.endswith("weight")), heads[0] if heads else None)
    if weight is None:
        # a headless default (timm's DINOv2 ViTs: num_classes=0): timm names its classifier
        classifier = (getattr(module, "pretrained_cfg", None) or {}).get("classifier")
        weight = f"{classifier}.weight" if isinstance(classifier, str) else None
    if weight is None or weight not in state or state[weight].ndim == 0:
        return None
    return int(state[weight].shape[0])


def _categories(
    class_names: ClassNames | None, checkpoint: checkpoints.Checkpoint, count: int
) -> tuple[str, ...]:
    if class_names is not None:
        names, origin = checkpoints.read_class_names(class_names), ""
    elif checkpoint.class_names is not None:
        names, origin = checkpoint.class_names, f" (in the metadata of {checkpoint.label})"
    else:
        return tuple(f"class {index}" for index in range(count))
    if len(names) != count:
        raise CheckpointError(
            f"{len(names)} class names{origin} for a checkpoint with {count} classes"
            f": give exactly {count} names, one per line, in the order of the outputs"
        )
    return names
