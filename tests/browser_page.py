"""What every real-browser test shares: the app server and Chromium (fixtures), the ways a test
opens, drives and reads the page (plain functions), and the JavaScript spies that watch the
page from inside. The tests themselves live in ``test_browser_*.py``, one module per page or
feature; each imports the fixtures it uses from here, under their function names (a test
asks for ``server``, ``browser``, ``page``, ``open_page`` or ``big_jpeg``)::

    from .browser_page import open_page_fixture  # noqa: F401  (a fixture: open_page)

Each module starts its own ``streamlit run app.py`` on a loopback port (``server``) and its own
Chromium (``browser``; Debian's, through Playwright). Every page a test opens records the
requests it makes, and the test fails if one goes anywhere but 127.0.0.1 (``open_page`` checks
at the end of the test; a test that opens its own session calls ``assert_only_local``).
Screenshots and the measured control-to-picture times (``timings.json``) are written to
``test-artifacts/browser`` (or $HOOKVIZ_ARTIFACTS/browser). Tests wait for events (a text, a
query parameter, the end of Streamlit's run, a picture's new version), never for time.

Without Playwright or Chromium, importing this module skips the importing test module, unless
HOOKVIZ_REQUIRE_BROWSER=1 (as in .ci/run), where a missing browser is a failure.
"""

from __future__ import annotations

import base64
import functools
import io
import json
import os
import re
import time
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import hookviz
from hookviz.app.browser.streamlit_dom import BY_NAME
from scripts import page_pictures
from scripts.appserver import CHROMIUM_FLAGS, chromium_path, free_port, running_app

from .conftest import ARTIFACTS

REQUIRED = os.environ.get("HOOKVIZ_REQUIRE_BROWSER") == "1"

try:
    from playwright.sync_api import Page, sync_playwright
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    from bench.page_speed import big_photo
    from bench.page_speed import open_box as open_box
except ImportError:  # pragma: no cover - depends on the machine
    sync_playwright = None

if sync_playwright is None or not Path(chromium_path()).exists():
    reason = "Playwright or Chromium missing (pip install playwright; apt-get install chromium)"
    if REQUIRED:
        raise RuntimeError(reason)
    pytest.skip(reason, allow_module_level=True)

LOCAL_HOSTS = {"127.0.0.1", "localhost"}
SLOW = 180_000  # ms: a cold model load plus analysis on 2 CPU cores
# measured times, by what was measured: written to timings.json as each module's browser closes
TIMINGS: dict[str, float] = {}

OVERFLOW = (
    "() => document.querySelector('[data-testid=\"stMain\"]').scrollWidth - window.innerWidth"
)
BAR = re.compile(r"^(\d+)\. (.+) \((\d+)\) · [\d.]+%$")
CHANNELS = re.compile(r"(\d+) of (\d+) channels")

# waits until the overlay's title (hvTitle) reads the given text
TITLE_IS = "(title) => document.querySelector('[data-testid=hvTitle]')?.textContent === title"


# ---------------------------------------------------------------- spies (JavaScript)

# Installed before the page's own scripts on a cold start: polls the page every 50 ms and notes
# the first sample with a working indicator and the first with results.
COLD_START_SPY = """
(() => {
  const seen = (window.__hookviz = {samples: 0, working: null, results: null});
  setInterval(() => {
    if (!document.body) return;
    seen.samples += 1;
    const text = document.body.innerText;
    const spinner = document.querySelector("[data-testid='stSpinner']");
    const results = [...document.querySelectorAll("button")].some(
      (b) => b.innerText.includes("Download feature maps (PNG)"));
    if (seen.working === null && (text.includes("Starting hookviz") || spinner)) {
      const what = spinner ? spinner.innerText : "Starting hookviz";
      seen.working = {sample: seen.samples, text: what.split("\\n")[0], results: results};
    }
    if (seen.results === null && results) seen.results = seen.samples;
  }, 50);
})();
"""

# Every distinct spinner text seen in the main area (first line: the elapsed time left out).
SPINNER_SPY = """() => {
  const seen = (window.__spinners = []);
  const grab = () => {
    for (const s of document.querySelectorAll("[data-testid='stMain'] [data-testid='stSpinner']")) {
      const text = s.innerText.trim().split("\\n")[0];
      if (text && !seen.includes(text)) seen.push(text);
    }
  };
  new MutationObserver(grab).observe(document.body,
    {subtree: true, childList: true, characterData: true});
  setInterval(grab, 50);
}"""

