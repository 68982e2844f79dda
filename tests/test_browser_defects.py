"""End-to-end regression tests for the defects a new user found, each in the real page
(`streamlit run app.py` on a loopback port, Playwright in Debian's Chromium).

Like tests/test_browser.py (whose helpers these tests reuse): every test records the requests
its pages make and fails if one leaves 127.0.0.1, and leaves a screenshot (``20-...`` and up)
in ``test-artifacts/browser`` (or $HOOKVIZ_ARTIFACTS/browser). The tests assert what the page
shows, never how fast. Without Playwright or Chromium they are skipped, unless
HOOKVIZ_REQUIRE_BROWSER=1, where a missing browser is a failure.
"""

from __future__ import annotations

import base64
import functools
import io
import json
import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import hookviz
from scripts import page_pictures
from scripts.appserver import CHROMIUM_FLAGS, chromium_path, free_port, running_app

REQUIRED = os.environ.get("HOOKVIZ_REQUIRE_BROWSER") == "1"

try:
    from playwright.sync_api import Page, sync_playwright
except ImportError:  # pragma: no cover - depends on the machine
    sync_playwright = None

if sync_playwright is None or not Path(chromium_path()).exists():
    reason = "Playwright or Chromium missing (pip install playwright; apt-get install chromium)"
    if REQUIRED:
        raise RuntimeError(reason)
    pytest.skip(reason, allow_module_level=True)

from bench.page_speed import big_photo  # noqa: E402  (imports Playwright)

from .test_browser import (  # noqa: E402
    SLOW,
    _assert_images_loaded,
    _assert_only_local,
    _choose,
    _encoded,
    _go_to,
    _image_sources,
    _layer_label,
    _main_text,
    _open_box,
    _shot,
    _upload,
    _wait_for_results,
    _wait_for_text,
    _wait_idle,
)

_label = functools.cache(_layer_label)  # the "Target layer" label (each call loads the model)
OVERFLOW = (
    "() => document.querySelector('[data-testid=\"stMain\"]').scrollWidth - window.innerWidth"
)
BAR = re.compile(r"^(\d+)\. (.+) \((\d+)\) · [\d.]+%$")
CHANNELS = re.compile(r"(\d+) of (\d+) channels")

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


# ---------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    with running_app(free_port(), timeout=120) as url:
        yield url


@pytest.fixture(scope="module")
def browser():
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_FLAGS)
        yield browser
        browser.close()


def _wait_for_new_overlay(page: Page, before: str) -> None:
    """Wait until the overlay (image 1) shows a new, decoded picture and the run is over."""
    page.wait_for_function(
        f"(before) => {{ {page_pictures.helpers()} const i = pictures()[1];"
        " return !!i && version(i) !== before && ready(i); }",
        arg=before,
        timeout=SLOW,
    )
    _wait_idle(page)


@pytest.fixture
def open_page(browser, server) -> Iterator[Callable[..., Page]]:
    """Open a page of the shared server (``path`` and query after the host); at the end of the
    test, check that none of its requests left the machine."""
    opened: list[tuple[Page, list[str]]] = []

    def open_(path: str = "/", *, width: int = 1366, height: int = 900, wait: bool = True):
        page, requests = _new_page(browser, server + path, width=width, height=height)
        opened.append((page, requests))
        if wait:
            _wait_for_results(page)
        return page

    yield open_
    for page, requests in opened:
        _assert_only_local(requests)
        page.context.close()


@pytest.fixture(scope="module")
def big_jpeg() -> tuple[bytes, tuple[int, int]]:
    """A 37-megapixel camera-like JPEG of the sample photo (about 13 MB) and its size."""
    data = big_photo()
    return data, Image.open(io.BytesIO(data)).size


@pytest.fixture(scope="module")
def lite0() -> hookviz.LoadedModel:
    return hookviz.load_model("efficientnet_lite0", device="cpu")


# ---------------------------------------------------------------- helpers


def _new_page(
    browser,
    url: str,
    *,
    width: int,
    height: int,
    init_script: str | None = None,
    before: Callable[[Page], None] | None = None,
):
    """A page at ``url`` in a context of its own; ``before`` prepares it first (routes)."""
    context = browser.new_context(
        viewport={"width": width, "height": height}, accept_downloads=True
    )
    if init_script is not None:
        context.add_init_script(init_script)
    page = context.new_page()
    if before is not None:
        before(page)
    requests: list[str] = []
    page.on("request", lambda request: requests.append(request.url))
    page.on("websocket", lambda socket: requests.append(socket.url))
    page.goto(url)
    return page, requests


def _slider_value(page: Page, name: str) -> float:
    """A slider's value as assistive technology reads it (aria-valuenow; Streamlit's react-aria
    slider puts it in the range input's value)."""
    slider = page.get_by_role("slider", name=name)
    return float(slider.get_attribute("aria-valuenow") or slider.input_value())


def _press(page: Page, slider: str, key: str, until: float | None = None, times: int = 1) -> None:
    """Focus a slider and press ``key`` ``times`` times, or until its value is ``until``."""
    page.get_by_role("slider", name=slider).focus()
    for _ in range(times if until is None else 300):
        if until is not None and _slider_value(page, slider) == until:
            break
        page.keyboard.press(key)
    assert until is None or _slider_value(page, slider) == until


def _wait_for_query(page: Page, part: str) -> None:
    page.wait_for_function("(part) => location.search.includes(part)", arg=part, timeout=SLOW)


def _channels_shown(page: Page) -> tuple[int, int]:
    """(shown, of) from the grid's caption "N of M channels, ..."."""
    found = CHANNELS.search(_main_text(page))
    assert found, "no grid caption"
    return int(found[1]), int(found[2])


def _bars(page: Page) -> list[tuple[int, str, int]]:
    """The top-5 bars, top to bottom, as (rank, name, class index)."""
    texts = page.locator("[data-testid='stMain'] [data-testid='stProgress']").all_inner_texts()
    bars = []
    for text in texts:
        found = BAR.match(text.strip())
        assert found, f"unexpected bar text {text!r}"
        bars.append((int(found[1]), found[2], int(found[3])))
    return bars


def _overlay_class(page: Page) -> str:
    found = re.search(r"Grad-CAM: “(.+?)”", _main_text(page))
    assert found, "no overlay title"
    return found[1]


def _pick(page: Page, box: str, prefix: str) -> None:
    """Pick the first option of ``box`` whose label starts with ``prefix`` (for layers of models
    this process does not load: their labels carry shapes)."""
    _open_box(page, box)
    page.keyboard.type(prefix)
    page.get_by_role("option").filter(has_text=re.compile("^" + re.escape(prefix))).first.click()


def _options(page: Page, box: str) -> list[str]:
    """The options a select box lists when opened, in order; the box is closed again. (The box
    is first scrolled to the middle of the sidebar: at the window's bottom edge its list opens
    and closes again at once.)"""
    combobox = page.get_by_role("combobox", name=box)
    combobox.evaluate("e => e.scrollIntoView({block: 'center'})")
    select = page.locator("[data-testid='stSelectbox']").filter(has=combobox)
    select.get_by_role("button", name="Open").click()
    page.get_by_role("option").first.wait_for()
    options = page.get_by_role("option").all_inner_texts()
    page.keyboard.press("Escape")
    return options


