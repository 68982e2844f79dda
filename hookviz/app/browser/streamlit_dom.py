"""Every part of Streamlit's page that hookviz's browser code, its tests and its benchmark rely
on, in one list.

Streamlit does not promise any of these: they are its frontend's test ids, the class it gives a
keyed element, and the ARIA roles and attributes of its BaseWeb widgets, as the versions that
``pyproject.toml`` allows draw them. The browser-drawn pictures read the sidebar's widgets
through them (``js/dom.js`` gets them as the ``DOM`` constant, ``bundle.py``), the pictures'
CSS names keyed elements through ``key_class`` (``pictures.py``, ``tab.py``); the browser
tests find elements through them. ``tests/test_streamlit_dom.py`` checks each one on a real
page in Chromium: when an upgrade changes one, that test fails with the hook's name and what
relies on it. A new hook is added here first (a test fails on a test id used anywhere else).
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Hook:
    """One thing of Streamlit's page that hookviz relies on.

    Attributes:
        name: how the code names it (``DOM.<name>`` in the JavaScript).
        value: a CSS selector, an attribute's name, or (``key_class``) a class prefix.
        relied_on: who relies on it, for what (said when the contract test fails).
    """

    name: str
    value: str
    relied_on: str


def _test_id(test_id: str) -> str:
    return f'[data-testid="{test_id}"]'


HOOKS: tuple[Hook, ...] = (
    # ---- test ids
    Hook("sidebar", _test_id("stSidebar"), "pictures: the display widgets they follow are in it"),
    Hook("main", _test_id("stMain"), "pictures, tests: the page's main area"),
    Hook(
        "main_block",
        _test_id("stMainBlockContainer"),
        "pictures: Present trims the top padding of the main area's block (its picture fits)",
    ),
    Hook("expander", _test_id("stExpander"), "pictures: an open panel names the layer on screen"),
    Hook("spinner", _test_id("stSpinner"), "tests: st.spinner's message is shown"),
    Hook("progress", _test_id("stProgress"), "tests: the top-5 bars, a job's progress bar"),
    Hook("top_nav_link", _test_id("stTopNavLink"), "tests, screenshots: the page links"),
    Hook(
        "uploader_input",
        _test_id("stFileUploaderDropzoneInput"),
        "tests: set an upload; phone: a file chosen in the sidebar (its change event)",
    ),
    Hook(
        "file_chip_name",
        _test_id("stFileChipName"),
        "tests: the uploader lists a file it was given (by its name)",
    ),
    Hook("button_group", _test_id("stButtonGroup"), "tests: st.segmented_control's buttons"),
    Hook("vega_chart", _test_id("stVegaLiteChart"), "tests: an Altair chart is drawn"),
    Hook("dataframe", _test_id("stDataFrame"), "screenshots: a table is drawn"),
    Hook("skeleton", _test_id("stSkeleton"), "screenshots: an element still loading its code"),
    Hook("selectbox", _test_id("stSelectbox"), "tests: a select box's element"),
    Hook("image", _test_id("stImage"), "tests: an st.image"),
    Hook("caption", _test_id("stCaptionContainer"), "tests: an st.caption"),
    Hook("metric_value", _test_id("stMetricValue"), "tests: an st.metric's value (live camera)"),
    Hook("collapse_sidebar", _test_id("stSidebarCollapseButton"), "tests: close the sidebar"),
    Hook(
        "collapse_sidebar_button",
        f"{_test_id('stSidebarCollapseButton')} button",
        "phone, tests: the button that closes the sidebar (a choice on a phone clicks it)",
    ),
    Hook("expand_sidebar", _test_id("stExpandSidebarButton"), "tests: open it again"),
    Hook(
        "sidebar_nav_link",
        _test_id("stSidebarNavLink"),
        "phone, tests: a page link in the sidebar (picking one on a phone closes it)",
    ),
    # ---- a keyed element's class: st-key-<key>, anything but [a-zA-Z0-9_-] made "-"
    Hook("key_class", "st-key-", "pictures, tests: find a widget or container by its key"),
    # ---- what a widget's elements say
    Hook("open_details", "details[open]", "pictures: an expander that is open"),
    Hook(
        "checked_radio",
        'input[type="radio"]:checked',
        "pictures: a radio's choice, its value the option's index as text",
    ),
    Hook("input", "input", "pictures: a select box's or slider's value is its input's value"),
    Hook("expanded", "aria-expanded", "pictures: a select box is open (its text is a search)"),
    Hook("controls", "aria-controls", "pictures: the list a select box's input opens"),
    Hook("option", '[role="option"]', "pictures, tests: an option of an open select box"),
    Hook("listbox", '[role="listbox"]', "pictures: the list of an open select box"),
    Hook("value_text", "aria-valuetext", "pictures: a slider's value as it moves"),
    Hook("tab_index", "tabindex", "pictures: a radio chosen from the keyboard moves it"),
    Hook(
        "choice_label",
        "label",
        "phone: a radio's, toggle's or checkbox's option is a label, where a click lands",
    ),
    Hook(
        "ticked_input",
        'input[type="radio"], input[type="checkbox"]',
        "phone: the input inside that label (a choice made in one click)",
    ),
    Hook("stale", "data-stale", "tests: Streamlit fades an element its run has not redrawn"),
    Hook("app", _test_id("stApp"), "tests: the app's root, which holds the script's state"),
    Hook(
        "script_state",
        "data-test-script-state",
        "tests: the app root's 'running' or 'notRunning' (a first run leaves nothing stale)",
    ),
    # ---- what Streamlit does in the browser's history
    Hook(
        "page_switch_push",
        "history.pushState",
        "tab: a page switch pushes the page's address without its query before the run writes"
        " the view (js/history.js makes the two pushes one entry)",
    ),
    # ---- ARIA roles the tests find widgets by (Playwright's get_by_role)
    Hook("role_combobox", "combobox", "tests, benchmark: a select box, by its label"),
    Hook("role_radiogroup", "radiogroup", "tests, benchmark: a radio's group of options"),
    Hook("role_radio", "radio", "tests: a radio's option, by its label"),
    Hook("role_slider", "slider", "tests, benchmark: a slider, by its label"),
    Hook("role_spinbutton", "spinbutton", "tests: a number input, by its label"),
    Hook("role_checkbox", "checkbox", "tests: a toggle or checkbox, by its label"),
    Hook("role_button", "button", "tests: a button, by its label"),
)

BY_NAME: dict[str, Hook] = {hook.name: hook for hook in HOOKS}


def key_class(key: str) -> str:
    """The class of the element Streamlit draws for ``key`` (``st-key-<key>``, its characters
    outside [a-zA-Z0-9_-] made "-"), as ``js/dom.js`` computes it."""
    return BY_NAME["key_class"].value + re.sub(r"[^a-zA-Z0-9_-]", "-", key.strip())


def for_browser() -> dict[str, str]:
    """The hooks as ``js/dom.js`` reads them: name -> value."""
    return {hook.name: hook.value for hook in HOOKS}
