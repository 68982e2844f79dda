"""What a CAM explains, beyond one class: ``Class``, ``Box`` (a detected object), ``Region`` (a
segmentation category), ``Similarity`` (to a reference image or vector) and ``Text`` (a zero-shot
model's label). Any callable taking the model's output and returning one score per image is a
target too; an integer is a ``Class``.

```python
from hookviz.targets import Box
found = hookviz.detect(loaded, image)
cam = hookviz.grad_cam(loaded, image, target=Box(found[0].box, found[0].label))
```

The scores are pytorch-grad-cam's (``ClassifierOutputTarget``, ``FasterRCNNBoxScoreTarget``,
``SemanticSegmentationTarget``, ``SimilarityToConceptTarget``): the same layer gives the same map.
"""

from .core.targets import (
    Box,
    Class,
    Region,
    Resolved,
    Similarity,
    Target,
    TargetContext,
    Text,
    default_target,
    resolve_target,
)

__all__ = [
    "Box",
    "Class",
    "Region",
    "Resolved",
    "Similarity",
    "Target",
    "TargetContext",
    "Text",
    "default_target",
    "resolve_target",
]