def _png(image: Image.Image) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def _network(name: str, untrained: bool = False) -> str:
    """The Network picker's label of a torchvision model: its status from the catalog, or
    "random weights" (no download) when untrained weights are picked."""
    if untrained:
        return f"{name} (random weights)"
    status = next(info.status for info in hookviz.model_catalog() if info.name == name)
    return f"{name} ({status})"


def _set_untrained(page: Page) -> None:
    page.get_by_text("untrained", exact=True).click()
    _wait_for_text(page, "Untrained: random weights", where="stSidebar")
    _wait_idle(page)


def _sidebar_visible(page: Page) -> bool:
    box = page.locator("[data-testid='stSidebar']").bounding_box()
    return box is not None and box["width"] > 0 and box["x"] + box["width"] > 0


def _show_sidebar(page: Page, shown: bool) -> None:
    """Open or close the sidebar (narrow windows collapse it over the page), waiting until it
    has slid fully in or out."""
    if _sidebar_visible(page) != shown:
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


def _navigate(page: Page, title: str) -> None:
    """``_go_to`` in any window: the top navigation when it shows the page's link, else the
    navigation that narrow windows move into the sidebar."""
    top = page.locator("[data-testid='stTopNavLink']").filter(has_text=title)
    if top.count() and top.first.is_visible():
        _go_to(page, title)
        return
    _show_sidebar(page, True)
    page.locator("[data-testid='stSidebarNavLink']").filter(has_text=title).first.click()


def _overflow(page: Page) -> int:
    return page.evaluate(OVERFLOW)


# ---------------------------------------------------------------- 1 · channels shown


def test_layer_change_keeps_channels_shown(open_page):
    page = open_page()
    assert _channels_shown(page) == (64, 1280)
    steps = [("blocks.3", (64, 80)), ("bn2", (64, 1280)), ("conv_stem", (32, 32))]
    steps.append(("bn2", (64, 1280)))  # the wish is clamped on a small layer, not lost
    for layer, expected in steps:
        _choose(page, "Target layer", _label(layer))
        _wait_for_text(page, f"Feature maps of {layer}")
        # (a layer seen before is drawn before the server's run: wait for the run's address)
        _wait_for_query(page, f"layer={layer}")
        _wait_idle(page)
        assert _channels_shown(page) == expected, layer
        assert _slider_value(page, "Channels shown") == expected[0], layer
        assert "channels=1&" not in page.url + "&", page.url
        if layer == "blocks.3":
            _shot(page, "20-channels-kept-on-blocks3")


# ---------------------------------------------------------------- 2 · errors keep the view


def _set_display_options(page: Page) -> None:
    _press(page, "Heatmap opacity", "ArrowRight", times=4)
    _wait_for_query(page, "alpha=0.7")
    _wait_idle(page)
    _choose(page, "Heatmap colormap", "viridis")
    _wait_for_query(page, "cam_cmap=viridis")
    _wait_idle(page)
    _press(page, "Channels shown", "ArrowLeft", until=60)
    _wait_for_query(page, "channels=60")
    _wait_for_text(page, "60 of 1280 channels")
    _wait_idle(page)


def test_error_keeps_the_view(open_page):
    page = open_page()
    _set_display_options(page)
    _choose(page, "Network", _network("resnet18"))
    _wait_for_text(page, "Cannot load")
    _wait_idle(page)
    assert "resnet18" in _main_text(page)
    _wait_for_query(page, "model=resnet18")  # the address names the view that failed
    _shot(page, "21-error-cannot-load")
    _set_untrained(page)
    _wait_for_text(page, "Feature maps of layer4")
    _wait_idle(page)
    assert "Cannot load" not in _main_text(page)
    assert _slider_value(page, "Heatmap opacity") == pytest.approx(0.7)
    assert page.get_by_role("combobox", name="Heatmap colormap").input_value() == "viridis"
    assert _slider_value(page, "Channels shown") == 60
    assert _channels_shown(page) == (60, 512)
    _assert_images_loaded(page)
    _shot(page, "21-error-recovered")


# ---------------------------------------------------------------- 3 · no stale class label


def test_class_picker_follows_the_image_and_the_weights(open_page):
    page = open_page()
    _upload(page, "gradient.png", _encoded((400, 300), "PNG"), "image/png")
    _wait_for_text(page, "400×300 px")
    _wait_idle(page)
    box = page.get_by_role("combobox", name="Explain the class")
    top = _overlay_class(page)
    assert top != "military uniform"  # the sample's class: the upload changed the prediction
    assert box.input_value().startswith(f"Top-1: {top} ("), box.input_value()
    assert _bars(page)[0][1] == top

    _set_untrained(page)
    bars = _bars(page)
    assert [rank for rank, _, _ in bars] == [1, 2, 3, 4, 5]
    assert box.input_value().startswith(f"Top-1: {bars[0][1]} ("), box.input_value()
    options = _options(page, "Explain the class")
    second = [o for o in options if o.startswith("#2 ")]
    assert second == [second[0]] and second[0].startswith(f"#2 {bars[1][1]} ("), (second, bars)
    page.get_by_text("Top-5 predictions").first.scroll_into_view_if_needed()
    _shot(page, "22-class-picker-untrained")


def _top_five(page: Page):
    """The sidebar's top-5 radio group."""
    return page.locator("[data-testid='stSidebar'] [role='radiogroup']").filter(
        has=page.get_by_text("Top-1:")
    )


def test_the_top_five_radio_and_the_class_box_show_one_class(open_page, lite0):
    """One click on the top-5 radio explains that class; the class box follows it; a class
    picked in the box lights no radio button; Top-1 again brings both back (each a fragment
    run: a stale label in either would be defect 3 again)."""
    sample = hookviz.sample_image()
    third = hookviz.predict(lite0, sample)[2]
    page = open_page()
    box = page.get_by_role("combobox", name="Explain the class")
    radio = _top_five(page)
    assert radio.get_by_role("radio").count() == 5
    radio.get_by_text(f"#3 {third.name} (").click()
    _wait_for_text(page, f"Grad-CAM: “{third.name}”")
    _wait_idle(page)
    _wait_for_query(page, f"target={third.index}")
    page.wait_for_function(
        "(want) => document.querySelector('input[aria-label^=\"Explain the class\"]')"
        "  ?.value.startsWith(want)",
        arg=f"#3 {third.name} (",
        timeout=SLOW,
    )
    assert radio.get_by_role("radio", checked=True).count() == 1
    _shot(page, "22b-class-from-the-top-five")

    _pick(page, "Explain the class", "goldfish")
    _wait_for_text(page, "Grad-CAM: “goldfish”")
    _wait_idle(page)
    assert box.input_value() == "goldfish"
    assert radio.get_by_role("radio", checked=True).count() == 0  # no top-5 class is shown

    radio.get_by_text("Top-1: ").click()
    _wait_for_text(page, "Grad-CAM: “military uniform”")
    _wait_idle(page)
    page.wait_for_function("() => !location.search.includes('target=')", timeout=SLOW)
    assert box.input_value().startswith("Top-1: military uniform ("), box.input_value()
    _assert_images_loaded(page)


def test_a_class_click_on_another_page_reruns_that_page(open_page, lite0):
    """The class widgets are a sidebar fragment; off Explore (no class fragments there) a
    change must rerun the whole page, not only the widgets."""
    second = hookviz.predict(lite0, hookviz.sample_image())[1]
    page = open_page()
    _navigate(page, "Beyond one heatmap")
    _wait_for_text(page, "all from the same forward pass")
    page.get_by_text("Against / contrast", exact=True).click()
    _wait_for_text(page, "Evidence against “military uniform”")
    _wait_idle(page)
    _top_five(page).get_by_text(f"#2 {second.name} (").click()
    _wait_for_text(page, f"Evidence against “{second.name}”")
    _wait_idle(page)
    _pick(page, "Explain the class", "goldfish")
    _wait_for_text(page, "Evidence against “goldfish”")
    _wait_for_query(page, "target=1")


