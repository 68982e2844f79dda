"""The notebook widget of ``hookviz.show``: its traits, what it sends the browser, and its
static picture.

The browser side is ``hookviz/app/browser/js/notebook.js`` bundled with the page's modules it
imports (the same painting code as the page's pictures). What travels, in the page's wire
format (``wire.pack``):

- ``_picture``, once: the display-size image (PNG) the overlay blends over and the colormaps'
  tables;
- ``_heat``, with each result: its map as packed colormap indices on the image's pixels;
- ``_grid``, with each layer: its feature maps' values and layouts (``payloads.grid_series``).

The browser colours and lays these out itself, so a display option (``opacity``,
``colormap``, ``grid_colormap``, ``channels``, ``order``, ``scale``) redraws there at once and
is then synced here, where it changes nothing but the static picture. A layer, class or method
picked in the browser comes here as a message: it is set as if from Python, and one that fails
is reported in ``error`` (shown in the widget) with the traits and pictures as they were.
"""

from __future__ import annotations

import functools
import itertools
import secrets
from typing import Any

import anywidget
import numpy as np
import traitlets
from PIL import Image

from .. import render
from ..app.browser import bundle, payloads, wire
from ..core.features import ORDERINGS
from ..errors import HookvizError
from ..images import fit_within
from .session import Result, Session, Shown, method_groups

ENTRY = "notebook.js"
# As many channels as the page's grid shows at most.
MOST_CHANNELS = 256
_BACKGROUND = (255, 255, 255)
_GAP = 8  # pixels between the overlay and the grid in the static picture
# The static picture's overlay, at most this long on its long side (the grid as high): a
# preview that a rendered notebook page holds several of.
STILL_LONG_SIDE = 480
_ids = itertools.count()
_PICKS = ("layer", "target", "method")  # what the browser asks the kernel to compute


@functools.cache
def script() -> str:
    """The widget's JavaScript: ``notebook.js`` and the page's modules it imports, as one
    module (built once per process)."""
    return bundle.bundle(bundle.JS, ENTRY)


CSS = """
.hv-notebook { font-family: var(--jp-ui-font-family, sans-serif); font-size: 13px; }
.hv-notebook .hv-row { display: flex; flex-wrap: wrap; gap: 0.4rem 1rem; align-items: center;
  margin: 0.3rem 0; }
.hv-notebook label { display: inline-flex; gap: 0.3rem; align-items: center; }
.hv-notebook .hv-classes button { cursor: pointer; border: 1px solid #999; border-radius: 4px;
  background: transparent; color: inherit; padding: 0.15rem 0.5rem; }
.hv-notebook .hv-classes button[aria-pressed="true"] { background: #1f6feb; color: white;
  border-color: #1f6feb; }
.hv-notebook .hv-error { color: #c62828; white-space: pre-wrap; }
.hv-notebook .hv-error:empty { display: none; }
.hv-notebook .hv-pictures { display: flex; flex-wrap: wrap; gap: 1rem; align-items: flex-start; }
.hv-notebook .hv-picture { margin: 0; flex: 1 1 320px; max-width: 640px; }
.hv-notebook .hv-picture canvas { display: block; width: 100%; height: auto;
  image-rendering: auto; }
.hv-notebook .hv-picture canvas.hv-bar { height: 10px; margin-top: 0.25rem; }
.hv-notebook .hv-title { font-weight: 600; margin-bottom: 0.3rem; }
.hv-notebook .hv-caption { opacity: 0.7; margin-top: 0.3rem; }
.hv-notebook[data-busy="true"] .hv-pictures { opacity: 0.5;
  transition: opacity 0.15s ease-in 0.1s; }
"""


def _any(default: Any = None) -> traitlets.Any:
    return traitlets.Any(default, allow_none=True).tag(sync=True)


