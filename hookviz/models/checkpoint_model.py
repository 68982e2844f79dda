"""A user's checkpoint on a known architecture: the head sized from the checkpoint, every key
and shape checked, the class names matched to the head.

The architecture (``Architecture``, given by the source that owns the name) is built once with
its default head to learn its keys, the checkpoint's keys are fitted to them
(``checkpoints.fit_keys``), the class count is read from the checkpoint's classifier weights,
and the architecture is built again with that head and loaded strictly.
"""

from __future__ import annotations

import torch
from torch import nn

from ..errors import CheckpointError
from . import checkpoints
from .base import Architecture, Built
from .checkpoints import CheckpointSource, ClassNames


def build_from_checkpoint(
    name: str,
    architecture: Architecture,
    source: CheckpointSource,
    class_names: ClassNames | None,
) -> Built:
    """Build ``architecture`` (called ``name`` in messages) with the weights in ``source``.

    Raises:
        CheckpointError: unreadable or unsafe file, keys or shapes that do not fit, or class
            names whose count differs from the checkpoint's classes.
    """
    make = architecture.make
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
    mismatch = checkpoints.key_mismatch(state, expected)
    if mismatch is not None:
        raise checkpoints.CheckpointMismatchError(
            f"the checkpoint {checkpoint.label} does not fit the architecture {name!r}: its "
            f"keys or shapes differ (state dict keys: {len(state)}, architecture: "
            f"{len(expected)}).\n{mismatch.text()}\nPick the architecture the model was "
            "trained as; hookviz never loads part of a checkpoint.",
            mismatch,
        )
    module.load_state_dict(state, strict=True)
    if architecture.finish is not None:
        architecture.finish(module)
    categories = _categories(class_names, checkpoint, count)
    described = checkpoints.describe(checkpoint, fitted)
    return Built(module, architecture.preprocessing(module), categories, described)


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
