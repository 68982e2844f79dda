"""The Python side of the pictures the browser colours itself (``js/``): the CAM overlay with
its colour bar, the raw heatmap and the feature-map grid. The server sends the display-size
image once, and with each analysis the heatmap as colormap indices and the grid's cells; the
browser blends, recolours and lays them out as the display widgets move (``js/picture.js``),
shows a layer it was sent before the moment the layer box names it (``Swap``,
``js/layer_swap.js``) and a top-5 class sent ahead the moment the radio names it
(``ClassFollow``, ``js/class_follow.js``). The pixels are ``hookviz.render``'s at display size.
docs/how-it-works.md ("Pictures the browser draws") tells the whole path. Every payload names
its ``kind``: ``sources``, ``heats``, ``classes`` (hidden elements: what the pictures draw
from) or ``picture``. What the whole tab keeps (its history, the phone's sidebar) is another
component's (``tab.py``).
"""

from __future__ import annotations

import functools
import string
from collections.abc import Iterable
from dataclasses import asdict, dataclass

import streamlit as st

from hookviz import render
from hookviz.app.browser import bundle, cached_payloads, wire
from hookviz.app.browser.streamlit_dom import BY_NAME, key_class
from hookviz.app.caches import encoded
from hookviz.app.view.keys import AnalysisKey

NAME = "hookviz_picture"  # the component's name (tests find its elements by it)
# the keys of its hidden elements, which carry what the pictures draw from
IMAGES, HEATS, CLASSES = "picture_data_images", "picture_data_heats", "picture_data_classes"
# the Present page's container of its one picture (hookviz/app/pages/present.py)
PRESENT = "present"


def picture_key(role: str) -> str:
    """The key of the element of picture ``role`` (``overlay``, ``heatmap``, ``grid``)."""
    return f"picture_{role}"


_HIDDEN = ", ".join(f".{key_class(key)}" for key in (IMAGES, HEATS, CLASSES))
_PRESENT = f".{key_class(PRESENT)}"
# The pictures' look. Streamlit's classes (``$hidden``, ``$present``) and the main area's
# block (``$main_block``) come from streamlit_dom, whose contract test checks them on a real
# page. (Several lines: Streamlit reads a one-line string as a file path.)
_CSS = string.Template("""
.hv-picture canvas { display: block; width: 100%; height: auto; }
.hv-picture .hv-main { border-radius: var(--st-base-radius, 0.5rem); }
.hv-picture .hv-bar { height: 10px; margin-top: 0.25rem; }
.hv-picture { transition: opacity 0.15s ease-in; }
/* the last picture while the new one's pixels arrive: faded if that takes a moment */
.hv-picture[data-stale="true"] { opacity: 0.33; transition-delay: 0.1s; }
.hv-picture .hv-title { font-weight: 600; margin-bottom: 1rem; }
[data-hv-stale="true"] { opacity: 0.33; transition: opacity 0.15s ease-in 0.1s; }
/* draw nothing: no room, no gap in their column */
$hidden {
  display: none;
}
.hv-picture { position: relative; }
.hv-picture .hv-fullscreen {
  position: absolute; top: 0.25rem; right: 0.25rem; z-index: 1; opacity: 0;
  border: none; border-radius: 0.25rem; padding: 0.2rem; line-height: 0; cursor: pointer;
  background: rgba(0, 0, 0, 0.55); color: white;
}
.hv-picture:hover .hv-fullscreen, .hv-picture .hv-fullscreen:focus-visible { opacity: 1; }
.hv-picture .hv-value { min-height: 1.2em; font-size: 0.8rem; opacity: 0.75; }
/* full screen: the picture as large as the screen allows, its texts large enough for a room */
.hv-picture:fullscreen {
  background: var(--st-background-color, white); padding: 2vh 3vw; overflow: auto;
  display: flex; flex-direction: column; align-items: center; justify-content: center;
}
/* the canvas's box fills the screen; its picture is fitted inside, keeping its shape */
.hv-picture:fullscreen canvas.hv-main { width: 94vw; height: 76vh; object-fit: contain; }
.hv-picture:fullscreen .hv-bar { width: min(94vw, 60rem); }
.hv-picture:fullscreen .hv-title { font-size: 1.8rem; }
.hv-picture:fullscreen .hv-caption, .hv-picture:fullscreen .hv-value { font-size: 1.2rem; }
.hv-picture:fullscreen .hv-fullscreen { opacity: 1; position: fixed; }
.hv-picture .hv-caption {
  margin-top: 0.5rem;
  font-size: 0.875rem;
  color: var(--st-text-color, inherit);
  opacity: 0.6;
}
/* The Present page: one picture, as large as the window allows (the browser's full screen,
F11, is the same window larger), its texts large. After the general rules above: the same
specificity, so these win. The picture's height follows the window's, its width its shape (a
canvas keeps its drawing's shape) up to the page's width, a wider drawing fitted inside. Above
it, only the top navigation and the one slim row of steps. */
$main_block:has($present) { padding-top: 3.5rem; padding-bottom: 1rem; }
$present canvas.hv-main {
  width: auto; max-width: 100%; height: 60vh; margin: 0 auto; object-fit: contain;
}
$present .hv-title { font-size: 2rem; line-height: 1.2; margin-bottom: 0.5rem; text-align: center; }
$present .hv-caption, $present .hv-value { font-size: 1.25rem; text-align: center; opacity: 0.85; }
$present .hv-bar { width: 60%; margin-left: 20%; }
/* a phone: the picture as wide as the page (its height follows) */
@media (max-width: 640px) {
  $present canvas.hv-main { width: 100%; height: auto; }
  $present .hv-title { font-size: 1.5rem; }
}
""")

