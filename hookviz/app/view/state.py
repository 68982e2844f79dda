"""The one owner of the view: what the user chose (model, weights, layer, class, method, display
options, each page's panel and toggles), kept across reruns, errors and page switches, and
mirrored in the address bar so a link restores it.

Three places hold a value, and this module is the only one that moves it between them:

- the *wish* (``st.session_state[WISH_KEY]``, a plain dict): what the user last chose.
  Widgets that are not drawn in a run (after an error, on another page) lose their own state in
  Streamlit; the wish does not, so nothing the user did is lost;
- the *widget* (``st.session_state[name]``): set from the wish just before the widget is drawn,
  clamped to what the current model and layer allow (a 64-channel wish on a 16-channel layer
  shows 16, and comes back as 64 on a bigger layer); a change goes back to the wish in the
  widget's ``on_change`` callback, which Streamlit runs before the script;
- the *URL*: written from the values the page shows (the wish where a run stopped before
  resolving a value, so an error's address names the view that failed), defaults left out.

Pages get a frozen ``View`` of the resolved values (``keys``), never the session state itself.
Each value's default, how the address writes and reads it, is in ``fields``.

A link's value the page cannot use (one that does not parse, or that the model does not offer)
is replaced by its default, and the top of the page names it (``link_notice``) until the user
changes a control: the address is rewritten without it, so the notice is the only trace of it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import streamlit as st
from streamlit.errors import StreamlitAPIException
from streamlit.runtime.scriptrunner_utils.script_run_context import get_script_run_ctx

from hookviz.app.view import fragments, link_notice
from hookviz.app.view.fields import FIELDS, Field

WISH_KEY = "hookviz.view"  # the wish dict
_SHOWN = "hookviz.shown"  # values resolved in this run (cleared at the start of a full run)
_STARTED = "hookviz.started"  # the URL was read for this session
_ON_SCREEN = "hookviz.on_screen"  # the analysis the results show now (``on_screen``)
COMPLETE_KEY = "hookviz.complete"  # the last full run drew the whole page (``completed``)
_PUBLISHED = "hookviz.published"  # the query parameters this page last wrote (``publish``)
_LINKED = "hookviz.linked"  # the link's values, {name: (text, parsed)} till the user acts
_REPLACED = "hookviz.replaced"  # the names of those the page could not use
_NOTICE = "hookviz.link_notice"  # this full run's slot for the notice naming them
_PAGE = "hookviz.page"  # the url path of the page the last full run drew
_UNUSABLE = object()  # (a link's value that did not parse, or a name no field has)
# Values with a notice of their own: a model the server does not offer, a file the link names.
_SAID_ELSEWHERE = ("model", "image", "run_dir")
# Query parameters of Streamlit itself (an embedded app's), not the view's.
_STREAMLITS = ("embed", "embed_options")

WHOLE_PAGE = fragments.WHOLE_PAGE  # (a widget's rerun scope: ``widget(rerun=(WHOLE_PAGE,))``)


def start(page: str) -> None:
    """Begin a full run of the page at url path ``page``: adopt the URL's values (parsed here,
    checked against the real options when each widget is drawn) on a session's first run, and
    when the browser's Back or Forward went to another view than the one this page last wrote:
    that view becomes the view (instead of being written over within 100 ms). Going to another
    page acts on a link as a control change does: its notice goes."""
    session = st.session_state
    if session.get(_PAGE, page) != page:
        _user_acted()
    session[_PAGE] = page
    session[_SHOWN] = {}
    session[COMPLETE_KEY] = False
    address = st.query_params.to_dict()
    # Only Back or Forward: any other run's query string is the browser's copy of what this
    # page wrote, which can lag behind it (adopting it lost a class picked on another page);
    # and an address without the view's fields is a page switch (Streamlit drops the query).
    navigated = (
        _history_step()
        and address != session.get(_PUBLISHED, address)
        and any(name in FIELDS for name in address)
    )
    if not session.get(_STARTED) or navigated:
        session[_STARTED] = True
        session[_PUBLISHED] = address
        _adopt(address)
    _notice_slot()


def _adopt(address: dict[str, str]) -> None:
    """Make the address's values the wish; note those that cannot be used, and the others as
    the link's (``shown`` notes those the page then replaces)."""
    session = st.session_state
    wish: dict[str, Any] = {}
    linked: dict[str, tuple[str, Any]] = {}
    for name, text in address.items():
        field = FIELDS.get(name)
        value = _parsed(field, text) if field is not None else _UNUSABLE
        if value is not _UNUSABLE:
            wish[name] = value
        if name not in _STREAMLITS and name not in _SAID_ELSEWHERE:
            linked[name] = (text, value)
    # (what the address leaves out is at its default, or chosen by the page: the wish of a
    # field the address cannot name, an upload's bytes, stays)
    session[WISH_KEY] = wish
    session[_LINKED] = linked
    session[_REPLACED] = {name for name, (_, value) in linked.items() if value is _UNUSABLE}


def _parsed(field: Field, text: str) -> Any:
    """The value of an address's ``text`` for ``field``; ``_UNUSABLE`` where it does not parse
    or makes no sense (it falls back to the default)."""
    try:
        value = field.parse(text)
    except (ValueError, KeyError):
        return _UNUSABLE
    return value if field.sane(value) else _UNUSABLE


def _notice_slot() -> None:
    """Keep a place at the top of the page for the notice of the link's replaced values, while
    the user has not acted on the link (``publish`` fills it, once the page has resolved them)."""
    session = st.session_state
    session.pop(_NOTICE, None)
    if session.get(_LINKED):
        session[_NOTICE] = st.empty()


