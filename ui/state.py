"""The one owner of the view: what the user chose (model, weights, layer, class, method, display
options, each page's panel and toggles), kept across reruns, errors and page switches, and
mirrored in the address bar so a link restores it.

Three places hold a value, and this module is the only one that moves it between them:

- the *wish* (``st.session_state["hookviz.view"]``, a plain dict): what the user last chose.
  Widgets that are not drawn in a run (after an error, on another page) lose their own state in
  Streamlit; the wish does not, so nothing the user did is lost;
- the *widget* (``st.session_state[name]``): set from the wish just before the widget is drawn,
  clamped to what the current model and layer allow (a 64-channel wish on a 16-channel layer
  shows 16, and comes back as 64 on a bigger layer); a change goes back to the wish in the
  widget's ``on_change`` callback, which Streamlit runs before the script;
- the *URL*: written from the values the page shows (the wish where a run stopped before
  resolving a value, so an error's address names the view that failed), defaults left out.

Pages get a frozen ``View`` of the resolved values, never the session state itself.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import streamlit as st
from streamlit.errors import StreamlitAPIException

_WISH = "hookviz.view"  # the wish dict
_SHOWN = "hookviz.shown"  # values resolved in this run (cleared at the start of a full run)
_STARTED = "hookviz.started"  # the URL was read for this session
_ON_SCREEN = "hookviz.on_screen"  # the analysis the results show now (``on_screen``)
_COMPLETE = "hookviz.complete"  # the last full run drew the whole page (``completed``)

AUTO = -1  # target meaning "whatever the top-1 prediction is"; contrast meaning "the runner-up"
WHOLE_PAGE = "app"  # a widget's rerun scope: the whole page (``widget(rerun=(WHOLE_PAGE,))``)


@dataclass(frozen=True)
class Field:
    """One value of the view.

    Attributes:
        default: its value when nothing was chosen (left out of the URL).
        parse: turns the URL's text into a value (ValueError or KeyError when it can't).
        sane: whether a parsed URL value makes sense at all (an opacity of 7 does not: it falls
            back to the default; values that depend on the model are clamped later instead).
    """

    default: Any
    parse: Callable[[str], Any] = str
    sane: Callable[[Any], bool] = lambda value: True


def _flag(text: str) -> bool:
    return {"1": True, "true": True, "0": False, "false": False}[text.lower()]


def _channels(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split(",") if part != "")


FIELDS: dict[str, Field] = {
    # shared sidebar
    "model": Field("efficientnet_lite0"),
    "weights": Field("pretrained"),
    "layer": Field(None),  # None: the model's default layer
    "all_modules": Field(False, _flag),
    "target": Field(AUTO, int),
    "method": Field("gradcam"),
    # explore: display
    "channels": Field(64, int, lambda n: n >= 1),
    "order": Field("mean"),
    "scale": Field("channel"),
    "grid_cmap": Field("viridis"),
    "cam_cmap": Field("inferno"),
    "alpha": Field(0.5, float, lambda a: 0.0 <= a <= 1.0),
    "channel_overlay": Field(AUTO, int),  # AUTO: off
    # beyond one heatmap
    "beyond_panel": Field("gallery"),
    "contrast": Field(AUTO, int),
    "trust": Field(False, _flag),
    "rollout_fusion": Field("mean"),
    "rollout_discard": Field(0.9, float, lambda x: 0.0 <= x < 1.0),
    # compare
    "compare_model": Field(None),  # None: the first other model that loads offline
    "compare_weights": Field("pretrained"),
    "compare_layer": Field(None),  # None: that model's default layer
    "compare_target": Field(AUTO, int),  # AUTO: the sidebar's class by name, else its top-1
    # what a channel looks for
    "vis_channel": Field(AUTO, int),  # AUTO: the strongest channel on the image
    "vis_steps": Field(128, int, lambda n: n in (32, 64, 128, 256, 512)),
    "vis_seed": Field(0, int, lambda n: n >= 0),
    "vis_count": Field(1, int, lambda n: n in (1, 2, 4)),
    "vis_y": Field(AUTO, int),  # AUTO: the channel's strongest position
    "vis_x": Field(AUTO, int),
    # dataset run
    "run_dir": Field(None),
    # diagnose
    "diagnose_panel": Field("stats"),
    "intervene_mode": Field("scale"),
    "intervene_channels": Field(None, _channels),  # None: the three strongest
    "intervene_scale": Field(0.0, float, lambda x: 0.0 <= x <= 3.0),
    "intervene_keep": Field(16, int, lambda n: n >= 1),
}


def start() -> None:
    """Begin a full run: on a session's first run, adopt the URL's values (parsed here, checked
    against the real options when each widget is drawn)."""
    session = st.session_state
    session[_SHOWN] = {}
    session[_COMPLETE] = False
    if session.get(_STARTED):
        return
    session[_STARTED] = True
    wish: dict[str, Any] = {}
    for name, text in st.query_params.items():
        field = FIELDS.get(name)
        if field is None:
            continue
        try:
            value = field.parse(text)
        except (ValueError, KeyError):
            continue  # a broken value falls back to the default
        if field.sane(value):
            wish[name] = value
    session[_WISH] = wish


def completed() -> None:
    """Note that this full run drew the whole page (it was not cut short by the next change,
    nor stopped by an error)."""
    st.session_state[_COMPLETE] = True


def wishes() -> dict[str, Any]:
    """The live wish dict of this session: the same object for the whole session, updated in
    place, so a deferred download built earlier reads the user's latest choices from it."""
    return st.session_state.setdefault(_WISH, {})


