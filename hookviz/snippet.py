"""Python source that reproduces a view of the app with the hookviz API ("reproduce in Python").

The snippet is generated from plain values, so the page can show it and the tests can run it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from . import render
from .core.features import WEIGHT_ORDERINGS


@dataclass(frozen=True)
class View:
    """Everything that defines what the page shows.

    Attributes:
        model: registry name.
        pretrained: trained (True) or random (False) weights.
        image: a file name for an uploaded image, or None for the bundled sample photo.
        layer: the hooked layer.
        target: the explained class index, or None for the top-1 prediction.
        method: the CAM method.
        channels: how many feature maps the grid shows.
        order: channel ordering: ``"mean"``, ``"max"``, ``"index"``, or by the CAM's channel
            weights ``"weight"`` / ``"weight_x_mean"`` (methods with one weight per channel).
        scale: ``"channel"`` or ``"shared"`` colour scale.
        grid_cmap: feature-map colormap.
        cam_cmap: heatmap colormap.
        alpha: heatmap opacity in the overlay.
        columns: tiles per row of the grid.
        checkpoint: the file of the user's own weights for ``model`` (an architecture), or None.
        class_names: the file of its class names, or None.
        task: the model's task (``LoadedModel.task``); ``"embedding"`` for a classifier
            loaded without its head.
        target_code: the target as a Python expression over ``hookviz.targets`` (``Box(...)``,
            ``Region(...)``, ``Similarity(reference)``), used instead of ``target``; it may
            use ``mask`` (a rectangle, from ``rectangle``) and ``reference``.
        rectangle: (x0, y0, x1, y1) of a region's rectangle in the image's pixels, or None.
        reference: the reference image's file name (an embedder's comparison), or None.
        labels: a zero-shot model's labels (``hookviz.zero_shot``), or None.
    """

    model: str
    pretrained: bool
    image: str | None
    layer: str
    target: int | None
    method: str = "gradcam"
    channels: int = render.DEFAULT_CHANNELS
    order: str = render.DEFAULT_ORDER
    scale: str = render.DEFAULT_SCALE
    grid_cmap: str = render.DEFAULT_GRID_CMAP
    cam_cmap: str = render.DEFAULT_CAM_CMAP
    alpha: float = render.DEFAULT_ALPHA
    columns: int = 8
    checkpoint: str | None = None
    class_names: str | None = None
    task: str = "classification"
    target_code: str | None = None
    rectangle: tuple[float, float, float, float] | None = None
    reference: str | None = None
    labels: tuple[str, ...] | None = None


_TARGETS = ("Box", "Region", "Similarity", "Text")
# what a model of each task answers besides its feature maps, and how the snippet prints it
_ANSWERS = {"detection": "detections", "segmentation": "categories", "embedding": "embedding"}
_FOUND_LINES = {
    "classification": """for index, name, probability in analysis.predictions:
    print(f"{name:30} {probability:.1%}")""",
    "detection": """for found in hookviz.detect(loaded, image, min_score=0.5):
    print(f"{found.name:20} {found.score:.0%} {found.box}")""",
    "segmentation": """for present in hookviz.segment(loaded, image).categories:
    print(f"{present.name:20} {present.share:.1%} of the pixels")""",
    "embedding": """print("cosine similarity:", analysis.cam.score)""",
}


def reproduce_snippet(view: View) -> str:
    """A short, runnable script that recreates ``view`` and writes its two pictures to files.

    Every value is written as a literal of its type (strings with ``repr``, numbers made
    numbers first), so that what a user typed (a file name, a label) stays a string in the
    script: a copied snippet never runs more than it shows."""
    view = dataclasses.replace(
        view,
        channels=int(view.channels),
        columns=int(view.columns),
        alpha=float(view.alpha),
        target=None if view.target is None else int(view.target),
    )
    image_line = (
        "image = hookviz.sample_image()  # Grace Hopper, shipped with matplotlib"
        if view.image is None
        else f"image = hookviz.load_image({view.image!r})"
    )
    weights = "" if view.pretrained else ", pretrained=False"
    if view.checkpoint is not None:
        weights = f", checkpoint={view.checkpoint!r}"
        if view.class_names is not None:
            weights += f", class_names={view.class_names!r}"
    if view.order in WEIGHT_ORDERINGS:
        # ordered by the CAM's channel weights alpha; each tile marked + (for) or - (against)
        channel_lines = (
            "channels, signs = order_by_weight(\n"
            f"    analysis.features.activations, analysis.cam.weights, {view.order!r}, "
            f"{view.channels}\n)"
        )
        signs = " signs=signs,"
        imports = "from hookviz.core.features import order_by_weight\n"
    else:
        channel_lines = (
            f"channels = analysis.features.channel_order({view.order!r}, {view.channels})"
        )
        signs = ""
        imports = ""
    method = "" if view.method == "gradcam" else f", method={view.method!r}"
    if view.task == "embedding" and view.checkpoint is None:
        weights += ', task="embedding"'
    target, setup = repr(view.target), ""
    if view.target_code is not None:
        used = sorted({name for name in _TARGETS if view.target_code.startswith(name + "(")})
        imports += f"from hookviz.targets import {', '.join(used)}\n"
        target = view.target_code
    if view.rectangle is not None:
        x0, y0, x1, y1 = (round(value) for value in view.rectangle)
        imports = "import numpy as np\n" + imports
        setup += (
            "mask = np.zeros((image.height, image.width), dtype=bool)  # the rectangle\n"
            f"mask[{y0}:{y1}, {x0}:{x1}] = True\n"
        )
    if view.reference is not None:
        setup += f"reference = hookviz.load_image({view.reference!r})\n"
    answers = _ANSWERS.get(view.task, "predictions")
    load = f"hookviz.load_model({view.model!r}{weights})"
    if view.labels is not None:
        load = f"hookviz.zero_shot({load}, {list(view.labels)!r})"
    return f"""import hookviz
from hookviz import render
{imports}
loaded = {load}
{image_line}
{setup}
# one hooked forward pass: {answers}, the layer's feature maps and the CAM
analysis = hookviz.analyze(loaded, image, layer={view.layer!r}, target={target}{method})
{_FOUND_LINES.get(view.task, _FOUND_LINES["classification"])}

{channel_lines}
grid = render.feature_grid(
    analysis.features.activations, channels,
    cmap={view.grid_cmap!r}, scale={view.scale!r}, columns={view.columns},{signs}
)
with open("feature_maps.png", "wb") as file:
    file.write(render.png_bytes(grid))

overlay = render.overlay(image, analysis.cam.heatmap, alpha={view.alpha!r}, cmap={view.cam_cmap!r})
overlay.save("gradcam_overlay.png")
"""