class Widget(anywidget.AnyWidget):
    """The widget ``hookviz.show`` returns (see there).

    Attributes:
        loaded: the model (a plain module wrapped as ``wrap_model`` wraps it).
        image: the image as the library analyses it (a PIL image, or the tensor given).
        result: the ``GradCAM`` (a CAM method) or ``Attribution`` (a pixel attribution) of
            ``method`` for class ``target`` at ``layer``.
        layer, target, method: what is shown; set them to show another (checked and computed
            as they are set).
        opacity, colormap, grid_colormap, channels, order, scale: the display options (the
            overlay's opacity and colormap; the grid's colormap, how many channels it shows, in
            which order, and its colour scale: ``"channel"`` or ``"shared"``).
        error: the message of the last pick in the browser that failed ("" if none).
    """

    _esm = script()
    _css = CSS

    layer = _any()
    target = _any()
    method = _any("gradcam")
    opacity = traitlets.Float(render.DEFAULT_ALPHA).tag(sync=True)
    colormap = traitlets.Unicode(render.DEFAULT_CAM_CMAP).tag(sync=True)
    grid_colormap = traitlets.Unicode(render.DEFAULT_GRID_CMAP).tag(sync=True)
    channels = traitlets.Int(render.DEFAULT_CHANNELS).tag(sync=True)
    order = traitlets.Unicode(render.DEFAULT_ORDER).tag(sync=True)
    scale = traitlets.Unicode(render.DEFAULT_SCALE).tag(sync=True)
    error = traitlets.Unicode("").tag(sync=True)
    # what the pickers offer
    layers = traitlets.List(traitlets.Unicode()).tag(sync=True)
    methods = traitlets.Dict().tag(sync=True)
    classes = traitlets.List(traitlets.Dict()).tag(sync=True)
    colormaps = traitlets.List(traitlets.Unicode(), list(render.COLORMAPS)).tag(sync=True)
    orders = traitlets.List(traitlets.Unicode(), list(ORDERINGS)).tag(sync=True)
    scales = traitlets.List(traitlets.Unicode(), list(render.SCALES)).tag(sync=True)
    # what the pictures are drawn from (the wire format's payloads)
    _picture = traitlets.Bytes(b"").tag(sync=True)
    _heat = traitlets.Bytes(b"").tag(sync=True)
    _grid = traitlets.Bytes(b"").tag(sync=True)
    # counts the browser's picks answered (the browser then shows the traits as they are)
    _replies = traitlets.Int(0).tag(sync=True)

    def __init__(
        self,
        session: Session,
        *,
        layer: str | None = None,
        target: object = None,
        method: object = "gradcam",
        **display: Any,
    ) -> None:
        self._session = session
        self._settled = False  # (while the traits are first set, none computes)
        # (the browser keeps every widget's data in one store, whatever kernel it came from)
        self._id = f"hv-{secrets.token_hex(6)}"
        self._grid_of: object = None
        first = session.show(layer, target, method)  # checked and computed before any widget
        self._shown = first
        super().__init__(
            layer=first.layer,
            target=first.target,
            method=first.method,
            layers=session.layers(),
            methods={group: list(names) for group, names in method_groups().items()},
            **display,
        )
        self._settled = True
        self._picture = _picture_payload(session)
        self._install(first)
        self.on_msg(self._on_message)

    # ---- what is shown

    @property
    def loaded(self):
        return self._session.loaded

    @property
    def image(self):
        return self._session.image

    @property
    def result(self) -> Result:
        return self._shown.result

    def _proposed(self, **change: Any) -> Shown:
        wished = {"layer": self.layer, "target": self.target, "method": self.method, **change}
        return self._session.show(wished["layer"], wished["target"], wished["method"])

    @traitlets.validate("layer")
    def _valid_layer(self, proposal: traitlets.Bunch) -> str:
        if not self._settled:
            return self._session.layer(proposal.value)
        return self._proposed(layer=proposal.value).layer

    @traitlets.validate("target")
    def _valid_target(self, proposal: traitlets.Bunch) -> int | None:
        if not self._settled:
            return self._session.target(proposal.value)
        return self._proposed(target=proposal.value).target

    @traitlets.validate("method")
    def _valid_method(self, proposal: traitlets.Bunch) -> str:
        if not self._settled:
            return proposal.value
        return self._proposed(method=proposal.value).method

    @traitlets.observe("layer", "target", "method")
    def _changed(self, _change: traitlets.Bunch) -> None:
        if self._settled:
            # (computed when validated: the session remembers it)
            self._install(self._proposed())

    def _install(self, shown: Shown) -> None:
        self._shown = shown
        with self.hold_sync():
            if self._grid_of is not shown.features:
                self._grid = wire.pack(_grid_payload(shown, f"{self._id}-grid-{next(_ids)}"))
                self._grid_of = shown.features
            self.classes = [
                {"index": p.index, "name": p.name, "probability": p.probability}
                for p in shown.predictions
            ]
            self._heat = wire.pack(
                _heat_payload(self._session, shown, f"{self._id}-heat-{next(_ids)}")
            )
            self.error = ""

    # ---- the display options

    @traitlets.validate("opacity")
    def _valid_opacity(self, proposal: traitlets.Bunch) -> float:
        value = float(proposal.value)
        if not 0.0 <= value <= 1.0:
            raise HookvizError(f"opacity must be in [0, 1], got {value}")
        return value

    @traitlets.validate("colormap", "grid_colormap")
    def _valid_colormap(self, proposal: traitlets.Bunch) -> str:
        return _one_of(proposal, render.COLORMAPS)

    @traitlets.validate("order")
    def _valid_order(self, proposal: traitlets.Bunch) -> str:
        return _one_of(proposal, ORDERINGS)

    @traitlets.validate("scale")
    def _valid_scale(self, proposal: traitlets.Bunch) -> str:
        return _one_of(proposal, render.SCALES)

    @traitlets.validate("channels")
    def _valid_channels(self, proposal: traitlets.Bunch) -> int:
        if proposal.value < 1:
            raise HookvizError(f"channels must be at least 1, got {proposal.value}")
        return proposal.value

    # ---- the browser's picks

    def _on_message(self, _widget: Any, content: Any, _buffers: Any) -> None:
        if not isinstance(content, dict) or content.get("pick") not in _PICKS:
            return
        try:
            setattr(self, content["pick"], content.get("value"))
        except Exception as error:  # (said in the widget, which must go on working)
            self.error = _message(error)
        finally:
            self._replies += 1

    # ---- the static picture

    def picture(self) -> Image.Image:
        """What the widget shows, as one picture: the overlay and the grid side by side, as
        the display options say (what a notebook rendered without widgets shows)."""
        shown, session = self._shown, self._session
        base = fit_within(session.display_picture(), STILL_LONG_SIDE)
        heat = shown.heatmap_at((base.height, base.width))
        left = render.overlay(base, heat, alpha=self.opacity, cmap=self.colormap)
        features = shown.features
        count = min(self.channels, features.num_channels, MOST_CHANNELS)
        order = features.channel_order(self.order, count)
        grid = render.laid_out_grid(
            features.activations, order, cmap=self.grid_colormap, scale=self.scale
        )
        right = Image.fromarray(grid)
        # as high as the overlay, and at most twice as wide (a wide grid of large maps)
        scale = min(left.height / right.height, 2 * left.width / right.width)
        size = (max(1, round(right.width * scale)), max(1, round(right.height * scale)))
        smaller = Image.Resampling.BOX if scale < 1 else Image.Resampling.NEAREST
        right = right.resize(size, smaller)
        both = Image.new("RGB", (left.width + _GAP + right.width, left.height), _BACKGROUND)
        both.paste(left, (0, 0))
        both.paste(right, (left.width + _GAP, 0))
        return both

    def _repr_png_(self) -> bytes:
        # (compressed harder than the page's pictures: it is written into notebook files)
        return render.png_bytes(self.picture(), compress_level=6)

    def _repr_mimebundle_(self, **kwargs: Any) -> tuple[dict, dict] | None:
        """The widget's view, and beside it its static picture and a line of text: what a
        front end that runs no widgets (a notebook rendered to HTML) shows instead."""
        bundled = super()._repr_mimebundle_(**kwargs)
        data, metadata = bundled if bundled is not None else ({}, {})
        data = {**data, "image/png": self._repr_png_(), "text/plain": self._text()}
        return data, metadata

    def _text(self) -> str:
        result = self._shown.result
        return (
            f"hookviz.show: {self._shown.method} of {result.class_name!r} "
            f"(class {result.class_index}) at layer {self._shown.layer!r}"
        )

    def __repr__(self) -> str:
        return f"<{self._text()}>"