def _say_replaced() -> None:
    """Fill the notice slot of this full run: the link's values the page replaced, if any."""
    slot = st.session_state.get(_NOTICE)
    context = get_script_run_ctx(suppress_warning=True)
    if slot is None or getattr(context, "fragment_ids_this_run", None):
        return  # (a fragment run cannot write outside its fragment; the full run's notice stays)
    linked = st.session_state.get(_LINKED, {})
    replaced = st.session_state.get(_REPLACED, set())
    given = [(name, text) for name, (text, _) in linked.items() if name in replaced]
    if given:
        slot.info(link_notice.sentence(given), icon="🔗")
    else:
        slot.empty()


def _user_acted() -> None:
    """The user changed a control: the link's values are no longer what the page shows."""
    st.session_state.pop(_LINKED, None)
    st.session_state.pop(_REPLACED, None)


def _history_step() -> bool:
    """Whether the browser's Back or Forward started this run (Streamlit 1.67 says so in the
    run's context, ``is_history_navigation``; False where it does not)."""
    context = get_script_run_ctx(suppress_warning=True)
    return bool(getattr(context, "is_history_navigation", False))


def completed() -> None:
    """Note that this full run drew the whole page (it was not cut short by the next change,
    nor stopped by an error)."""
    st.session_state[COMPLETE_KEY] = True


def wishes() -> dict[str, Any]:
    """The live wish dict of this session: the same object for the whole session, updated in
    place, so a deferred download built earlier reads the user's latest choices from it."""
    return st.session_state.setdefault(WISH_KEY, {})


def on_screen() -> dict[str, Any]:
    """A live holder of what the results show now (``"analysis"``, set by the panel that draws
    the CAM, and gone while that panel failed): the same object for the whole session, so a
    deferred download drawn in an earlier run reads the class shown at the moment it is
    clicked, and a class change need not redraw the download buttons."""
    return st.session_state.setdefault(_ON_SCREEN, {})


def wish(name: str) -> Any:
    """What the user last chose for ``name`` (its default if never)."""
    return st.session_state.get(WISH_KEY, {}).get(name, FIELDS[name].default)


def choose(name: str, value: Any) -> None:
    """Record a choice made by other means than the field's own widget (a button, a link)."""
    st.session_state.setdefault(WISH_KEY, {})[name] = value


def shown(name: str, value: Any) -> Any:
    """Record the value the page shows for ``name`` in this run (what the URL will name); one
    that is not the link's value for it notes that value as replaced."""
    linked = st.session_state.get(_LINKED, {})
    if name in linked and linked[name][1] is not _UNUSABLE and linked[name][1] != value:
        st.session_state.setdefault(_REPLACED, set()).add(name)
    return _record(name, value)


def _record(name: str, value: Any) -> Any:
    st.session_state.setdefault(_SHOWN, {})[name] = value
    return value


_ITS_DEFAULT = object()  # (``resolve``'s fallback when none is given)


def resolve(name: str, valid: Callable[[Any], bool], fallback: Any = _ITS_DEFAULT) -> Any:
    """The value to show: the wish if ``valid`` accepts it, else ``fallback``: the field's
    default (``fields``) unless given (a value the page chooses, where the default is None,
    "chosen by the page"). The wish stays."""
    if fallback is _ITS_DEFAULT:
        fallback = FIELDS[name].default
    value = wish(name)
    return shown(name, value if valid(value) else fallback)


def clamp(name: str, low: float, high: float) -> Any:
    """The wish pulled into [low, high] (the wish itself stays, for a bigger range later; a
    link's value clamped is not a replaced one)."""
    return _record(name, min(max(wish(name), low), high))


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
    if _history_step():
        # Not the user's change: Back and Forward send the browser's copy of the widgets, and
        # a widget a fragment run last set can come with the value it had before that run
        # (seen with the class box after picks in the top-5). The address is the view of a
        # history step (``start``); and a fragment rerun asked from here would turn the
        # step's full run into a run of those fragments, which never reads the address. (A
        # click that lands while the step's run is pending clears the flag, Streamlit 1.67.)
        return
    _user_acted()
    choose(name, st.session_state[key])
    _rerun(list(rerun() if callable(rerun) else rerun))


def _rerun(scope: list[str]) -> None:
    """After a change, rerun the fragments of ``scope`` alone, or the whole page where
    ``scope`` is ``[WHOLE_PAGE]`` or they cannot be run alone; nothing more where it is empty
    (Streamlit's own rerun follows: the whole page, or the fragment the widget is in)."""
    if scope and not st.session_state.get(COMPLETE_KEY):
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
    values = {**st.session_state.get(WISH_KEY, {}), **st.session_state.get(_SHOWN, {})}
    return {
        name: FIELDS[name].text(value)
        for name, value in values.items()
        if value is not None and value != FIELDS[name].default
    }


def publish() -> None:
    """Write the view to the address bar (only when it changed: every write is a browser
    history update)."""
    wanted = url_values()
    if st.query_params.to_dict() != wanted:
        st.query_params.from_dict(wanted)
    st.session_state[_PUBLISHED] = wanted
    _say_replaced()


def stop() -> None:
    """End this run after an error, the address naming the view that failed (query parameters
    written after ``st.stop`` are dropped, so they are written first)."""
    publish()
    st.stop()


def index_valid(count: int) -> Callable[[Any], bool]:
    """A ``valid`` test for ``resolve``: an index among ``count`` (None, "chosen by the page",
    is not one)."""
    return lambda value: isinstance(value, int) and 0 <= value < count


def options_valid(options: Sequence[Any]) -> Callable[[Any], bool]:
    """A ``valid`` test for ``resolve``: membership in ``options``."""
    return set(options).__contains__
