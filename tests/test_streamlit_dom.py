"""The contract with Streamlit's page (``hookviz/app/browser/streamlit_dom.py``): every hook the
browser code, the tests and the benchmark rely on is listed there, and each one is checked here on a
real Streamlit page in Chromium (``tests/apps/streamlit_dom_page.py``). When an upgrade of
Streamlit changes one, the test fails naming the hook and what relies on it."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlparse

import pytest

from hookviz.app.browser import bundle, streamlit_dom
from hookviz.app.browser.streamlit_dom import BY_NAME, HOOKS, key_class

ROOT = Path(__file__).resolve().parent.parent
SLOW = 120_000
BOX_KEY = "a box/with:odd keys"  # (the page's keys and labels)

# ---------------------------------------------------------------- every hook is listed


def _sources() -> list[Path]:
    folders = ("hookviz/app", "tests", "bench", "scripts")
    found = [
        p for folder in folders for p in (ROOT / folder).rglob("*") if p.suffix in (".py", ".js")
    ]
    return [p for p in found if p.name != "streamlit_dom.py"]


def test_every_streamlit_test_id_used_anywhere_is_listed() -> None:
    """A Streamlit test id (``stXxx``) used in the page code, a test, the benchmark or a script
    is one of the listed hooks (so the contract test checks it)."""
    listed = {hook.value for hook in HOOKS}
    unlisted = {}
    for path in _sources():
        text = path.read_text(encoding="utf-8")
        for test_id in re.findall(r"""data-testid[=\\'" ]*["']?(st[A-Z]\w+)""", text):
            if f'[data-testid="{test_id}"]' not in listed:
                unlisted.setdefault(test_id, path.relative_to(ROOT).as_posix())
    assert not unlisted, f"Streamlit test ids used but not in streamlit_dom.HOOKS: {unlisted}"


def test_the_browser_code_reaches_streamlit_only_through_the_list() -> None:
    """The JavaScript names no Streamlit test id, key class or role of its own: it reads them
    from ``DOM``."""
    for path in sorted(bundle.JS.glob("*.js")):
        # (the code, not its comments)
        text = re.sub(r"//.*", "", path.read_text(encoding="utf-8"))
        for raw in (r"\bst[A-Z]\w+", "st-key-", "role=", "aria-expanded", "aria-controls"):
            found = re.search(raw, text)
            assert found is None, f"{path.name} uses {found[0]!r} directly: add a hook to the list"
    used = {
        name
        for entry in ("main.js", "tab.js")  # (each component's script)
        for name in re.findall(r"\bDOM\.(\w+)", bundle.bundle(entry=entry))
    }
    assert used <= set(BY_NAME), f"the JavaScript uses unlisted hooks: {used - set(BY_NAME)}"


def test_the_page_code_names_streamlits_classes_only_through_the_list() -> None:
    """The page's Python (its CSS included) and JavaScript write no Streamlit key class
    (``st-key-``) or test id by hand: they take them from ``streamlit_dom`` (``key_class``,
    ``DOM``), so that this contract test checks each one."""
    paths = [ROOT / "app.py", *(ROOT / "hookviz" / "app").rglob("*.py"), *bundle.JS.glob("*.js")]
    by_hand = {}
    for path in paths:
        if path.name == "streamlit_dom.py":
            continue
        text = path.read_text(encoding="utf-8")
        if path.suffix == ".js":
            text = re.sub(r"//.*", "", text)  # (the code, not its comments)
        for line_number, line in enumerate(text.splitlines(), 1):
            found = re.search(r"st-key-|data-testid\W*st[A-Z]|\bst[A-Z][a-z]+[A-Z]\w*", line)
            if found:
                by_hand[f"{path.relative_to(ROOT).as_posix()}:{line_number}"] = found[0]
    assert not by_hand, f"Streamlit's classes written by hand, not through streamlit_dom: {by_hand}"


def test_the_bundle_refuses_a_name_defined_twice(tmp_path: Path) -> None:
    (tmp_path / "main.js").write_text('import { a } from "./one.js";\nexport default a;\n')
    (tmp_path / "one.js").write_text('import { b } from "./two.js";\nexport const a = b;\n')
    (tmp_path / "two.js").write_text("export const b = 1;\nconst a = 2;\n")
    with pytest.raises(bundle.BundleError, match=r"a is defined by both two\.js and one\.js"):
        bundle.bundle(tmp_path)
    (tmp_path / "two.js").write_text('import { a } from "./one.js";\nexport const b = 1;\n')
    with pytest.raises(bundle.BundleError, match="import cycle"):
        bundle.bundle(tmp_path)


def test_key_classes_follow_streamlits_rule() -> None:
    assert key_class(BOX_KEY) == "st-key-a-box-with-odd-keys"
    assert key_class("target@0a1b:efficientnet_lite0:True") == (
        "st-key-target-0a1b-efficientnet_lite0-True"
    )


# ---------------------------------------------------------------- each hook, on a real page

try:
    from playwright.sync_api import Page, sync_playwright
except ImportError:  # pragma: no cover - depends on the machine
    sync_playwright = None


@pytest.fixture(scope="module")
def contract_page() -> Iterator[Page]:
    from scripts.appserver import CHROMIUM_FLAGS, chromium_path, free_port, running_app

    if sync_playwright is None or not Path(chromium_path()).exists():
        pytest.skip("Playwright or Chromium missing")
    script = ROOT / "tests" / "apps" / "streamlit_dom_page.py"
    with (
        running_app(free_port(), timeout=120, script=script) as url,
        sync_playwright() as playwright,
    ):
        browser = playwright.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_FLAGS)
        page = browser.new_page(viewport={"width": 1366, "height": 900})
        page.goto(url)
        for role in ("slider", "radio", "spinbutton", "checkbox"):
            page.get_by_role(role).first.wait_for(state="attached", timeout=SLOW)
        page.locator(BY_NAME["vega_chart"].value).first.wait_for(timeout=SLOW)
        yield page
        browser.close()


def _count(page: Page, selector: str) -> int:
    return page.locator(selector).count()


def _present(name: str) -> Callable[[Page], bool]:
    return lambda page: _count(page, BY_NAME[name].value) >= 1


def _in_main(name: str) -> Callable[[Page], bool]:
    return lambda page: _count(page, f"{BY_NAME['main'].value} {BY_NAME[name].value}") >= 1


def _keyed(page: Page, key: str, inner: str = "") -> str:
    return f".{key_class(key)}" + (f" {inner}" if inner else "")


def _checked_radio(page: Page) -> bool:
    checked = page.locator(_keyed(page, "radio", BY_NAME["checked_radio"].value))
    return checked.count() == 1 and checked.get_attribute("value") == "1"  # index, as text


def _input_value(page: Page) -> bool:
    slider = page.locator(_keyed(page, "slider", BY_NAME["input"].value))
    box = page.locator(_keyed(page, BOX_KEY, BY_NAME["input"].value))
    return slider.input_value() == "4" and box.input_value() == "alpha"


def _value_text(page: Page) -> bool:
    slider = page.locator(_keyed(page, "slider", BY_NAME["input"].value))
    return slider.get_attribute(BY_NAME["value_text"].value) == "4"


def _tab_index(page: Page) -> bool:
    # the radio's option checked is the one the keyboard reaches
    attribute = BY_NAME["tab_index"].value
    focusable = page.locator(_keyed(page, "radio", f"input[{attribute}='0']"))
    return focusable.count() == 1 and focusable.get_attribute("value") == "1"


def _open_box(page: Page) -> dict:
    """The class box's open state: its input's attributes, and the list they point at."""
    box = page.locator(_keyed(page, BOX_KEY, BY_NAME["input"].value))
    closed = box.get_attribute(BY_NAME["expanded"].value)
    box.click()
    page.locator(BY_NAME["option"].value).first.wait_for(timeout=10_000)
    state = page.evaluate(
        """([input, dom]) => {
          const box = document.querySelector(input);
          const list = document.getElementById(box.getAttribute(dom.controls));
          return {
            expanded: box.getAttribute(dom.expanded),
            listIsListbox: !!list && list.matches(dom.listbox),
            options: list ? [...list.querySelectorAll(dom.option)].map(o => o.textContent) : [],
          };
        }""",
        [_keyed(page, BOX_KEY, BY_NAME["input"].value), streamlit_dom.for_browser()],
    )
    page.keyboard.press("Escape")
    return {"closed": closed, **state}


def _expanded(page: Page) -> bool:
    state = _open_box(page)
    return state["closed"] == "false" and state["expanded"] == "true"


def _controls(page: Page) -> bool:
    state = _open_box(page)
    # (the options' text as shown: runs of spaces folded by the reader, ``dom.js``'s plain)
    shown = [" ".join(text.split()) for text in state["options"]]
    return state["listIsListbox"] and shown == ["alpha", "beta gamma", "delta"]


def _in_frontend(selector: str) -> bool:
    """Whether Streamlit's frontend code draws an element with this test id."""
    import streamlit

    test_id = re.search(r'data-testid="(\w+)"', selector)[1]
    static = Path(streamlit.__file__).parent / "static"
    return any(f"`{test_id}`" in path.read_text(errors="ignore") for path in static.rglob("*.js"))


