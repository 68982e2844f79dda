"""``hookviz.show``: the overlay, the feature-map grid and the top-5 of one image in a notebook,
as a widget drawn by the page's own browser code (``hookviz/app/browser/js``).

The widget (``widget.py``, an ``anywidget.AnyWidget``) is imported on the first ``show``, so that
``import hookviz`` imports neither anywidget nor torch. ``session.py`` computes what it shows.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Sequence

    from torch import nn

    from ..models import LoadedModel
    from .widget import Widget

__all__ = ["show"]


def show(
    model: nn.Module | LoadedModel,
    image: Any,
    *,
    layer: str | None = None,
    target: int | None = None,
    method: str = "gradcam",
    categories: Sequence[str] | None = None,
) -> Widget:
    """A notebook widget of ``model`` on ``image``: the CAM overlay with its colour bar, the
    layer's feature-map grid and the top-5 classes, with a layer picker, the top-5 as class
    buttons, a method picker and the display options (opacity, colormaps, channels shown,
    channel order, colour scale).

    Display changes are redrawn in the browser, without the kernel. A layer, class or method
    picked in the browser is computed in the kernel and sent back; one that fails shows its
    message in the widget and keeps the picture as it was. Where widgets do not run (a notebook
    rendered to HTML without its widget state), the output is a static picture of the same.

    The widget's ``layer``, ``target`` and ``method`` can be set from Python (each is checked
    and computed as it is set: a bad value raises and changes nothing), and ``result`` is what
    they give: ``widget.result`` is ``hookviz.grad_cam(widget.loaded, widget.image,
    layer=widget.layer, target=widget.target, method=widget.method)`` for a CAM method, and
    ``hookviz.attribute(widget.loaded, widget.image, widget.method, widget.target)`` for a
    pixel attribution. The display options are ``opacity``, ``colormap``, ``grid_colormap``,
    ``channels``, ``order`` and ``scale``.

    Args:
        model: a ``hookviz.LoadedModel``, or any ``nn.Module`` that returns class scores
            (wrapped as ``hookviz.wrap_model`` wraps it).
        image: a path, encoded bytes, a file object or a PIL image (``hookviz.load_image``), a
            NumPy array ((H, W), (H, W, 3), (H, W, 4) or (3, H, W); 8-bit, or floats in
            [0, 1]), or a preprocessed (1, 3, H, W) tensor.
        layer: the layer shown (a name of ``hookviz.list_layers``); default: the model's
            default layer.
        target: the class explained; default: the top-1 class.
        method: a CAM method of ``hookviz.METHODS``, a baseline, or a pixel attribution method
            of ``hookviz.attribution_methods()``.
        categories: a plain module's class names; without them its classes are ``"class 0"``,
            ``"class 1"``, ... as many as its output has.

    Raises:
        ImportError: anywidget is missing (``pip install "hookviz[notebook]"``).
        ModelError: a model that is not an ``nn.Module``, or whose output is not class scores.
        ImageError: an image that cannot be read.
        LayerError: an unknown layer (the message names the closest ones).
        TargetError: a class out of range.
        MethodError: an unknown method (the message lists the methods).
    """
    try:
        from .widget import Widget
    except ImportError as error:
        raise ImportError(
            f'hookviz.show needs anywidget: pip install "hookviz[notebook]" ({error})'
        ) from error
    from .session import Session, as_image, as_loaded

    picture = as_image(image)
    loaded = as_loaded(model, picture, categories)
    return Widget(Session(loaded, picture), layer=layer, target=target, method=method)