def test_a_class_change_carries_through_to_the_pictures_and_the_downloads(open_page, lite0):
    """A class picked in the sidebar reruns only Explore's results: the pictures fed by the
    display options afterwards, the downloads and the address must all be of the new class,
    not of the class the page was first drawn with."""
    sample = hookviz.sample_image()
    second = hookviz.predict(lite0, sample)[1]
    expected = hookviz.grad_cam(lite0, sample, "bn2", target=second.index).heatmap
    page = open_page()
    _pick(page, "Explain the class", "#2 ")
    _wait_for_text(page, f"Grad-CAM: “{second.name}”")
    _wait_idle(page)
    _wait_for_query(page, f"target={second.index}")
    assert _bars(page)[1][1:] == (second.name, second.index)  # the top-5 stays
    before = _image_sources(page)
    _press(page, "Heatmap opacity", "ArrowRight")  # a display change after the class change
    _wait_for_new_overlay(page, before[1])
    _wait_for_query(page, "alpha=0.55")  # the server has it (the browser drew it first)
    assert f"Grad-CAM for “{second.name}” at bn2 · class {second.index}" in _main_text(page)
    with page.expect_download(timeout=30_000) as heatmap_download:
        page.get_by_role("button", name="Download heatmap (.npy)").click()
    with page.expect_download(timeout=30_000) as overlay_download:
        page.get_by_role("button", name="Download overlay (PNG)").click()
    heatmap = np.load(heatmap_download.value.path())
    np.testing.assert_allclose(heatmap, expected, atol=1e-5)
    overlay = np.asarray(Image.open(overlay_download.value.path()), np.int16)
    drawn = np.asarray(hookviz.render.overlay(sample, expected, alpha=0.55), np.int16)
    assert np.abs(overlay - drawn).max() <= 1, "the overlay download is not of the new class"
    # the address names the new class: a reload shows it again
    page.reload()
    _wait_for_results(page)
    _wait_for_text(page, f"Grad-CAM: “{second.name}”")
    _shot(page, "22b-class-change-then-display-change")


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


# waits until the overlay's title (hvTitle) reads the given text
TITLE_IS = "(title) => document.querySelector('[data-testid=hvTitle]')?.textContent === title"


def _drawn(page: Page, index: int) -> np.ndarray:
    """The pixels of browser-drawn picture ``index`` (0 overlay, 1 its colour bar, 2 the
    feature-map grid, 3 the heatmap)."""
    url = page.evaluate(
        "(i) => document.querySelectorAll('[data-testid=hvPicture] canvas')[i].toDataURL()", index
    )
    png = base64.b64decode(url.split(",", 1)[1])
    return np.asarray(Image.open(io.BytesIO(png)).convert("RGB"))


def _wait_drawn(
    page: Page, alpha: str, cmap: str, grid: str = "viridis", channels: str = "64"
) -> None:
    page.wait_for_function(
        "([alpha, cmap, grid, channels]) => {"
        " const [o, g, h] = document.querySelectorAll('[data-testid=hvPicture]');"
        " return !!o && !!g && !!h && o.dataset.alpha === alpha && o.dataset.cmap === cmap"
        " && h.dataset.cmap === cmap && g.dataset.cmap === grid"
        " && g.dataset.channels === channels; }",
        arg=[alpha, cmap, grid, channels],
        timeout=SLOW,
    )


def _drawn_before_the_reply(page: Page) -> bool:
    """Whether a picture was drawn after the last input and before the server's first reply
    to it (``DRAW_SPY``)."""
    draws, replies, pressed = page.evaluate(
        "[window.__hvDraws, window.__hvReplies, window.__hvInput]"
    )
    first_reply = min((t for t in replies if t > pressed), default=float("inf"))
    return any(pressed < t < first_reply for t in draws)


def test_display_changes_are_drawn_in_the_browser_exactly_and_before_the_server_answers(
    browser, server, lite0
):
    """The opacity, the colormaps, the number of channels shown, the channel order and the
    grid's colour scale are drawn by the page itself: the new overlay, heatmap, colour bar and
    feature-map grid are on screen before the server has answered the change, and they are
    ``hookviz.render``'s
    pictures at display size, pixel for pixel (the grid on either colour scale). The server
    still records the change: the address names it, the download is of it, a reload draws it
    again."""
    sample = hookviz.sample_image()
    display = hookviz.render.fit_within(sample, 1024)
    cam = hookviz.grad_cam(lite0, sample, "bn2")
    heat = cam.heatmap_at((display.height, display.width))
    features = hookviz.feature_maps(lite0, sample, "bn2")
    _, rows, columns = features.activations.shape

    def expect(
        alpha: float,
        cmap: str,
        grid: str = "viridis",
        n: int = 64,
        scale: str = "channel",
        order: str = "mean",
    ):
        overlay = hookviz.render.overlay(display, heat, alpha=alpha, cmap=cmap)
        assert np.array_equal(_drawn(page, 0), np.asarray(overlay)), (alpha, cmap)
        assert np.array_equal(_drawn(page, 1), hookviz.render.colorbar(cmap, 256, 10)), cmap
        channels = features.channel_order(order, n)
        tiles = hookviz.render.laid_out_grid(features.activations, channels, cmap=grid, scale=scale)
        assert np.array_equal(_drawn(page, 2), tiles), (grid, n, scale, order)
        assert np.array_equal(_drawn(page, 3), hookviz.render.colorize(heat, cmap)), cmap
        caption = f"{n} of 1280 channels, {rows}×{columns} cells each"
        grid_picture = page.locator("[data-testid=hvPicture]").nth(1)
        assert caption in grid_picture.locator("[data-testid=hvCaption]").inner_text()

    page, requests = _new_page(browser, server, width=1366, height=900, init_script=DRAW_SPY)
    _wait_for_results(page)
    _wait_drawn(page, "0.5", "inferno")
    expect(0.5, "inferno")

    _press(page, "Heatmap opacity", "ArrowRight")
    _wait_drawn(page, "0.55", "inferno")
    assert _drawn_before_the_reply(page), "the overlay waited for the server"
    expect(0.55, "inferno")

    _choose(page, "Heatmap colormap", "magma")
    _wait_drawn(page, "0.55", "magma")
    expect(0.55, "magma")
    _choose(page, "Feature-map colormap", "cividis")
    _wait_drawn(page, "0.55", "magma", "cividis")
    expect(0.55, "magma", "cividis")
    _wait_idle(page)
    _press(page, "Channels shown", "ArrowRight")  # 65: a second row of 16 tiles
    _wait_drawn(page, "0.55", "magma", "cividis", "65")
    assert _drawn_before_the_reply(page), "the grid waited for the server"
    expect(0.55, "magma", "cividis", 65)
    _wait_idle(page)
    _wait_for_query(page, "channels=65")
    # one colour scale over the maps shown: the browser scales the values for each count
    page.locator("[data-testid=stSidebar]").get_by_text("shared", exact=True).click()
    page.wait_for_function(
        "() => document.querySelectorAll('[data-testid=hvPicture]')[1].dataset.scale === 'shared'"
    )
    assert _drawn_before_the_reply(page), "the colour scale waited for the server"
    expect(0.55, "magma", "cividis", 65, "shared")
    _wait_for_query(page, "scale=shared")
    _wait_idle(page)
    for key, n in (("ArrowLeft", 64), ("Home", 1), ("End", 256)):
        _press(page, "Channels shown", key)
        _wait_drawn(page, "0.55", "magma", "cividis", str(n))
        expect(0.55, "magma", "cividis", n, "shared")
        _wait_idle(page)
    _press(page, "Channels shown", "ArrowLeft")
    _wait_drawn(page, "0.55", "magma", "cividis", "255")
    _wait_idle(page)
    _wait_for_query(page, "channels=255")
    # the channel order: by max activation, then by channel number, drawn by the browser
    for label, order in (("max activation", "max"), ("index", "index")):
        page.locator("[data-testid=stSidebar]").get_by_text(label, exact=True).click()
        page.wait_for_function(
            "(order) => document.querySelectorAll('[data-testid=hvPicture]')[1].dataset.order"
            " === order",
            arg=order,
        )
        assert _drawn_before_the_reply(page), f"the order {order} waited for the server"
        expect(0.55, "magma", "cividis", 255, "shared", order)
        _wait_for_query(page, f"order={order}")
        _wait_idle(page)
    assert "alpha=0.55" in page.url and "cam_cmap=magma" in page.url
    assert "grid_cmap=cividis" in page.url
    with page.expect_download(timeout=30_000) as overlay_download:
        page.get_by_role("button", name="Download overlay (PNG)").click()
    downloaded = np.asarray(Image.open(overlay_download.value.path()), np.int16)
    full = np.asarray(hookviz.render.overlay(sample, cam.heatmap, alpha=0.55, cmap="magma"))
    assert np.abs(downloaded - full.astype(np.int16)).max() <= 1

    page.reload()
    _wait_for_results(page)
    _wait_drawn(page, "0.55", "magma", "cividis", "255")
    expect(0.55, "magma", "cividis", 255, "shared", "index")
    _shot(page, "22c-display-drawn-in-the-browser")
    _assert_only_local(requests)
    page.context.close()


