"""The pages' url paths (what the address bar names; the browser tests open them), and the Page
that stands for one where a page switches to another or links to it. ``main.py`` builds the top
navigation from these paths, with each page's title, icon and the function that draws it."""

from __future__ import annotations

import streamlit as st

EXPLORE = "explore"  # the default page: its address is the app's root
BEYOND = "beyond"
METHODS = "methods"
CHANNEL = "channel"
DIAGNOSE = "diagnose"
COMPARE = "compare"
PRESENT = "present"
LIVE_CAMERA = "camera"
YOUR_MODEL = "your-model"
DATASET = "dataset"


def page_at(url_path: str) -> st.Page:
    """The page at ``url_path``, for ``st.switch_page`` and ``st.page_link``. Streamlit finds a
    page drawn by a function by its url path alone: this Page only names it, and is never run
    (the navigation's own Page, ``app.PAGES``, is)."""
    return st.Page(_named_only, url_path=url_path, default=url_path == EXPLORE)


def _named_only() -> None:
    """What a Page from ``page_at`` would draw: nothing, as it is never run."""