# The original's caption and the overlay's caption, with whether each is stale (left from the
# previous run), recorded on every change of the page and every 50 ms (only changed states).
CAPTION_SAMPLER = """() => {
  const samples = (window.__captions = []);
  let last = "";
  const grab = () => {
    // (the overlay's caption is the picture's own, drawn with it)
    const captions = [...document.querySelectorAll(
      "[data-testid='stMain'] [data-testid='stCaptionContainer'],"
      + " [data-testid='stMain'] [data-testid='hvCaption']")];
    const original = captions.find((c) => c.innerText.includes("px · fed to the model"));
    const overlay = captions.find((c) => c.innerText.startsWith("Grad-CAM for “"));
    const stale = (e) => !!(e && e.closest("[data-stale='true']"));
    const sample = {
      at: performance.now(),
      original: original ? original.innerText : null, originalStale: stale(original),
      overlay: overlay ? overlay.innerText : null, overlayStale: stale(overlay),
    };
    const key = JSON.stringify({...sample, at: 0});
    if (key !== last) { last = key; samples.push(sample); }
  };
  new MutationObserver(grab).observe(document.body, {subtree: true, childList: true,
    characterData: true, attributes: true, attributeFilter: ["data-stale"]});
  setInterval(grab, 50);
  grab();
}"""

# The page's clock for the browser-drawn pictures: the last input, each draw, each message the
# server sends.
DRAW_SPY = """
window.__hvInput = 0; window.__hvDraws = []; window.__hvReplies = [];
for (const type of ['keydown', 'pointerdown']) {
  addEventListener(type, () => { window.__hvInput = performance.now(); }, true);
}
document.addEventListener('hookviz:drawn', () => window.__hvDraws.push(performance.now()), true);
const NativeSocket = window.WebSocket;
window.WebSocket = class extends NativeSocket {
  constructor(...args) {
    super(...args);
    this.addEventListener('message', () => window.__hvReplies.push(performance.now()));
  }
};
"""

# What each browser-drawn picture says at the moment it is drawn (its layer, title and
# captions), beside the page's clock (DRAW_SPY).
TEXT_SPY = (
    DRAW_SPY
    + """
window.__hvSaid = [];
document.addEventListener('hookviz:drawn', (event) => {
  const root = event.target.closest('[data-testid=hvPicture]');
  const index = [...document.querySelectorAll('[data-testid=hvPicture]')].indexOf(root);
  const note = document.querySelector('.st-key-layer_note');
  window.__hvSaid.push([performance.now(), index, root.dataset.layer, root.innerText,
    note ? [note.innerText, note.dataset.hvStale === 'true'] : null]);
}, true);
"""
)


def faded_at_draw_spy(record: str, selector: str) -> str:
    """TEXT_SPY, and at each draw whether the element ``selector`` was faded then, in
    ``window[record]``."""
    return (
        TEXT_SPY
        + f"""
window.{record} = [];
document.addEventListener('hookviz:drawn', () => {{
  const element = document.querySelector('{selector}');
  window.{record}.push(element ? element.dataset.hvStale === 'true' : null);
}}, true);
"""
    )


# each draw: the picture's index and texts, and whether the class box was faded then
CLASS_SPY = faded_at_draw_spy("__hvBoxAtDraw", '[class*="st-key-target-"]')


# ---------------------------------------------------------------- fixtures


@pytest.fixture(scope="module", name="server")
def server_fixture() -> Iterator[str]:
    """The app (``streamlit run app.py``) on a free loopback port, for the whole module."""
    with running_app(free_port(), timeout=120) as url:
        yield url


@pytest.fixture(scope="module", name="browser")
def browser_fixture():
    """Debian's Chromium through Playwright, for the whole module; the times measured so far
    are written to ``timings.json`` (``timings-gwN.json`` in pytest-xdist's worker N) when it
    closes."""
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_FLAGS)
        yield browser
        browser.close()
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    # one file per pytest-xdist worker (each holds its own modules' times), none overwritten
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    name = f"timings-{worker}.json" if worker else "timings.json"
    (ARTIFACTS / name).write_text(json.dumps(TIMINGS, indent=2))


@pytest.fixture(name="page")
def page_fixture(browser, server) -> Iterator[Page]:
    """The default page (Explore, the sample photo), its results drawn; no request left the
    machine, checked at the end."""
    page, requests = open_session(browser, server)
    yield page
    assert_only_local(requests)
    page.context.close()