# ---------------------------------------------------------------- 4 · top-5 order


def test_top5_order_follows_a_new_image(open_page, lite0):
    sample = hookviz.sample_image()
    crop = sample.crop((100, 100, 412, 500))
    before = [(p.name, p.index) for p in hookviz.predict(lite0, sample)]
    after = [(p.name, p.index) for p in hookviz.predict(lite0, crop)]
    shared = set(before) & set(after)
    # precondition: the two share classes, at different ranks
    assert shared and any(before.index(c) != after.index(c) for c in shared), (before, after)

    page = open_page()
    assert [(name, index) for _, name, index in _bars(page)] == before
    _upload(page, "crop.png", _png(crop), "image/png")
    _wait_for_text(page, "312×400 px")
    _wait_idle(page)
    bars = _bars(page)
    assert [rank for rank, _, _ in bars] == [1, 2, 3, 4, 5]
    assert [(name, index) for _, name, index in bars] == after
    page.get_by_text("Top-5 predictions").first.scroll_into_view_if_needed()
    _shot(page, "23-top5-after-crop")


# ---------------------------------------------------------------- 5 · big photo


def test_big_photo_is_drawn_at_display_size_and_downloaded_whole(open_page, big_jpeg):
    data, (width, height) = big_jpeg
    page = open_page()
    _upload(page, "camera.jpg", data, "image/jpeg")
    _wait_for_text(page, f"{width}×{height} px")
    _wait_idle(page)
    _assert_images_loaded(page)
    sizes = page.evaluate(f"() => {{ {page_pictures.helpers()} return pictures().map(size); }}")
    assert all(0 < w <= 1024 and 0 < h <= 1024 for w, h in sizes), sizes
    _shot(page, "24-big-photo")

    with page.expect_download(timeout=SLOW) as overlay_download:
        page.get_by_role("button", name="Download overlay (PNG)").click()
    overlay = Image.open(overlay_download.value.path())
    assert overlay.format == "PNG" and overlay.size == (width, height)
    with page.expect_download(timeout=SLOW) as heatmap_download:
        page.get_by_role("button", name="Download heatmap (.npy)").click()
    assert np.load(heatmap_download.value.path(), mmap_mode="r").shape == (height, width)

    before = _image_sources(page)
    _press(page, "Heatmap opacity", "ArrowRight")
    _wait_for_new_overlay(page, before[1])
    after = _image_sources(page)
    assert after[1] != before[1] and after[0] == before[0]  # the overlay changed, not the photo
    _wait_for_query(page, "alpha=0.55")  # drawn in the browser first, then recorded


def test_downloads_follow_a_display_change(open_page):
    """A display change reruns only some fragments: the downloads must still work after one,
    with the options chosen (the overlay at the new opacity)."""
    page = open_page()
    before = _image_sources(page)
    _press(page, "Heatmap opacity", "ArrowRight")
    _wait_for_new_overlay(page, before[1])
    # the browser draws the overlay before the server has the change: wait for its record
    _wait_for_query(page, "alpha=0.55")
    # a 512x600 PNG comes at once when the download works: 30 s is a generous bound
    with page.expect_download(timeout=30_000) as overlay_download:
        page.get_by_role("button", name="Download overlay (PNG)").click()
    with page.expect_download(timeout=30_000) as heatmap_download:
        page.get_by_role("button", name="Download heatmap (.npy)").click()
    overlay = Image.open(overlay_download.value.path())
    heatmap = np.load(heatmap_download.value.path())
    assert overlay.format == "PNG" and overlay.size == (512, 600)
    expected = hookviz.render.overlay(hookviz.sample_image(), heatmap, alpha=0.55)
    difference = np.abs(np.asarray(overlay, np.int16) - np.asarray(expected, np.int16))
    assert difference.max() <= 1, "the overlay download is not at the opacity shown"
    _shot(page, "24-downloads-after-display-change")


# ---------------------------------------------------------------- 6 · something shows it works


def test_cold_start_shows_that_it_is_working(browser):
    with running_app(free_port(), timeout=120) as url:
        page, requests = _new_page(browser, url, width=1366, height=900, init_script=COLD_START_SPY)
        _wait_for_results(page)
        seen = page.evaluate("window.__hookviz")
        _shot(page, "25-cold-start-done")
        _assert_only_local(requests)
        page.context.close()
    assert seen["samples"] > 0, "the page was never sampled"
    assert seen["working"] is not None, f"no working indicator before the results: {seen}"
    assert seen["working"]["results"] is False, seen
    assert seen["results"] is not None and seen["working"]["sample"] < seen["results"], seen


def test_big_network_shows_a_spinner_while_it_computes(open_page):
    page = open_page()
    _set_untrained(page)
    page.evaluate(SPINNER_SPY)
    _choose(page, "Network", _network("vgg16", untrained=True))
    _wait_for_text(page, "Feature maps of features")
    _wait_idle(page)
    loading = page.evaluate("[...window.__spinners]")
    _pick(page, "Target layer", "features.28 · ")
    _wait_for_text(page, "Feature maps of features.28")
    _wait_idle(page)
    seen = page.evaluate("[...window.__spinners]")
    assert any("vgg16" in text for text in loading), seen
    assert all(text.strip() for text in seen), seen
    _assert_images_loaded(page)
    _shot(page, "25-vgg16-features28")


