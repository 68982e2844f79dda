"""The Explore page's display options: what each one is for this layer (the user's wish,
checked against the layer), and their widgets in the sidebar, each rerunning only the pictures it
feeds."""

from __future__ import annotations

from collections.abc import Mapping

import streamlit as st

import hookviz
from hookviz import render
from hookviz.app import feedback
from hookviz.app.texts import ORDER_LABELS
from hookviz.app.view import fragments, state
from hookviz.app.view.fields import FIELDS
from hookviz.app.view.keys import CHANNELS_OPEN
from hookviz.core.features import ORDERINGS, WEIGHT_ORDERINGS, order_by_weight

MAX_GRID_CHANNELS = 256


# Which fragments each display option feeds: a change reruns those and nothing else.
# (Each fragment's text and help that no option changes stay outside it, drawn once.)
# The downloads are not among them: they read the options when clicked. Nor are the pictures the
# browser draws itself as the widget moves (``browser.pictures``: the overlay, the heatmap, the
# grid's colours, its colour scale and how many of its channels show): "address" (which draws
# nothing) records the new value and keeps the URL current.
FEEDS = {
    "channels": (fragments.ADDRESS, fragments.SNIPPET),
    # the grid only for an order by weight (``order_feeds``)
    "order": (fragments.GRID, fragments.SNIPPET),
    "scale": (fragments.ADDRESS, fragments.SNIPPET),
    "grid_cmap": (fragments.ADDRESS, fragments.CHANNEL, fragments.SNIPPET),
    "cam_cmap": (fragments.ADDRESS, fragments.SNIPPET),
    "alpha": (fragments.ADDRESS, fragments.CHANNEL, fragments.SNIPPET),
}


def resolve_display(wishes: Mapping, analysis: hookviz.Analysis) -> dict:
    """The display options for ``analysis`` from the user's wishes, checked against this layer
    (how many channels it has, whether its CAM has channel weights). Pure (no Streamlit): the
    deferred downloads call it at click time, on another thread."""

    def wish(name: str):
        return wishes.get(name, FIELDS[name].default)

    def pick(name: str, allowed):
        value = wish(name)
        return value if value in allowed else FIELDS[name].default

    most = min(analysis.features.num_channels, MAX_GRID_CHANNELS)
    orderings = list(ORDERINGS)
    if analysis.cam.weights is not None:
        orderings += list(WEIGHT_ORDERINGS)
    return {
        "channels": int(min(max(wish("channels"), 1), most)),
        "order": pick("order", orderings),
        "scale": pick("scale", render.SCALES),
        "grid_cmap": pick("grid_cmap", render.COLORMAPS),
        "cam_cmap": pick("cam_cmap", render.COLORMAPS),
        "alpha": float(min(max(wish("alpha"), 0.0), 1.0)),
        "orderings": orderings,
        "most": most,
    }


def display_options(analysis: hookviz.Analysis) -> dict:
    """``resolve_display`` of the view's wishes, recorded as what the page shows (the URL)."""
    options = resolve_display(state.wishes(), analysis)
    for name in ("channels", "order", "scale", "grid_cmap", "cam_cmap", "alpha"):
        state.shown(name, options[name])
    return options


def display_widgets(analysis: hookviz.Analysis, disabled: bool) -> None:
    """The display widgets, in the sidebar under the shared sections.

    They sit in a fragment of their own: a change there is then a fragment rerun from the
    browser's side, which Streamlit redirects to the fragments the option feeds. A change of a
    widget outside any fragment starts as a full run, and Streamlit forgets the session's media
    and deferred downloads at the start of a full run, before the callback can redirect it: the
    pictures and downloads outside the rerun fragments would be gone (404, a click that
    downloads nothing)."""
    with st.sidebar:
        _display_fragment(analysis, disabled)


@st.fragment(key=fragments.DISPLAY)
@feedback.guarded
def _display_fragment(analysis: hookviz.Analysis, disabled: bool) -> None:
    options = display_options(analysis)
    st.header("Display")
    count, most = analysis.features.num_channels, options["most"]

    channel_on = state.wish("channel_overlay") is not None and st.session_state.get(CHANNELS_OPEN)

    def draw(name: str, widget, *args, **kwargs) -> None:
        # the single-channel picture only when it is shown
        feeds = [f for f in FEEDS[name] if f != fragments.CHANNEL or channel_on]
        rerun = order_feeds if name == "order" else feeds
        state.widget(name, widget, options[name], *args, rerun=rerun, disabled=disabled, **kwargs)

    if most > 1:
        draw(
            "channels",
            st.slider,
            "Channels shown",
            1,
            most,
            help=f"This layer has {count} channels; up to {most} can be shown.",
        )
    draw(
        "order",
        st.radio,
        "Channel order",
        options["orderings"],
        horizontal=True,
        format_func=ORDER_LABELS.get,
        help="By activation, by channel number, or by the CAM's channel weight α (how much the "
        "channel counts for the class; + for, − against) or α × mean activation.",
    )
    draw(
        "scale",
        st.radio,
        "Colour scale",
        render.SCALES,
        horizontal=True,
        format_func={"channel": "per channel", "shared": "shared"}.get,
        help="Per channel shows each map's pattern; shared shows which channels are strong.",
    )
    draw("grid_cmap", st.selectbox, "Feature-map colormap", render.COLORMAPS)
    draw("cam_cmap", st.selectbox, "Heatmap colormap", render.COLORMAPS)
    draw("alpha", st.slider, "Heatmap opacity", 0.0, 1.0, step=0.05)


def grid_orders(
    analysis: hookviz.Analysis, options: dict
) -> dict[str, tuple[tuple[int, ...], tuple[float, ...] | None]]:
    """The grid's channels (as many as it can show) in every order the browser can switch to
    by itself, the ones the class does not change, and the order shown when it is by the
    class's channel weights (with their signs)."""
    count = options["most"]
    orders = {
        name: (tuple(analysis.features.channel_order(name, count)), None) for name in ORDERINGS
    }
    if options["order"] not in orders:
        orders[options["order"]] = grid_channels(analysis, options, count)
    return orders


def order_feeds() -> tuple[str, ...]:
    """What a channel-order change reruns, asked at the change: nothing drawn when the browser
    has that order's grid (``grid_orders``), the grid itself for an order by channel weight."""
    fed = FEEDS["order"]
    return fed if state.wish("order") in WEIGHT_ORDERINGS else (fragments.ADDRESS, *fed[1:])


def grid_channels(
    analysis: hookviz.Analysis, options: dict, count: int | None = None
) -> tuple[tuple[int, ...], tuple[float, ...] | None]:
    """The grid's first ``count`` channels (default: the number shown) in display order, with
    their CAM weights when ordered by them (the tiles are then marked + / -)."""
    count = options["channels"] if count is None else count
    features, weights = analysis.features, analysis.cam.weights
    if options["order"] in WEIGHT_ORDERINGS and weights is not None:
        order, signs = order_by_weight(features.activations, weights, options["order"], count)
        return tuple(order), tuple(signs)
    return tuple(features.channel_order(options["order"], count)), None