def _one_of(proposal: traitlets.Bunch, choices: tuple[str, ...]) -> str:
    if proposal.value not in choices:
        raise HookvizError(
            f"{proposal.trait.name} must be one of {', '.join(choices)}, got {proposal.value!r}"
        )
    return proposal.value


def _message(error: Exception) -> str:
    return str(error) if isinstance(error, HookvizError) else f"{type(error).__name__}: {error}"


def _picture_payload(session: Session) -> bytes:
    """The display-size image and the colormaps' tables: sent once."""
    picture = session.display_picture()
    tables = {name: render.colormap_table(name).tobytes() for name in render.COLORMAPS}
    return wire.pack(
        {
            "digest": session.image_digest(),
            "png": render.png_bytes(picture),
            "width": picture.width,
            "height": picture.height,
            "tables": tables,
        }
    )


def _heat_payload(session: Session, shown: Shown, identity: str) -> dict:
    """A result's map as packed colormap indices on the display image's pixels, with its
    texts."""
    picture = session.display_picture()
    heat = shown.heatmap_at((picture.height, picture.width))
    result = shown.result
    of = result.class_name
    where = f" at {shown.layer}" if shown.kind == "cam" else ""
    probability = getattr(result, "probability", float("nan"))
    caption = f"probability {probability:.1%}" if np.isfinite(probability) else ""
    return {
        "id": identity,
        "packed": wire.packed_rows(render.colormap_indices(heat)),
        "width": picture.width,
        "height": picture.height,
        "title": f"{shown.method} · {of}{where}",
        "caption": caption,
        "alt": f"{shown.method} heatmap of {of}{where}, over the image",
        "kind": shown.kind,
        "layer": shown.layer,
        "target": shown.target,
        "method": shown.method,
    }


def _grid_payload(shown: Shown, identity: str) -> dict:
    """The layer's feature maps as the browser lays them out: the first channels of each
    order, as many as the grid shows at most."""
    features = shown.features
    count = min(features.num_channels, MOST_CHANNELS)
    orders = tuple((name, tuple(features.channel_order(name, count)), None) for name in ORDERINGS)
    return {
        "id": identity,
        "layer": shown.layer,
        "grid": payloads.grid_series(features, orders, _BACKGROUND),
        "channels": features.num_channels,
    }
