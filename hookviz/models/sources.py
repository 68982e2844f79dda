"""The model sources, registered once, in order.

The order is that of every listing (``model_names``, ``model_catalog``, ``architecture_names``)
and of resolving a name that no source's prefix claims: a name listed by two sources is the
first one's. A new source is a module that defines its ``ModelSource`` and one line here.
"""

from __future__ import annotations

from . import (
    bundled,
    cards,
    huggingface,
    registry,
    timm_zoo,
    torchvision_tasks,
    torchvision_zoo,
    user_code,
    zero_shot,
)

for _source in (
    bundled.SOURCE,  # offline EfficientNet-Lite: "efficientnet_lite0"
    torchvision_zoo.SOURCE,  # torchvision's classification zoo: "resnet50"
    torchvision_tasks.SOURCE,  # its detectors and segmenters: "fasterrcnn_resnet50_fpn"
    timm_zoo.SOURCE,  # "timm:NAME"
    huggingface.SOURCE,  # transformers image classifiers: "hf:ORG/NAME"
    zero_shot.SOURCE,  # open_clip models, zero-shot over typed labels: "clip:ViT-B-32"
    cards.SOURCE,  # the model cards of HOOKVIZ_MODELS_DIR: "card:NAME"
    user_code.SOURCE,  # your own code, by the form of its name: "package.module:function"
):
    registry.register(_source)