_COMPONENT = st.components.v2.component(
    NAME,
    js=bundle.bundle(),
    css=_CSS.substitute(hidden=_HIDDEN, present=_PRESENT, main_block=BY_NAME["main_block"].value),
    # in the page's own DOM (no shadow root): the pictures are then found like any other
    isolate_styles=False,
)


@dataclass(frozen=True)
class Swap:
    """What lets the browser show a picture of another layer the moment the layer box names
    it, from the pictures it was sent before.

    Attributes:
        box: the layer box's widget key.
        label: the box's label of this picture's layer.
        context: everything else the picture depends on (image, model, weights, class, method;
            a grid's background and channel orders), as an id: a picture kept under another
            context is never shown for this one.
        ready: nothing else beside the picture names its layer (no warning about it, no open
            panel of its channels): where something does, the page waits for the server.
        elsewhere: the keys of the few texts elsewhere on the page that describe the layer
            (the caption under the layer box, the analysis's time): faded from the moment
            another layer's pictures show until the server's run redraws them.
    """

    box: str
    label: str
    context: str
    ready: bool
    elsewhere: tuple[str, ...] = ()


@dataclass(frozen=True)
class ClassFollow:
    """What lets the browser show the overlay and the heatmap of another class the moment the
    top-5 radio names it, from the pictures sent ahead for it (``class_spares``).

    Attributes:
        radio: the top-5 radio's widget key.
        context: the forward pass and method the classes' pictures are of, as an id (the
            ``class_spares`` sent for another context are never shown for this one).
        option: the radio's option (its index, as text) of the class this picture shows; None
            for a class outside the top-5.
        ready: nothing else beside the picture depends on its class (no warning about this
            class's heatmap): where something does, the page waits for the server.
        box: the class box's widget key: it names the class, so it is faded from the moment
            another class shows until the server's run redraws it (and a pick in it is the
            server's to draw).
        unless_orders: the grid's channel orders that follow the class (by its channel
            weights): while one is shown, the page waits for the server.
    """

    radio: str
    context: str
    option: str | None
    ready: bool
    box: str
    unless_orders: tuple[str, ...] = ()


@functools.cache
def _tables() -> dict[str, bytes]:
    """The colormap tables, 768 bytes each (computed on first use)."""
    return {name: render.colormap_table(name).tobytes() for name in render.COLORMAPS}


def image_sources(*digests: str) -> None:
    """The display-size images the overlays blend over, sent to the browser by their digest. Drawn
    outside the results (nothing shows), so that the results' reruns (a class change) do not send
    an unchanged image again: about 0.5 MB of PNG for the sample, more for a large photo."""
    sources = {digest: encoded.display_png(digest) for digest in dict.fromkeys(digests)}
    _send(IMAGES, {"kind": "sources", "sources": sources})


def overlay(
    key: AnalysisKey,
    alpha: float,
    cmap: str,
    title: str,
    alt: str,
    captions: list[str],
    swap: Swap | None,
    classes: ClassFollow | None = None,
) -> None:
    """The CAM of analysis ``key`` over the display-size image, under ``title`` (what it is
    of), with its colour bar and ``captions`` under it; it follows the sidebar's "alpha" and
    "cam_cmap" widgets, the layer box (``swap``) and the top-5 radio (``classes``). (The
    title is the picture's own: a class change then redraws one element, not two.)

    The colormap indices (the overlay's and the raw heatmap's) go in an element of their own
    that changes only with the analysis: Streamlit's message cache then sends them once and a
    reference after, while the pictures' own messages change with the opacity and colormap
    they carry, so a class shown a few runs before is not sent again (on a 37-megapixel photo
    0.9 MB of indices, packed by ``wire.packed_rows`` into about 0.1 MB)."""
    _, width, height = cached_payloads.heat_indices(key)
    _send(HEATS, {"kind": "heats", "heats": _heats([key])})
    pixels = {"width": width, "height": height, "title": title, "captions": captions}
    _mount("overlay", encoded.picture_id(key), pixels, cmap, alt, swap, classes, key.digest, alpha)


def heat_indices(key: AnalysisKey) -> None:
    """The colormap indices of analysis ``key`` alone, for a heatmap drawn without its overlay
    (which otherwise sends them, ``overlay``): Present's "Heatmap alone"."""
    _send(HEATS, {"kind": "heats", "heats": _heats([key])})


def _heats(keys: Iterable[AnalysisKey]) -> dict[str, dict]:
    """The packed colormap indices of the analyses ``keys`` by picture id, as the browser reads
    them (``js/store.js``: inflated once per id, and kept)."""
    heats = {}
    for key in keys:
        packed, width, _ = cached_payloads.heat_indices(key)
        heats[encoded.picture_id(key)] = {"packed": packed, "width": width}
    return heats