def test_slow_upload_never_shows_a_new_photo_beside_an_old_heatmap(open_page, big_jpeg):
    data, (width, height) = big_jpeg
    page = open_page()
    _upload(page, "gradient.png", _encoded((400, 300), "PNG"), "image/png")
    _wait_for_text(page, "400×300 px")
    _wait_idle(page)
    page.evaluate(CAPTION_SAMPLER)
    _upload(page, "camera.jpg", data, "image/jpeg")
    _wait_for_text(page, f"{width}×{height} px")
    _wait_idle(page)
    page.wait_for_function(  # the sampler has seen the final state
        "() => { const s = window.__captions.at(-1); return s && !s.overlayStale"
        " && !s.originalStale && s.original && s.original.includes('camera.jpg'); }",
        timeout=30_000,
    )
    samples = page.evaluate("[...window.__captions]")
    final = samples[-1]["overlay"]
    first = samples[0]["overlay"]
    assert first and final and first != final, "precondition: the two images' CAMs differ"
    new_size = f"{width}×{height} px"
    # Streamlit puts an element's new version in place at once, but hands a component its new
    # data a moment later (an effect after the paint, then the component's module imported
    # again, ~30 ms): the overlay, drawn by the page with its caption, may trail the photo by
    # that much. What this guards against is the old overlay standing as current beside the
    # new photo for longer (the seconds a large upload takes): 150 ms at most.
    ends = [later["at"] for later in samples[1:]] + [float("inf")]
    mixed = [
        {**s, "lasted_ms": end - s["at"]}
        for s, end in zip(samples, ends, strict=True)
        if s["original"]
        and new_size in s["original"]
        and s["overlay"]
        and not s["overlayStale"]
        and s["overlay"] != final
        and end - s["at"] > 150
    ]
    assert mixed == [], json.dumps(mixed[:3], ensure_ascii=False)
    _shot(page, "25-slow-upload-done")


# ---------------------------------------------------------------- 7 · shared links


def test_shared_link_restores_the_page_and_its_panel(open_page):
    page = open_page("/beyond?layer=blocks.4&beyond_panel=trust&trust=1", wait=False)
    _wait_for_text(page, "Beyond one heatmap")
    _wait_for_text(page, "Deletion area")
    _wait_idle(page)
    assert page.evaluate("location.pathname") == "/beyond", page.url
    _shot(page, "26-shared-link-trust")
    _go_to(page, "Diagnose the network")
    _wait_for_text(page, "Histogram of blocks.4")
    _wait_idle(page)
    assert "layer=blocks.4" in page.url and "/diagnose" in page.url, page.url
    _go_to(page, "Explore")
    _wait_for_text(page, "Feature maps of blocks.4")
    _wait_idle(page)

    _upload(page, "mine.png", _encoded((320, 240), "PNG"), "image/png")
    _wait_for_text(page, "mine.png · 320×240 px")
    _wait_idle(page)
    _go_to(page, "Beyond one heatmap")
    _wait_for_text(page, "Deletion area")
    _wait_idle(page)
    _go_to(page, "Explore")
    _wait_for_text(page, "Feature maps of blocks.4")
    _wait_idle(page)
    assert "mine.png · 320×240 px" in _main_text(page)
    _assert_images_loaded(page)
    _shot(page, "26-upload-kept-across-pages")


# ---------------------------------------------------------------- 8 · too-large upload


def _too_large_file(tmp_path: Path) -> Path:
    """A 55 MB "PNG": a valid signature, then random bytes (Playwright takes files over 50 MB
    only from a path)."""
    path = tmp_path / "huge.png"
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + np.random.default_rng(0).bytes(55 * 1024 * 1024))
    return path


def _upload_path(page: Page, path: Path) -> None:
    page.locator("[data-testid='stFileUploaderDropzoneInput']").set_input_files(str(path))


def test_too_large_upload_is_reported_in_the_main_area(open_page, tmp_path):
    page = open_page()
    _upload_path(page, _too_large_file(tmp_path))
    _wait_for_text(page, "the limit is 50 MB")
    _wait_idle(page)
    text = _main_text(page)
    assert "huge.png" in text and "Feature maps of bn2" in text
    _assert_images_loaded(page)  # the results stay on screen
    _shot(page, "27-too-large-upload")
    _upload(page, "fine.png", _encoded((280, 200), "PNG"), "image/png")
    _wait_for_text(page, "fine.png · 280×200 px")
    _wait_idle(page)
    assert "the limit is" not in _main_text(page)
    _assert_images_loaded(page)


def test_too_large_upload_keeps_the_previous_upload(open_page, tmp_path):
    page = open_page()
    _upload(page, "mine.png", _encoded((320, 240), "PNG"), "image/png")
    _wait_for_text(page, "mine.png · 320×240 px")
    _wait_idle(page)
    _upload_path(page, _too_large_file(tmp_path))
    _wait_for_text(page, "the limit is 50 MB")
    _wait_idle(page)
    _shot(page, "27-too-large-after-an-upload")
    text = _main_text(page)
    assert "Still showing mine.png" in text and "mine.png · 320×240 px" in text, text[:600]
    _assert_images_loaded(page)


def test_replacing_an_upload_never_shows_the_sample_in_between(open_page, big_jpeg):
    data, (width, height) = big_jpeg
    page = open_page()
    _upload(page, "mine.png", _encoded((320, 240), "PNG"), "image/png")
    _wait_for_text(page, "mine.png · 320×240 px")
    _wait_idle(page)
    page.evaluate(CAPTION_SAMPLER)
    _upload(page, "camera.jpg", data, "image/jpeg")
    _wait_for_text(page, f"{width}×{height} px")
    _wait_idle(page)
    samples = page.evaluate("[...window.__captions]")
    flashed = [
        s
        for s in samples
        if s["original"] and s["original"].startswith("sample:") and not s["originalStale"]
    ]
    assert flashed == [], json.dumps(flashed[:2], ensure_ascii=False)


# ---------------------------------------------------------------- 9 · extreme aspect ratios