@pytest.fixture(name="open_page")
def open_page_fixture(browser, server) -> Iterator[Callable[..., Page]]:
    """Open a page of the shared server (``path`` and query after the host; ``wait``: until the
    Explore results are drawn); at the end of the test, check that none of its requests left
    the machine."""
    opened: list[tuple[Page, list[str]]] = []

    def open_(path: str = "/", *, width: int = 1366, height: int = 900, wait: bool = True):
        page, requests = open_session(browser, server + path, width=width, height=height, wait=wait)
        opened.append((page, requests))
        return page

    yield open_
    for page, requests in opened:
        assert_only_local(requests)
        page.context.close()


@pytest.fixture(scope="module", name="big_jpeg")
def big_jpeg_fixture() -> tuple[bytes, tuple[int, int]]:
    """A 37-megapixel camera-like JPEG of the sample photo (about 13 MB) and its size."""
    data = big_photo()
    return data, Image.open(io.BytesIO(data)).size


# ---------------------------------------------------------------- sessions


def open_session(
    browser,
    url: str,
    *,
    width: int = 1366,
    height: int = 900,
    dark: bool = False,
    init_script: str | None = None,
    wait: bool = True,
) -> tuple[Page, list[str]]:
    """A new session (a browser context of its own) at ``url`` and the list its requests are
    recorded in; ``init_script`` runs before the page's own scripts; with ``wait``, returns
    once the Explore results are drawn."""
    context = browser.new_context(
        viewport={"width": width, "height": height},
        color_scheme="dark" if dark else "light",
        accept_downloads=True,
    )
    if init_script is not None:
        context.add_init_script(init_script)
    page = context.new_page()
    requests: list[str] = []
    page.on("request", lambda request: requests.append(request.url))
    page.on("websocket", lambda socket: requests.append(socket.url))
    page.goto(url)
    if wait:
        wait_for_results(page)
    return page, requests


def close_session(page: Page, requests: list[str]) -> None:
    """Check that no request of the session left the machine, then close it."""
    assert_only_local(requests)
    page.context.close()


def assert_only_local(requests: list[str]) -> None:
    outside = [
        url
        for url in requests
        if urllib.parse.urlparse(url).scheme not in ("data", "blob", "about")
        and urllib.parse.urlparse(url).hostname not in LOCAL_HOSTS
    ]
    assert outside == [], f"requests left the machine: {outside[:5]}"
    assert requests, "no request recorded: the recorder is not working"


# ---------------------------------------------------------------- waiting


def wait_for_results(page: Page) -> None:
    """Explore's results drawn (its last download button there) and the run over."""
    page.get_by_role("button", name="Download feature maps (PNG)").wait_for(timeout=SLOW)
    wait_idle(page)


QUIET_MS = 200  # how long the page must stay unchanged after a run to count as drawn

# Records the time of the page's last change (elements added, removed or their text changed;
# attributes left out: focus and hover change those without a run) in window.__hvChanged.
_WATCH_CHANGES = """() => {
  if (window.__hvChanged === undefined) {
    window.__hvChanged = performance.now();
    new MutationObserver(() => { window.__hvChanged = performance.now(); }).observe(
      document.body, {childList: true, subtree: true, characterData: true});
  }
}"""


def wait_idle(page: Page, timeout: float = SLOW) -> None:
    """Wait until Streamlit has finished the current run and the browser has drawn it: the
    app's root says the script is not running, no element is left stale from the previous
    run, and the page has not changed for ``QUIET_MS``. (A session's first run leaves nothing
    stale; and the browser applies a run's last elements a moment after it is told the run
    ended, later on a loaded machine: a click then can land on a button still moving.
    Streamlit's status widget is no sign: with this app's settings it is never shown,
    ``tests/test_streamlit_dom.py``.)"""
    page.evaluate(_WATCH_CHANGES)
    page.wait_for_function(
        "([app, state, stale, quiet]) => document.querySelector(app)?.getAttribute(state)"
        " === 'notRunning' && !document.querySelector(`[${stale}=\"true\"]`)"
        " && performance.now() - window.__hvChanged >= quiet",
        arg=[
            BY_NAME["app"].value,
            BY_NAME["script_state"].value,
            BY_NAME["stale"].value,
            QUIET_MS,
        ],
        timeout=timeout,
    )