def _role(role: str) -> Callable[[Page], bool]:
    return lambda page: page.get_by_role(role).count() >= 1


def _during_a_slow_run(page: Page) -> dict[str, bool]:
    """What shows while a script run is in progress: the spinner, the elements not redrawn yet
    marked stale, and the app root's script state "running" ("notRunning" once it ended).
    (Streamlit's status widget never shows with this app's settings: it is no sign of a
    run.)"""
    page.get_by_role("button", name="Slow run").click()
    page.locator(BY_NAME["spinner"].value).first.wait_for(timeout=10_000)
    seen = {"spinner": True}
    page.wait_for_function(
        '(stale) => document.querySelector(`[${stale}="true"]`) !== null',
        arg=BY_NAME["stale"].value,
        timeout=10_000,
    )
    seen["stale"] = True
    app, state = BY_NAME["app"].value, BY_NAME["script_state"].value
    running = page.evaluate("([app, state]) => document.querySelector(app)?.getAttribute(state)",
                            [app, state])  # fmt: skip
    page.locator(BY_NAME["spinner"].value).first.wait_for(state="detached", timeout=SLOW)
    page.wait_for_function(
        "([app, state]) => document.querySelector(app)?.getAttribute(state) === 'notRunning'",
        arg=[app, state],
        timeout=10_000,
    )
    seen["app"] = seen["script_state"] = running == "running"
    return seen