def _striped(width: int, height: int) -> bytes:
    """A gradient along the long side with four coloured blocks on it."""
    tall = height >= width
    long, short = (height, width) if tall else (width, height)
    pixels = np.zeros((long, short, 3), np.uint8)
    pixels[..., 2] = np.linspace(0, 255, long, dtype=np.uint8)[:, None]
    colours = [(230, 30, 30), (30, 200, 60), (240, 220, 20), (20, 220, 230)]
    for i, colour in enumerate(colours):
        start = long * (2 * i + 1) // 9
        pixels[start : start + long // 12, short // 6 : 5 * short // 6] = colour
    if not tall:
        pixels = pixels.transpose(1, 0, 2).copy()
    return _png(Image.fromarray(pixels))


def test_extreme_aspect_ratios(open_page):
    page = open_page()
    for name, (width, height), fed in [
        ("tall", (600, 4000), "224×1493"),
        ("panorama", (4000, 600), "1493×224"),
    ]:
        _upload(page, f"{name}.png", _striped(width, height), "image/png")
        _wait_for_text(page, f"{width}×{height} px")
        _wait_idle(page)
        text = _main_text(page)
        assert f"at {fed} px" in text and "6.7×" in text, text[:800]
        for problem in ("Could not use", "Something went wrong", "failed"):
            assert problem not in text
        _assert_images_loaded(page)
        _shot(page, f"28-aspect-{name}")


# ---------------------------------------------------------------- 10 · narrow window


def test_a_slider_step_just_after_a_new_layer_leaves_one_slider_of_that_layer(open_page, lite0):
    """A "Channels shown" step 50-150 ms after picking a layer not seen yet (its forward pass
    runs meanwhile): the step may come too late for the old slider, but the page must end
    consistent, with one slider of the new layer's range and the grid's caption agreeing with
    it. (When a layer change was a fragment run, the interrupted run left the last layer's
    slider beside the new pictures, or both sliders, in 7 of 10 such tries.)"""
    shapes = hookviz.core.layers.layer_shapes(lite0, 262, 224)
    table = hookviz.layer_table(lite0)
    fresh = [layer.name for layer in table.distinct if 64 < shapes[layer.name][0] < 256][:4]
    page = open_page()
    for index, layer in enumerate(fresh):
        channels = shapes[layer][0]
        _choose(page, "Target layer", _label(layer))
        page.wait_for_timeout(50 if index % 2 == 0 else 150)
        page.get_by_role("slider", name="Channels shown").first.focus()
        page.keyboard.press("Home")
        _wait_for_text(page, f"Feature maps of {layer}")
        _wait_idle(page)
        page.wait_for_timeout(500)
        _wait_idle(page)
        sliders = page.get_by_role("slider", name="Channels shown")
        assert sliders.count() == 1, f"{sliders.count()} sliders after {layer}"
        assert sliders.get_attribute("max") == str(channels), layer
        shown, of = _channels_shown(page)
        assert of == channels and str(shown) == sliders.input_value(), (layer, shown, of)
        page.get_by_role("slider", name="Channels shown").focus()  # back to 64 for the next
        _press(page, "Channels shown", "ArrowRight", until=64)
        _wait_idle(page)


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


def _draw_counts(page: Page) -> list[str]:
    return page.evaluate(
        "() => [...document.querySelectorAll('[data-testid=hvPicture] canvas.hv-main')]"
        ".map((c) => c.dataset.drawn)"
    )


def _picture_texts(page: Page) -> list[str]:
    return page.evaluate(
        "() => [...document.querySelectorAll('[data-testid=hvPicture]')].map((p) => p.innerText)"
    )


def test_a_layer_seen_before_is_drawn_in_the_browser_at_once_with_its_texts(browser, server, lite0):
    """Back at a layer seen before, the overlay, the grid and the raw heatmap show it before the
    server has answered: ``hookviz.render``'s pictures of that layer, pixel for pixel, each with
    the texts that name its layer already in place when it is drawn (the grid's title, the
    captions), never the last layer's. The server's run that follows draws none of them again.
    With a panel open that names the layer ("What am I looking at?"), or at a layer not seen
    yet, the pictures wait for the server."""
    sample = hookviz.sample_image()
    display = hookviz.render.fit_within(sample, 1024)
    shapes = hookviz.core.layers.layer_shapes(lite0, 262, 224)
    page, requests = _new_page(browser, server, width=1366, height=900, init_script=TEXT_SPY)
    _wait_for_results(page)
    default = _label("bn2")

    # the three pictures show the layer of this box label
    says = (
        "(layer) => { const all = [...document.querySelectorAll('[data-testid=hvPicture]')];"
        " return all.length === 3 && all.every((p) => p.dataset.layer === layer); }"
    )

    def wait_until_pictures_say(label: str) -> None:
        page.wait_for_function(says, arg=" ".join(label.split()), timeout=SLOW)

    def expect(layer: str, target: int | None = None) -> None:
        cam = hookviz.grad_cam(lite0, sample, layer, target)
        heat = cam.heatmap_at((display.height, display.width))
        features = hookviz.feature_maps(lite0, sample, layer)
        overlay = hookviz.render.overlay(display, heat, alpha=0.5, cmap="inferno")
        assert np.array_equal(_drawn(page, 0), np.asarray(overlay)), layer
        shown = min(64, features.num_channels)  # the wish, as far as the layer has channels
        tiles = hookviz.render.laid_out_grid(
            features.activations, features.channel_order("mean", shown), cmap="viridis"
        )
        assert np.array_equal(_drawn(page, 2), tiles), layer
        assert np.array_equal(_drawn(page, 3), hookviz.render.colorize(heat, "inferno")), layer

    assert page.evaluate(says, " ".join(default.split()))
    _choose(page, "Target layer", _label("blocks.4"))  # not seen yet: from the server
    _wait_for_text(page, "Feature maps of blocks.4")
    _wait_idle(page)
    assert not _drawn_before_the_reply(page), "a layer never seen was drawn without the server"
    expect("blocks.4")
    _choose(page, "Target layer", _label("conv_stem"))  # 32 channels: the slider shows 32
    _wait_for_text(page, "Feature maps of conv_stem")
    _wait_for_query(page, "layer=conv_stem")
    _wait_idle(page)

    # back to each: the grid of bn2 shows the 64 channels wished again, not the 32 of the
    # slider before it
    for layer in ("bn2", "blocks.4", "conv_stem", "bn2"):
        page.evaluate("window.__hvSaid = []")
        _choose(page, "Target layer", _label(layer))
        wait_until_pictures_say(_label(layer))
        assert _drawn_before_the_reply(page), f"{layer}: the pictures waited for the server"
        swapped = _draw_counts(page)
        said = page.evaluate("window.__hvSaid")
        _wait_for_text(page, f"Grad-CAM for “military uniform” at {layer} ·")
        _wait_idle(page)
        _wait_for_query(page, f"layer={layer}")
        assert _draw_counts(page) == swapped, f"{layer}: the server's run drew them again"
        final = _picture_texts(page)
        assert f"Feature maps of {layer}\n" in final[1]
        # each picture, the moment it was drawn, said what it says now; the caption under the
        # layer box was already this layer's, or faded until the server's run redraws it
        note = page.locator(".st-key-layer_note")
        final_note = note.inner_text()
        assert note.get_attribute("data-hv-stale") is None, "still faded after the run"
        assert "×".join(map(str, shapes[layer])) in final_note
        assert {index for _, index, _, _, _ in said} == {0, 1, 2}
        for _, index, shown, text, (note_text, faded) in said:
            assert shown == " ".join(_label(layer).split()), (layer, index, shown)
            assert text == final[index], (layer, index, text)
            assert faded or note_text == final_note, (layer, index, note_text)
        expect(layer)
        assert page.get_by_role("combobox", name="Target layer").input_value().startswith(layer)

    # another class (the top-5's #2): a layer seen only under the top-1 waits for the server
    # (its overlay is of that class); then, back at a layer seen under #2, the pictures show
    # at once, the overlay and heatmap of #2 (the grid is the same for every class)
    second = hookviz.ForwardPass(lite0, sample, "bn2").analysis().predictions[1]
    _top_five(page).get_by_text("#2").first.click()
    _wait_for_text(page, f"Grad-CAM for “{second.name}” at bn2")
    _wait_idle(page)
    _choose(page, "Target layer", _label("blocks.4"))
    _wait_for_text(page, f"Grad-CAM for “{second.name}” at blocks.4")
    _wait_for_query(page, "layer=blocks.4")
    _wait_idle(page)
    assert not _drawn_before_the_reply(page), "a picture of another class stood in"
    expect("blocks.4", second.index)
    _choose(page, "Target layer", default)
    wait_until_pictures_say(default)
    assert _drawn_before_the_reply(page), "bn2 under #2: the pictures waited for the server"
    _wait_for_query(page, "layer=bn2")
    _wait_idle(page)
    expect("bn2", second.index)

    # a panel open that names the layer: the pictures wait for the server's run
    page.locator("[data-testid='stMain'] summary").filter(has_text="What am I looking at?").nth(
        1
    ).click()
    _wait_for_text(page, "registered a forward hook on")
    _choose(page, "Target layer", _label("blocks.4"))
    _wait_for_text(page, "Feature maps of blocks.4")
    _wait_idle(page)
    assert not _drawn_before_the_reply(page), "swapped beside an open panel of the last layer"
    assert "hook on blocks.4" in _main_text(page)
    expect("blocks.4", second.index)
    _shot(page, "29c-layer-seen-before-drawn-in-the-browser")
    _assert_only_local(requests)
    page.context.close()


def _faded_at_draw_spy(record: str, selector: str) -> str:
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
CLASS_SPY = _faded_at_draw_spy("__hvBoxAtDraw", '[class*="st-key-target-"]')


def test_a_top_five_class_is_drawn_in_the_browser_at_once_with_its_texts(browser, server, lite0):
    """The top-5 classes' pictures come ahead with the page: a click on the top-5 shows that
    class's overlay and raw heatmap before the server has answered, ``hookviz.render``'s
    pictures of that class pixel for pixel, with the texts that name the class in place when
    drawn (never the last class's); the class box is faded until the server's run shows the
    class, and that run draws neither picture again. The grid (the same for every class) is
    not drawn. With the grid ordered by the class's channel weights, or a panel open beside
    the pictures, a click waits for the server."""
    sample = hookviz.sample_image()
    display = hookviz.render.fit_within(sample, 1024)
    kept = hookviz.ForwardPass(lite0, sample, "bn2")
    top = kept.predictions
    page, requests = _new_page(browser, server, width=1366, height=900, init_script=CLASS_SPY)
    _wait_for_results(page)
    box = page.get_by_role("combobox", name="Explain the class")

    def expect(target: int) -> None:
        heat = kept.analysis(target).cam.heatmap_at((display.height, display.width))
        overlay = hookviz.render.overlay(display, heat, alpha=0.5, cmap="inferno")
        assert np.array_equal(_drawn(page, 0), np.asarray(overlay)), target
        assert np.array_equal(_drawn(page, 3), hookviz.render.colorize(heat, "inferno")), target

    def click(rank: int) -> None:
        label = "Top-1: " if rank == 1 else f"#{rank} {top[rank - 1].name} ("
        _top_five(page).get_by_text(label).first.click()

    for rank in (2, 4, 1, 3, 2):
        chosen = top[rank - 1]
        page.evaluate("window.__hvSaid = []; window.__hvBoxAtDraw = []")
        before = _draw_counts(page)
        click(rank)
        page.wait_for_function(TITLE_IS, arg=f"Grad-CAM: “{chosen.name}”", timeout=SLOW)
        assert _drawn_before_the_reply(page), f"#{rank}: the pictures waited for the server"
        drawn = _draw_counts(page)
        assert drawn[1] == before[1], "the grid was drawn again for a class"
        said = page.evaluate("window.__hvSaid")
        assert {index for _, index, _, _, _ in said} == {0, 2}, said
        for _, index, _, text, _ in said:
            if index == 0:  # the overlay's texts, the moment it was drawn
                assert f"Grad-CAM: “{chosen.name}”" in text
                assert f"Grad-CAM for “{chosen.name}” at bn2 · class {chosen.index}" in text
        at_draw = page.evaluate("window.__hvBoxAtDraw")
        assert all(at_draw), "the class box still named the last class"
        # the server's run: the box names the class, no longer faded; nothing drawn again
        _wait_idle(page)
        if rank == 1:
            page.wait_for_function("() => !location.search.includes('target=')", timeout=SLOW)
        else:
            _wait_for_query(page, f"target={chosen.index}")
        page.wait_for_function(
            "(want) => document.querySelector('input[aria-label^=\"Explain the class\"]')"
            "  ?.value.startsWith(want)",
            arg="Top-1: " if rank == 1 else f"#{rank} {chosen.name} (",
            timeout=SLOW,
        )
        page.wait_for_function(
            "() => document.querySelector('[class*=\"st-key-target-\"]')"
            "?.dataset.hvStale === undefined",
            timeout=SLOW,
        )
        assert _draw_counts(page) == drawn, f"#{rank}: the server's run drew the pictures again"
        expect(chosen.index)
        assert f"Grad-CAM for “{chosen.name}” at bn2" in _main_text(page)
    assert box.input_value().startswith(f"#2 {top[1].name} (")
    # from the keyboard: the arrow keys move the radio's choice, and the pictures follow
    _top_five(page).get_by_role("radio", checked=True).focus()
    page.keyboard.press("ArrowDown")
    page.wait_for_function(TITLE_IS, arg=f"Grad-CAM: “{top[2].name}”", timeout=SLOW)
    assert _drawn_before_the_reply(page), "a choice from the keyboard waited for the server"
    _wait_for_query(page, f"target={top[2].index}")
    _wait_idle(page)
    expect(top[2].index)
    page.keyboard.press("ArrowUp")  # back to #2
    page.wait_for_function(TITLE_IS, arg=f"Grad-CAM: “{top[1].name}”", timeout=SLOW)
    _wait_for_query(page, f"target={top[1].index}")
    _wait_idle(page)

    # the grid ordered by the class's channel weights: it changes with the class, so the
    # pictures wait for the server's run, which draws all three
    page.locator("[data-testid=stSidebar]").get_by_text("CAM weight α", exact=True).click()
    _wait_for_query(page, "order=weight")
    _wait_idle(page)
    click(3)
    page.wait_for_function(TITLE_IS, arg=f"Grad-CAM: “{top[2].name}”", timeout=SLOW)
    assert not _drawn_before_the_reply(page), "drawn beside a grid of the last class's weights"
    _wait_idle(page)
    expect(top[2].index)
    page.locator("[data-testid=stSidebar]").get_by_text("mean activation", exact=True).click()
    _wait_for_query(page, f"target={top[2].index}")
    page.wait_for_function("() => !location.search.includes('order=')", timeout=SLOW)
    _wait_idle(page)

    # a panel open beside the pictures (the snippet names the class): the server's run first
    page.locator("[data-testid='stMain'] summary").filter(has_text="Reproduce in Python").click()
    _wait_for_text(page, f"target={top[2].index}")
    _wait_idle(page)
    click(2)
    page.wait_for_function(TITLE_IS, arg=f"Grad-CAM: “{top[1].name}”", timeout=SLOW)
    assert not _drawn_before_the_reply(page), "drawn beside an open panel of the last class"
    _wait_for_text(page, f"target={top[1].index}")
    _wait_idle(page)
    expect(top[1].index)
    _shot(page, "22d-top-five-class-drawn-in-the-browser")
    _assert_only_local(requests)
    page.context.close()


def test_a_class_picked_in_the_class_box_redraws_only_what_the_class_changes(
    browser, server, lite0
):
    """A class searched and picked in the class box is the server's to draw (nothing is sent
    ahead for it): its run redraws the overlay and the raw heatmap, ``hookviz.render``'s
    pictures of that class pixel for pixel, and not the grid (the same for every class); the
    address names the class and the top-5 radio lights no button. A top-5 class picked just
    before is not shown in its place while the radio still names it; the top-5 is followed at
    once again after."""
    sample = hookviz.sample_image()
    display = hookviz.render.fit_within(sample, 1024)
    kept = hookviz.ForwardPass(lite0, sample, "bn2")
    top = kept.predictions
    page, requests = _new_page(browser, server, width=1366, height=900, init_script=TEXT_SPY)
    _wait_for_results(page)
    box = page.get_by_role("combobox", name="Explain the class")

    def expect(target: int) -> None:
        heat = kept.analysis(target).cam.heatmap_at((display.height, display.width))
        overlay = hookviz.render.overlay(display, heat, alpha=0.5, cmap="inferno")
        assert np.array_equal(_drawn(page, 0), np.asarray(overlay)), target
        assert np.array_equal(_drawn(page, 3), hookviz.render.colorize(heat, "inferno")), target

    # a top-5 class first: the radio names it when the box is used next
    _top_five(page).get_by_text(f"#2 {top[1].name} (").first.click()
    page.wait_for_function(TITLE_IS, arg=f"Grad-CAM: “{top[1].name}”", timeout=SLOW)
    _wait_for_query(page, f"target={top[1].index}")
    _wait_idle(page)
    for typed, name, index in (("goldfi", "goldfish", 1), ("jay", "jay", 17)):
        before = _draw_counts(page)
        _open_box(page, "Explain the class")
        page.keyboard.type(typed)
        page.evaluate("window.__hvSaid = []")
        page.get_by_role("option", name=name, exact=True).first.click()
        page.wait_for_function(TITLE_IS, arg=f"Grad-CAM: “{name}”", timeout=SLOW)
        _wait_for_query(page, f"target={index}")
        _wait_idle(page)
        drawn = _draw_counts(page)
        assert drawn[1] == before[1], "the grid was drawn again for a class"
        assert drawn[0] > before[0] and drawn[2] > before[2], "a picture was not redrawn"
        said = page.evaluate("window.__hvSaid")
        # every draw after the pick was of the class picked (never the radio's last class)
        overlays = [text for _, i, _, text, _ in said if i == 0]
        assert overlays and all(f"Grad-CAM: “{name}”" in text for text in overlays), overlays
        assert box.input_value() == name
        assert _top_five(page).get_by_role("radio", checked=True).count() == 0
        expect(index)
    # back to a top-5 class from the radio: drawn at once again
    _top_five(page).get_by_text("Top-1: ").first.click()
    page.wait_for_function(TITLE_IS, arg=f"Grad-CAM: “{top[0].name}”", timeout=SLOW)
    assert _drawn_before_the_reply(page), "the top-5 waited for the server after the box"
    _wait_idle(page)
    page.wait_for_function("() => !location.search.includes('target=')", timeout=SLOW)
    expect(top[0].index)
    _shot(page, "22e-class-picked-in-the-box")
    _assert_only_local(requests)
    page.context.close()


def test_a_layer_change_redraws_the_results_and_every_module_lists_them_all(open_page, lite0):
    """A layer pick redraws the pictures, the headings, the caption and the channel slider's
    range; the "Show every module" switch lists the aliases, and switched off on an alias the
    page moves to the listed name; the address keeps both."""
    table = hookviz.layer_table(lite0)
    page = open_page()
    sidebar = page.locator("[data-testid='stSidebar']")
    before = _image_sources(page)
    _choose(page, "Target layer", _label("blocks.3"))
    _wait_for_text(page, "Feature maps of blocks.3")
    _wait_idle(page)
    _wait_for_query(page, "layer=blocks.3")
    after = _image_sources(page)
    assert after[1] != before[1] and after[3] != before[3], "the overlay or the grid stayed"
    assert "Grad-CAM for “military uniform” at blocks.3" in _main_text(page)
    assert "64 of 80 channels" in _main_text(page)
    assert sidebar.get_by_text("output 80×", exact=False).count() == 1  # the layer's caption
    slider = page.get_by_role("slider", name="Channels shown")
    assert (slider.get_attribute("aria-valuemax") or slider.get_attribute("max")) == "80"
    distinct = {layer.name for layer in table.distinct}
    # a module left out of the short list because a listed layer gives the same tensor
    alias = next(
        layer.name
        for layer in table.hookable
        if layer.name not in distinct and table.canonical(layer.name) in distinct
    )

    def offered(name: str) -> bool:  # (the list is virtual: ask it by typing the name)
        _open_box(page, "Target layer")
        page.keyboard.type(name)
        found = (
            page.get_by_role("option")
            .filter(has_text=re.compile("^" + re.escape(name) + " ·"))
            .count()
        )
        page.keyboard.press("Escape")
        return found > 0

    assert not offered(alias)
    sidebar.get_by_text(f"Show every module ({len(table.hookable)} instead of").click()
    _wait_for_query(page, "all_modules=1")
    _wait_idle(page)
    assert offered(alias)
    assert "Feature maps of blocks.3" in _main_text(page)  # the layer stays
    # an alias (the same tensor as a listed layer), then the short list again: the page shows
    # the listed name, results and all
    canonical = table.canonical(alias)
    _pick(page, "Target layer", alias + " ·")
    _wait_for_text(page, f"Feature maps of {alias}")
    _wait_idle(page)
    sidebar.get_by_text(f"Show every module ({len(table.hookable)} instead of").click()
    page.wait_for_function(
        "(layer) => new URLSearchParams(location.search).get('layer') === layer",
        arg=canonical,
        timeout=SLOW,
    )
    _wait_for_text(page, f"Feature maps of {canonical}")
    _wait_idle(page)
    assert page.get_by_role("combobox", name="Target layer").input_value().startswith(canonical)
    _assert_images_loaded(page)
    _shot(page, "29b-layer-and-every-module")


def test_narrow_window_never_scrolls_sideways(open_page):
    page = open_page(width=420, height=900)
    overflow = {"opened": _overflow(page)}
    _show_sidebar(page, True)
    _choose(page, "Target layer", _label("blocks.4"))
    _wait_for_text(page, "Feature maps of blocks.4")
    _wait_idle(page)
    _show_sidebar(page, False)
    overflow["layer changed"] = _overflow(page)
    _shot(page, "29-narrow-layer")
    _navigate(page, "Beyond one heatmap")
    _wait_for_text(page, "all from the same forward pass")
    _wait_idle(page)
    _show_sidebar(page, False)
    overflow["beyond"] = _overflow(page)
    _shot(page, "29-narrow-beyond")
    _navigate(page, "Explore")
    _wait_for_text(page, "Feature maps of blocks.4")
    _wait_idle(page)
    _show_sidebar(page, False)
    overflow["back to explore"] = _overflow(page)
    _assert_images_loaded(page)
    _shot(page, "29-narrow-explore")
    assert all(value <= 0 for value in overflow.values()), overflow


# ---------------------------------------------------------- 11 · nothing jumps under the pointer


def test_the_channel_overlay_box_does_not_move_when_the_chart_draws(open_page):
    """The channel-weight chart is drawn by the browser after the rest of the panel: its room
    is kept from the start, so the check box below it stays where the user is about to click
    (it used to jump about 300 px down when the chart appeared)."""
    page = open_page()
    page.get_by_text("Channels behind the heatmap").click()
    box = page.get_by_text("Overlay one channel on the image")
    box.wait_for(timeout=SLOW)
    first = box.bounding_box()["y"]
    page.locator("[data-testid='stVegaLiteChart']").first.wait_for(timeout=SLOW)
    page.wait_for_timeout(1500)  # the chart has drawn itself by now
    later = box.bounding_box()["y"]
    assert abs(later - first) < 20, (first, later)
