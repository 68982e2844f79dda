"""What the whole browser tab keeps from its first page on, installed once per tab by a
component of its own (``js/tab.js``), apart from the pictures': a page visit is one history
entry, so that Back steps through the user's pages and choices (``js/history.js``, which
rewrites Streamlit's history pushes), and on a phone a choice in the sidebar closes it, so
the page it changed shows (``js/phone.js``). Its element draws nothing."""

from __future__ import annotations

import streamlit as st

from hookviz.app.browser import bundle
from hookviz.app.browser.streamlit_dom import key_class

NAME = "hookviz_tab"
KEY = "browser_tab"

_COMPONENT = st.components.v2.component(
    NAME,
    js=bundle.bundle(entry="tab.js"),
    # draw nothing: no room, no gap in its column (several lines: Streamlit reads a one-line
    # string as a file path)
    css=f"""
.{key_class(KEY)} {{
  display: none;
}}
""",
    # in the page's own DOM, as the pictures' component: the rule above reaches its element
    isolate_styles=False,
)


def once_per_tab() -> None:
    """Install, once per browser tab, what the whole tab keeps (this module's docstring)."""
    _COMPONENT(key=KEY, width="stretch")