def wait_for_text(page: Page, text: str, where: str = "stMain") -> None:
    page.locator(f"[data-testid='{where}']").get_by_text(text, exact=False).first.wait_for(
        timeout=SLOW
    )


def wait_for_query(page: Page, part: str) -> None:
    """Until the address's query contains ``part`` (the server has recorded the change)."""
    page.wait_for_function("(part) => location.search.includes(part)", arg=part, timeout=SLOW)


def wait_for_new_overlay(page: Page, before: str) -> None:
    """Wait until the overlay (picture 1) shows a new, decoded picture and the run is over."""
    page.wait_for_function(
        f"(before) => {{ {page_pictures.helpers()} const i = pictures()[1];"
        " return !!i && version(i) !== before && ready(i); }",
        arg=before,
        timeout=SLOW,
    )
    wait_idle(page)


def timed_change(page: Page, name: str, action: Callable[[], object], image_index: int) -> None:
    """Run ``action`` and wait until picture ``image_index`` has a new version; record the time
    in TIMINGS under ``name``."""
    before = image_sources(page)[image_index]
    started = time.perf_counter()
    action()
    page.wait_for_function(
        f"([index, before]) => {{ {page_pictures.helpers()} const imgs = pictures();"
        "  return imgs.length > index && version(imgs[index]) !== before && ready(imgs[index]); }",
        arg=[image_index, before],
        timeout=SLOW,
    )
    TIMINGS[name] = round(time.perf_counter() - started, 3)
    wait_idle(page)


# ---------------------------------------------------------------- reading the page


def main_text(page: Page) -> str:
    return page.locator("[data-testid='stMain']").inner_text()


def overflow(page: Page) -> int:
    """How far the main area scrolls sideways (px; 0 or less: not at all)."""
    return page.evaluate(OVERFLOW)


def image_sources(page: Page) -> list[str]:
    """Each picture's version (page order: the original, the overlay, its colour bar, the
    feature-map grid, the heatmap): an image's source, a browser-drawn picture's draw count."""
    return page.evaluate(f"() => {{ {page_pictures.helpers()} return pictures().map(version); }}")


def assert_images_loaded(page: Page, count: int | None = 5) -> None:
    """Every image of the page (``count`` of them; with None, every visible one) decoded with a
    non-zero natural size, checked at one instant (images decode after a run ends)."""
    sizes = page.wait_for_function(
        f"(count) => {{ {page_pictures.helpers()}"
        "  let imgs = pictures();"
        "  if (count === null) imgs = imgs.filter(i => i.offsetParent !== null);"
        "  const ok = (count === null ? imgs.length > 0 : imgs.length === count)"
        "    && imgs.every(ready);"
        "  return ok && imgs.map(size);"
        "}",
        arg=count,
        timeout=30_000,
    ).json_value()
    assert sizes and all(w > 0 and h > 0 for w, h in sizes), sizes
    assert count is None or len(sizes) == count, sizes


def drawn(page: Page, index: int) -> np.ndarray:
    """The pixels of browser-drawn picture ``index`` (0 overlay, 1 its colour bar, 2 the
    feature-map grid, 3 the heatmap)."""
    url = page.evaluate(
        "(i) => document.querySelectorAll('[data-testid=hvPicture] canvas')[i].toDataURL()", index
    )
    png = base64.b64decode(url.split(",", 1)[1])
    return np.asarray(Image.open(io.BytesIO(png)).convert("RGB"))


def draw_counts(page: Page) -> list[str]:
    """How many times each browser-drawn picture (overlay, grid, heatmap) has been drawn."""
    return page.evaluate(
        "() => [...document.querySelectorAll('[data-testid=hvPicture] canvas.hv-main')]"
        ".map((c) => c.dataset.drawn)"
    )


def drawn_before_the_reply(page: Page) -> bool:
    """Whether a picture was drawn after the last input and before the server's first reply
    to it (``DRAW_SPY``)."""
    draws, replies, pressed = page.evaluate(
        "[window.__hvDraws, window.__hvReplies, window.__hvInput]"
    )
    first_reply = min((t for t in replies if t > pressed), default=float("inf"))
    return any(pressed < t < first_reply for t in draws)