INSIDE_THE_WINDOW = """(selector) => {
  const box = document.querySelector(selector)?.getBoundingClientRect();
  return !!box && box.width > 0 && box.x >= 0 && box.y >= 0
    && box.right <= window.innerWidth && box.bottom <= window.innerHeight;
}"""


def _narrow(page: Page) -> dict[str, bool]:
    """At a phone's width the sidebar starts closed, with the button that opens it; open, it
    holds the page links and the button that closes it."""
    page.set_viewport_size({"width": 390, "height": 844})
    seen = {}

    def attached(name: str):
        locator = page.locator(BY_NAME[name].value).first
        locator.wait_for(state="attached", timeout=10_000)
        seen[name] = True
        return locator

    try:
        expand = attached("expand_sidebar")
        # (the window's resize moves it in: clicked once it is inside the window)
        page.wait_for_function(
            INSIDE_THE_WINDOW, arg=BY_NAME["expand_sidebar"].value, timeout=10_000
        )
        expand.click()
        attached("sidebar_nav_link")
        attached("collapse_sidebar")
        # (the sidebar slides in: its button is clicked once it is inside the window)
        collapse_button = BY_NAME["collapse_sidebar_button"].value
        page.wait_for_function(INSIDE_THE_WINDOW, arg=collapse_button, timeout=10_000)
        page.locator(collapse_button).first.click()
        page.wait_for_function(
            INSIDE_THE_WINDOW, arg=BY_NAME["expand_sidebar"].value, timeout=10_000
        )
        seen["collapse_sidebar_button"] = True
        return seen
    finally:
        page.set_viewport_size({"width": 1366, "height": 900})


def _choice_labels(page: Page) -> bool:
    """A radio's options, a toggle and a checkbox are each a label in the sidebar with the
    input it ticks inside (a click on the label makes the choice)."""
    label, ticked = BY_NAME["choice_label"].value, BY_NAME["ticked_input"].value
    counts = [
        page.locator(_keyed(page, key, label)).filter(has=page.locator(ticked)).count()
        for key in ("radio", "toggle", "check")
    ]
    checked = page.locator(_keyed(page, "check")).locator(ticked)
    page.locator(_keyed(page, "check", label)).first.click()  # (its text, not its input)
    ticks = checked.is_checked()
    page.locator(_keyed(page, "check", label)).first.click()  # (as it was)
    return counts == [3, 1, 1] and ticks and not checked.is_checked()