def heatmap(
    key: AnalysisKey,
    cmap: str,
    alt: str,
    captions: list[str],
    swap: Swap | None,
    classes: ClassFollow | None = None,
) -> None:
    """The heatmap of analysis ``key`` alone, coloured, with ``captions``; it follows the
    "cam_cmap" widget, the layer box and the top-5 radio. Its indices are the overlay's, sent
    before it (without an overlay, by ``heat_indices``): the browser finds them by the picture
    id."""
    _, width, height = cached_payloads.heat_indices(key)
    pixels = {"width": width, "height": height, "captions": captions}
    _mount("heatmap", encoded.picture_id(key), pixels, cmap, alt, swap, classes)


def class_spares(context: str, records: dict[str, dict], keys: dict[str, AnalysisKey]) -> None:
    """The overlay's and the heatmap's pictures of the top-5 classes, sent ahead for the
    browser to show the moment the top-5 radio names one (``ClassFollow``), in a hidden element
    of their own: they change with the forward pass and method, not with the class, so a class
    change does not send them again.

    Args:
        context: ``ClassFollow.context``.
        records: the radio's option -> the overlay's texts of its class (``title``, ``alt``,
            ``captions``), and whether it is ``ready`` (as ``ClassFollow.ready``).
        keys: the radio's option -> the analysis key of its class (its indices are sent by
            picture id).
    """
    options = {
        option: {**records[option], "option": option, "id": encoded.picture_id(key)}
        for option, key in keys.items()
    }
    classes = {"context": context, "options": options}
    heats = _heats(keys.values())
    _send(CLASSES, {"kind": "classes", "classes": classes, "heats": heats})


def _send(element: str, data: dict) -> None:
    """A hidden element's payload (nothing shows: its container is hidden)."""
    _COMPONENT(key=element, data=wire.pack(data), width="stretch")


def grid(
    key: AnalysisKey,
    orders: dict[str, tuple[tuple[int, ...], tuple[float, ...] | None]],
    options: dict,
    background: tuple[int, int, int],
    wished: int,
    title: str,
    caption: str,
    alt: str,
    swap: Swap | None,
) -> None:
    """The feature-map grid of analysis ``key``: ``render.laid_out_grid`` of the first n
    channels of an order (``orders``: name -> its channels and their signs), following the
    "order", "channels", "scale" and "grid_cmap" widgets (``options``, the display options,
    until the browser reads them: an order not in ``orders`` waits for the server; ``wished``
    the channels the slider of a smaller layer could not show), under ``title``. ``caption``
    and ``alt`` name n as ``{n}``."""
    # the feature maps are the forward pass's, whatever the class: a class change sends the
    # same grid (and the browser keeps it) unless an order is by the class's channel weights
    seen = key.seen
    listed = tuple((name, *orders[name]) for name in orders)
    series = cached_payloads.grid_series(seen, listed, background, _key=key)
    identity = encoded.picture_id((seen, listed, background))
    pixels = {
        "grid": series,
        "channels": options["channels"],
        "wished": wished,  # (another layer's grid shown in its place takes as many of its own)
        "order": options["order"],
        "orderings": list(options["orderings"]),  # the "order" radio's options, in order
        "scale": options["scale"],
        "scales": list(render.SCALES),  # the "scale" radio's options, in order
        "title": title,
        "captions": [caption],
    }
    _mount("grid", identity, pixels, options["grid_cmap"], alt, swap, follow_cmap="grid_cmap")


def _mount(
    role: str,
    identity: str,
    pixels: dict,
    cmap: str,
    alt: str,
    swap: Swap | None,
    classes: ClassFollow | None = None,
    image: str | None = None,
    alpha: float = 1.0,
    follow_cmap: str = "cam_cmap",
) -> None:
    """Mount picture ``role``. ``pixels``: a heatmap's size (its indices come in their own
    element, ``overlay``), or a grid's series (``grid``, with the number of channels
    shown); ``identity`` is what the browser keeps them under and redraws for when it changes;
    ``image``, the digest of the image an overlay blends over (``image_sources``), whose
    opacity then follows the "alpha" widget; ``swap``, how it follows the layer box, and
    ``classes`` the top-5 radio (None: it does not)."""
    data = {
        **pixels,
        "kind": "picture",
        "role": role,
        "id": identity,
        "base": image,
        "tables": _tables(),
        "alpha": alpha,
        "cmap": cmap,
        "follow": {
            "alpha": "alpha" if image else None,
            "cmap": follow_cmap,
            "channels": "channels" if "grid" in pixels else None,
            "scale": "scale" if "grid" in pixels else None,
            "order": "order" if "grid" in pixels else None,
            "classes": None if classes is None else asdict(classes),
        },
        "bar": image is not None,  # an overlay has its colour bar
        "alt": alt,
        "swap": None if swap is None else asdict(swap),
    }
    _COMPONENT(key=picture_key(role), data=wire.pack(data), width="stretch", height="content")