def slider_value(page: Page, name: str) -> float:
    """A slider's value as assistive technology reads it (aria-valuenow; Streamlit's react-aria
    slider puts it in the range input's value)."""
    slider = page.get_by_role("slider", name=name)
    return float(slider.get_attribute("aria-valuenow") or slider.input_value())


def channels_shown(page: Page) -> tuple[int, int]:
    """(shown, of) from the grid's caption "N of M channels, ..."."""
    found = CHANNELS.search(main_text(page))
    assert found, "no grid caption"
    return int(found[1]), int(found[2])


def bars(page: Page) -> list[tuple[int, str, int]]:
    """The top-5 bars, top to bottom, as (rank, name, class index)."""
    texts = page.locator("[data-testid='stMain'] [data-testid='stProgress']").all_inner_texts()
    found_bars = []
    for text in texts:
        found = BAR.match(text.strip())
        assert found, f"unexpected bar text {text!r}"
        found_bars.append((int(found[1]), found[2], int(found[3])))
    return found_bars


def overlay_class(page: Page) -> str:
    found = re.search(r"Grad-CAM: “(.+?)”", main_text(page))
    assert found, "no overlay title"
    return found[1]


def options(page: Page, box: str) -> list[str]:
    """The options a select box lists when opened, in order; the box is closed again. (The box
    is first scrolled to the middle of the sidebar: at the window's bottom edge its list opens
    and closes again at once.)"""
    combobox = page.get_by_role("combobox", name=box)
    combobox.evaluate("e => e.scrollIntoView({block: 'center'})")
    select = page.locator("[data-testid='stSelectbox']").filter(has=combobox)
    select.get_by_role("button", name="Open").click()
    page.get_by_role("option").first.wait_for()
    listed = page.get_by_role("option").all_inner_texts()
    page.keyboard.press("Escape")
    return listed


def top_five(page: Page):
    """The sidebar's top-5 radio group."""
    return page.locator("[data-testid='stSidebar'] [role='radiogroup']").filter(
        has=page.get_by_text("Top-1:")
    )


def sidebar_visible(page: Page) -> bool:
    box = page.locator("[data-testid='stSidebar']").bounding_box()
    return box is not None and box["width"] > 0 and box["x"] + box["width"] > 0


# ---------------------------------------------------------------- acting as a user


def choose(page: Page, box: str, option: str) -> None:
    """Pick an option as a user would: open the box, type to filter (long lists are virtual,
    only the visible options exist in the page), click the option. A list that closes again
    (the page moving under it as a late chart draws, on a loaded machine) is opened again, up
    to three times."""
    for attempt in range(3):
        open_box(page, box)
        page.keyboard.type(option)
        choice = page.get_by_role("option", name=option, exact=True)
        try:
            choice.wait_for(timeout=10_000)
            choice.click(timeout=10_000)
            return
        except PlaywrightTimeout:
            if attempt == 2:
                raise
            page.keyboard.press("Escape")
            wait_idle(page)


def pick(page: Page, box: str, prefix: str) -> None:
    """Pick the first option of ``box`` whose label starts with ``prefix`` (for layers of models
    this process does not load: their labels carry shapes)."""
    open_box(page, box)
    page.keyboard.type(prefix)
    page.get_by_role("option").filter(has_text=re.compile("^" + re.escape(prefix))).first.click()


def press(page: Page, slider: str, key: str, until: float | None = None, times: int = 1) -> None:
    """Focus a slider and press ``key`` ``times`` times, or until its value is ``until``."""
    page.get_by_role("slider", name=slider).focus()
    for _ in range(times if until is None else 300):
        if until is not None and slider_value(page, slider) == until:
            break
        page.keyboard.press(key)
    assert until is None or slider_value(page, slider) == until


# How long the uploader may take to list a file it was given before the file counts as never
# delivered to it (the browser's change event lost: once in a loaded CI run the page then waited
# 180 s for a photo it was never sent).
UPLOADER_LISTS_MS = 20_000


def upload(page: Page, name: str, data: bytes, mime: str) -> None:
    """Give the sidebar's uploader a file, as a user's file dialog does, and wait until the
    uploader lists it (its chip): from there on the upload is the page's to handle. A file
    the uploader never listed is given once more; one it lists and the page then never shows
    is the page's failure, which the caller's wait reports."""
    files = [{"name": name, "mimeType": mime, "buffer": data}]
    listed = page.locator(BY_NAME["file_chip_name"].value).filter(has_text=name).first
    for attempt in range(2):
        page.locator("[data-testid='stFileUploaderDropzoneInput']").set_input_files(files=files)
        try:
            listed.wait_for(timeout=UPLOADER_LISTS_MS)
            return
        except PlaywrightTimeout:
            if attempt:
                raise


