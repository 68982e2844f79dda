"""torchvision's detectors (Faster R-CNN, RetinaNet, FCOS, SSD, SSDlite, Mask and Keypoint
R-CNN's boxes) and segmenters (DeepLabV3, FCN, LRASPP), by their torchvision names, with their
COCO / VOC category names.

``loaded.model`` is the torchvision module itself. A detector takes [0, 1] images at their own
size and resizes them inside (its ``transform``); a segmenter takes an ImageNet-normalised image
with its short side at 520 pixels and returns ``{"out": (N, categories, H, W)}`` at its input's
size. Trained weights come from the torch hub cache (downloaded once, read weights-only);
untrained ones build offline, and an untrained detector keeps every box it finds (its scores are
near chance, under torchvision's usual threshold).
"""

from __future__ import annotations

import os
from functools import cache
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..core.loaded import Task
from ..core.preprocess import Preprocessing
from . import zoo_index
from .base import Built, ModelInfo, ModelRequest, ModelSource
from .downloads import download_label
from .torchvision_zoo import trained_state

# The keyword of each detector family's score threshold (the boxes its postprocessing keeps).
_SCORE_THRESHOLD = {
    "fasterrcnn_": "box_score_thresh",
    "maskrcnn_": "box_score_thresh",
    "keypointrcnn_": "box_score_thresh",
    "retinanet_": "score_thresh",
    "fcos_": "score_thresh",
    "ssd": "score_thresh",
}
# torchvision's segmentation weights: the short side resized to this, ImageNet statistics.
_SEGMENTER_SIZE = 520
_IMAGENET_MEAN = (0.485, 0.456, 0.406)
_IMAGENET_STD = (0.229, 0.224, 0.225)


@cache
def task_names() -> dict[str, Task]:
    """Every torchvision detector and segmenter, name -> task (from the stored index when it
    matches the installed torchvision: no import of torchvision)."""
    part = _part()
    if part is not None:
        return {name: entry["task"] for name, entry in part["models"].items()}
    return {name: entry["task"] for name, entry in _live().items()}


def _part() -> dict[str, Any] | None:
    index = zoo_index.stored().get("torchvision_tasks")
    if index is None or index.get("version") != zoo_index.installed_version("torchvision"):
        return None
    return index


def _live() -> dict[str, dict[str, Any]]:
    from torchvision import models

    found: dict[str, dict[str, Any]] = {}
    for task, module in (("detection", models.detection), ("segmentation", models.segmentation)):
        for name in models.list_models(module=module):
            weights = models.get_model_weights(name).DEFAULT
            size = weights.meta.get("_file_size")
            found[name] = {
                "task": task,
                "file": os.path.basename(weights.url),
                "mb": float(size) if size else None,
            }
    return dict(sorted(found.items()))


def _entry(name: str) -> dict[str, Any]:
    part = _part()
    return part["models"][name] if part is not None else _live()[name]


def weights_path(name: str) -> Path:
    """Where the default weights of ``name`` are (or will be) in the torch hub cache."""
    return Path(torch.hub.get_dir()) / "checkpoints" / _entry(name)["file"]


def _build(request: ModelRequest) -> Built:
    from torchvision import models

    name = request.name
    task = task_names()[name]
    weights = models.get_model_weights(name).DEFAULT
    categories = tuple(weights.meta["categories"])
    # No backbone weights: they would be downloaded, and trained weights replace them anyway.
    options: dict[str, Any] = {"weights": None, "weights_backbone": None}
    if request.pretrained:
        state = trained_state(name, weights, weights_path(name), request.download)
        if name.startswith("fcn_") or name.startswith("deeplabv3_"):
            options["aux_loss"] = any(key.startswith("aux_classifier.") for key in state)
        module = models.get_model(name, num_classes=len(categories), **options)
        module.load_state_dict(state)
    else:
        if task == "detection":
            options[_threshold_keyword(name)] = 0.0
        module = models.get_model(name, num_classes=len(categories), **options)
    return Built(module, preprocessing_of(module, task), categories, task=task)


def _threshold_keyword(name: str) -> str:
    return next(word for prefix, word in _SCORE_THRESHOLD.items() if name.startswith(prefix))


def preprocessing_of(module: nn.Module, task: Task) -> Preprocessing:
    """A detector: the image as it is ([0, 1], no statistics: the model normalises and resizes
    inside), shrunk only beyond its own largest size; SSD's fixed square taken as it takes it.
    A segmenter: torchvision's evaluation transform, whole (short side 520, no crop)."""
    if task == "segmentation":
        return Preprocessing(
            size=_SEGMENTER_SIZE, mean=_IMAGENET_MEAN, std=_IMAGENET_STD, crop_fraction=1.0
        )
    transform = module.transform
    fixed = getattr(transform, "fixed_size", None)
    if fixed:
        return Preprocessing(size=int(fixed[0]), mean=(0.0,) * 3, std=(1.0,) * 3, fixed=True)
    return Preprocessing(
        size=int(transform.max_size), mean=(0.0,) * 3, std=(1.0,) * 3, own_size=True
    )


def _catalog() -> list[ModelInfo]:
    rows = []
    for name, task in task_names().items():
        if weights_path(name).is_file():
            rows.append(ModelInfo(name, "torchvision", True, "cached", task))
        else:
            status = download_label(_entry(name)["mb"])
            rows.append(ModelInfo(name, "torchvision", False, status, task))
    return rows


def _index() -> dict[str, Any]:
    return {"torchvision_tasks": zoo_index.versioned("torchvision", _live())}


SOURCE = ModelSource(
    kind="torchvision",
    identity="torchvision detectors and segmenters",
    names=lambda: list(task_names()),
    catalog=_catalog,
    build=_build,
    index=_index,
)
