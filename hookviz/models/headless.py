"""A classifier as an embedder: its classification head removed, so the model outputs the
pooled features the head read (what pytorch-grad-cam's embeddings tutorial explains)."""

from __future__ import annotations

from torch import nn

from ..errors import ModelError


def headless(module: nn.Module, num_classes: int, name: str) -> nn.Module:
    """``module`` (changed in place) outputting the features its head took: timm's own
    ``reset_classifier(0)`` where the model has it, else its last layer with ``num_classes``
    outputs (a ``Linear``, or a 1x1 ``Conv2d`` as in SqueezeNet) replaced by ``Identity``.

    Raises:
        ModelError: no such layer (the model's head is not one layer of its class count).
    """
    reset = getattr(module, "reset_classifier", None)
    if callable(reset):
        reset(0)
        return module
    heads = [
        path
        for path, layer in module.named_modules()
        if (isinstance(layer, nn.Linear) and layer.out_features == num_classes)
        or (
            isinstance(layer, nn.Conv2d)
            and layer.out_channels == num_classes
            and layer.kernel_size == (1, 1)
        )
    ]
    if not heads:
        raise ModelError(
            f"cannot find the classification head of {name!r} (a last Linear or 1x1 Conv2d "
            f"with {num_classes} outputs) to remove it; wrap your own embedder with "
            "hookviz.wrap_model(..., task='embedding')"
        )
    parent_path, _, attribute = heads[-1].rpartition(".")
    parent = module.get_submodule(parent_path) if parent_path else module
    setattr(parent, attribute, nn.Identity())
    return module