def set_untrained(page: Page) -> None:
    """Switch the sidebar's weights to untrained (random) and wait for the run."""
    page.get_by_text("untrained", exact=True).click()
    wait_for_text(page, "Untrained: random weights", where="stSidebar")
    wait_idle(page)


def go_to(page: Page, title: str) -> None:
    """Open another page of the app from the top navigation."""
    page.locator("[data-testid='stTopNavLink']").filter(has_text=title).first.click()


def show_sidebar(page: Page, shown: bool) -> None:
    """Open or close the sidebar (narrow windows collapse it over the page), waiting until it
    has slid fully in or out."""
    if sidebar_visible(page) != shown:
        if shown:
            page.locator("[data-testid='stExpandSidebarButton']").click()
        else:
            page.locator("[data-testid='stSidebarCollapseButton'] button").click()
    page.wait_for_function(
        "(shown) => { const b = document.querySelector(\"[data-testid='stSidebar']\")"
        ".getBoundingClientRect();"
        " return shown ? b.width > 0 && b.x >= 0 : b.x + b.width <= 0; }",
        arg=shown,
        timeout=10_000,
    )


def navigate(page: Page, title: str) -> None:
    """``go_to`` in any window: the top navigation when it shows the page's link, else the
    navigation that narrow windows move into the sidebar."""
    top = page.locator("[data-testid='stTopNavLink']").filter(has_text=title)
    if top.count() and top.first.is_visible():
        go_to(page, title)
        return
    show_sidebar(page, True)
    page.locator("[data-testid='stSidebarNavLink']").filter(has_text=title).first.click()


def panel(page: Page, name: str) -> None:
    """Pick a panel of the Beyond / Diagnose pages (a segmented control)."""
    page.locator("[data-testid='stButtonGroup']").get_by_role("radio", name=name).click()


def scroll_to(page: Page, text: str) -> None:
    """Scroll a text into view for a screenshot (retried: an element the last run redrew can
    be replaced while Playwright waits for it to be stable)."""
    for attempt in range(3):
        wait_idle(page)
        try:
            page.get_by_text(text, exact=False).first.scroll_into_view_if_needed(timeout=5_000)
            return
        except Exception:  # a detached element: take the new one
            if attempt == 2:
                raise


def shot(page: Page, name: str, at: str | None = None) -> None:
    """A full-page screenshot ``name``.png in the artifacts folder (the app scrolls inside its
    main area, so a screenful: ``at``, a text, is scrolled into view first)."""
    if at is not None:
        page.get_by_text(at, exact=False).first.evaluate("e => e.scrollIntoView({block: 'start'})")
        page.wait_for_timeout(300)  # let the images in view decode (the picture only)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


# ---------------------------------------------------------------- what the tests show it


@functools.cache
def layer_label(name: str, model: str = "efficientnet_lite0", size=(262, 224)) -> str:
    """The layer picker's label: name and output shape at this image's input size ((height,
    width); the sample photo is fed at 224x262)."""
    loaded = hookviz.load_model(model, device="cpu")
    table = hookviz.layer_table(loaded)
    channels, height, width = hookviz.core.layers.layer_shapes(loaded, *size)[name]
    star = "  ★" if name == table.default else ""
    return f"{name} · {channels}×{height}×{width}{star}"


def network(name: str, untrained: bool = False) -> str:
    """The Network picker's label of a torchvision model: its status from the catalog, or
    "random weights" (no download) when untrained weights are picked."""
    if untrained:
        return f"{name} (random weights)"
    status = next(info.status for info in hookviz.model_catalog() if info.name == name)
    return f"{name} ({status})"


def encoded(size: tuple[int, int], fmt: str) -> bytes:
    """A (width, height) picture in ``fmt``: a red gradient with a green block in the middle."""
    pixels = np.zeros((size[1], size[0], 3), np.uint8)
    pixels[..., 0] = np.linspace(0, 255, size[0], dtype=np.uint8)[None, :]
    pixels[size[1] // 3 : 2 * size[1] // 3, size[0] // 3 : 2 * size[0] // 3] = (20, 200, 40)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format=fmt)
    return buffer.getvalue()


def png(image: Image.Image) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()