def on_screen() -> dict[str, Any]:
    """A live holder of what the results show now (``"analysis"``, set by the panel that draws
    the CAM, and gone while that panel failed): the same object for the whole session, so a
    deferred download drawn in an earlier run reads the class shown at the moment it is
    clicked, and a class change need not redraw the download buttons."""
    return st.session_state.setdefault(_ON_SCREEN, {})


def wish(name: str) -> Any:
    """What the user last chose for ``name`` (its default if never)."""
    return st.session_state.get(_WISH, {}).get(name, FIELDS[name].default)


def choose(name: str, value: Any) -> None:
    """Record a choice made by other means than the field's own widget (a button, a link)."""
    st.session_state.setdefault(_WISH, {})[name] = value


def shown(name: str, value: Any) -> Any:
    """Record the value the page shows for ``name`` in this run (what the URL will name)."""
    st.session_state.setdefault(_SHOWN, {})[name] = value
    return value


def resolve(name: str, valid: Callable[[Any], bool], fallback: Any) -> Any:
    """The value to show: the wish if ``valid`` accepts it, else ``fallback``. The wish stays."""
    value = wish(name)
    return shown(name, value if valid(value) else fallback)


def clamp(name: str, low: float, high: float) -> Any:
    """The wish pulled into [low, high] (the wish itself stays, for a bigger range later)."""
    value = wish(name)
    return shown(name, min(max(value, low), high))


def widget(
    name: str,
    draw: Callable[..., Any],
    value: Any,
    *args: Any,
    key: str | None = None,
    rerun: Sequence[str] | Callable[[], Sequence[str]] = (),
    second: bool = False,
    **kwargs: Any,
) -> Any:
    """Draw a widget for ``name`` showing ``value``; a user change goes to the wish.

    Args:
        name: the field.
        draw: the Streamlit widget function (``st.selectbox``, ``st.sidebar.slider``, ...).
        value: the resolved value to show (from ``resolve`` or ``clamp``).
        args, kwargs: passed to ``draw`` (label, options, ...); never ``value``/``index``.
        key: the widget key (default ``name``). A key that changes with the options gives a
            fresh widget: the browser keeps a selectbox's old label when only the labels of
            its options change.
        second: a second widget of a field that has its own (a shortcut to some of its
            values; it may show none of them): its value is not recorded as the shown one.
        rerun: keys of the fragments a change should rerun instead of the whole page (a
            display option redraws only the pictures it feeds), or a function giving them at
            the moment of the change (what they are can depend on other options);
            ``(WHOLE_PAGE,)`` for the whole page from a widget inside a fragment.
    """
    key = key or name
    st.session_state[key] = value
    rerun = rerun if callable(rerun) else tuple(rerun)
    result = draw(*args, key=key, on_change=_commit, args=(name, key, rerun), **kwargs)
    return result if second else shown(name, result)


def _commit(name: str, key: str, rerun: tuple[str, ...] | Callable[[], Sequence[str]] = ()) -> None:
    choose(name, st.session_state[key])
    scope = list(rerun() if callable(rerun) else rerun)
    if scope and not st.session_state.get(_COMPLETE):
        # This change came while a full run was drawing the page, and cut it short: what that
        # run had not drawn yet, and the last view's elements it had not replaced (the channel
        # slider of the last layer), would stay beside the fragments' new ones. The whole page
        # reruns instead.
        scope = [WHOLE_PAGE]
    if scope == [WHOLE_PAGE]:
        st.rerun()  # (a widget inside a fragment would rerun only its fragment by default)
    if scope:
        try:
            st.rerun(scope=scope)
        except StreamlitAPIException:
            # A fragment the last run did not draw (it took another path: a Score-CAM's
            # progress instead of the results): the whole page reruns instead.
            st.rerun()


def url_values() -> dict[str, str]:
    """The query parameters of the current view: shown values, else wishes; defaults left out."""
    values = {**st.session_state.get(_WISH, {}), **st.session_state.get(_SHOWN, {})}
    out = {}
    for name, value in values.items():
        field = FIELDS[name]
        if value is None or value == field.default:
            continue
        out[name] = _text(value)
    return out


def publish() -> None:
    """Write the view to the address bar (only when it changed: every write is a browser
    history update)."""
    wanted = url_values()
    if st.query_params.to_dict() != wanted:
        st.query_params.from_dict(wanted)


def stop() -> None:
    """End this run after an error, the address naming the view that failed (query parameters
    written after ``st.stop`` are dropped, so they are written first)."""
    publish()
    st.stop()


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, tuple):
        return ",".join(str(v) for v in value)
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


@dataclass(frozen=True)
class View:
    """What the shared sidebar resolved for this run: the pages' read-only input.

    Attributes:
        digest: the image's content hash (the key of every cached result).
        image_name: the uploaded file's name, or None for the sample.
        model: registry name.
        pretrained: trained or random weights.
        layer: the hooked layer.
        target: the explained class, or None for the top-1 prediction.
        method: the CAM method.
    """

    digest: str
    image_name: str | None
    model: str
    pretrained: bool
    layer: str
    target: int | None
    method: str

    @property
    def key(self) -> tuple:
        """The plain values an analysis is cached by."""
        return (self.digest, self.model, self.pretrained, self.layer, self.target, self.method)


def options_valid(options: Sequence[Any]) -> Callable[[Any], bool]:
    """A ``valid`` test for ``resolve``: membership in ``options``."""
    allowed = set(options)
    return allowed.__contains__