def _page_switch(page: Page) -> dict[str, bool]:
    """A click on another page's link pushes that page's address, without a query, on the
    browser's history (``js/history.js`` makes it and the run's push one entry)."""
    page.evaluate(
        """() => {
          window.__pushed = [];
          const push = history.pushState.bind(history);
          history.pushState = (state, unused, url) => {
            window.__pushed.push(String(new URL(url, location.href)));
            return push(state, unused, url);
          };
        }"""
    )
    page.locator(BY_NAME["top_nav_link"].value).filter(has_text="Other").first.click()
    page.get_by_text("Another page").wait_for(timeout=SLOW)
    pushed = [urlparse(url) for url in page.evaluate("window.__pushed")]
    bare = any(url.path.endswith("/other") and not url.query for url in pushed)
    return {"page_switch_push": bare}


CHECKS: dict[str, Callable[[Page], bool]] = {
    "sidebar": _present("sidebar"),
    "main": _present("main"),
    "main_block": _present("main_block"),
    "expander": _in_main("expander"),
    "progress": _present("progress"),
    "top_nav_link": _present("top_nav_link"),
    "uploader_input": _present("uploader_input"),
    # (shown only once a file is given: the frontend draws it)
    "file_chip_name": lambda page: _in_frontend(BY_NAME["file_chip_name"].value),
    "button_group": _present("button_group"),
    "vega_chart": _present("vega_chart"),
    "dataframe": _present("dataframe"),
    # (shown only while an element's code loads: the frontend still draws it)
    "skeleton": lambda page: _in_frontend(BY_NAME["skeleton"].value),
    "selectbox": _present("selectbox"),
    "image": _present("image"),
    "caption": _present("caption"),
    "metric_value": _present("metric_value"),
    "key_class": lambda page: _count(page, _keyed(page, BOX_KEY, "input")) == 1,
    "open_details": lambda page: (
        _count(page, f"{BY_NAME['main'].value} {BY_NAME['expander'].value} details[open]") >= 1
    ),
    "checked_radio": _checked_radio,
    "input": _input_value,
    "value_text": _value_text,
    "tab_index": _tab_index,
    "choice_label": _choice_labels,
    "ticked_input": _choice_labels,
    "expanded": _expanded,
    "controls": _controls,
    "option": _controls,
    "listbox": _controls,
    **{hook.name: _role(hook.value) for hook in HOOKS if hook.name.startswith("role_")},
}
# checked by the page's behaviour rather than by a look at it
IN_A_RUN = ("spinner", "stale", "app", "script_state")
NARROW = ("sidebar_nav_link", "collapse_sidebar", "collapse_sidebar_button", "expand_sidebar")
PAGE_SWITCH = ("page_switch_push",)


def test_every_hook_has_a_check() -> None:
    checked = set(CHECKS) | set(IN_A_RUN) | set(NARROW) | set(PAGE_SWITCH)
    assert checked == set(BY_NAME), (
        f"hooks without a check: {set(BY_NAME) - checked}; checks of no hook: "
        f"{checked - set(BY_NAME)}"
    )


def _failed(name: str, exc: Exception) -> str:
    return f"{name} ({type(exc).__name__}: {str(exc).splitlines()[0]})"


def _broken(page: Page) -> list[str]:
    """The hooks not found as relied on (each with the error that showed it, if any)."""
    broken = []
    groups = {_during_a_slow_run: IN_A_RUN, _narrow: NARROW, _page_switch: PAGE_SWITCH}
    # the slow run first (the select box's checks leave it focused, which takes a click), the
    # narrow window after the others (it leaves the sidebar closed), the page switch last (it
    # leaves the page)
    for group in (_during_a_slow_run, None, _narrow, _page_switch):
        if group is None:
            for name, check in CHECKS.items():
                try:
                    if not check(page):
                        broken.append(name)
                except Exception as exc:  # (a Playwright error: not there as relied on)
                    broken.append(_failed(name, exc))
            continue
        try:
            seen = group(page)
        except Exception as exc:
            seen = {}
            broken.append(_failed(group.__name__, exc))
        broken += [name for name in groups[group] if not seen.get(name)]
    return broken


@pytest.mark.browser
def test_each_hook_is_on_a_real_streamlit_page(contract_page: Page) -> None:
    lines = []
    for found in _broken(contract_page):
        name = found.split(" ")[0]
        hook = BY_NAME.get(name)
        lines.append(f"{found}: {hook.value!r}, relied on by {hook.relied_on}" if hook else found)
    assert not lines, "Streamlit's page no longer has these hooks:\n" + "\n".join(lines)
