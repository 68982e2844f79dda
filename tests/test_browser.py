"""End to end in a real browser: `streamlit run app.py` on a loopback port, driven by Playwright
in Debian's Chromium, the way a user uses it.

Each test records every request the page makes and fails if one goes anywhere but 127.0.0.1.
Screenshots of each flow and the measured control-to-image times are written to the folder
printed at the end of the run (``test-artifacts/browser``, or $HOOKVIZ_ARTIFACTS/browser).

Without Playwright or Chromium these tests are skipped, unless HOOKVIZ_REQUIRE_BROWSER=1 (as
in .ci/run), where a missing browser is a failure.
"""

from __future__ import annotations

import io
import json
import os
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import hookviz
from scripts import page_pictures
from scripts.appserver import CHROMIUM_FLAGS, chromium_path, free_port, running_app

from .conftest import ARTIFACTS

REQUIRED = os.environ.get("HOOKVIZ_REQUIRE_BROWSER") == "1"
LOCAL_HOSTS = {"127.0.0.1", "localhost"}
SLOW = 180_000  # ms: a cold model load plus analysis on 2 CPU cores
TIMINGS: dict[str, float] = {}

try:
    from playwright.sync_api import Page, sync_playwright
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    from bench.page_speed import open_box as _open_box
except ImportError:  # pragma: no cover - depends on the machine
    sync_playwright = None

if sync_playwright is None or not Path(chromium_path()).exists():
    reason = "Playwright or Chromium missing (pip install playwright; apt-get install chromium)"
    if REQUIRED:
        raise RuntimeError(reason)
    pytest.skip(reason, allow_module_level=True)


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
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / "timings.json").write_text(json.dumps(TIMINGS, indent=2))


def _open(browser, url: str, *, width: int = 1366, height: int = 900, dark: bool = False):
    context = browser.new_context(
        viewport={"width": width, "height": height},
        color_scheme="dark" if dark else "light",
        accept_downloads=True,
    )
    page = context.new_page()
    requests: list[str] = []
    page.on("request", lambda request: requests.append(request.url))
    page.on("websocket", lambda socket: requests.append(socket.url))
    page.goto(url)
    _wait_for_results(page)
    return page, requests


@pytest.fixture
def page(browser, server) -> Iterator[Page]:
    page, requests = _open(browser, server)
    yield page
    _assert_only_local(requests)
    page.context.close()


# ---------------------------------------------------------------- helpers


def _assert_only_local(requests: list[str]) -> None:
    outside = [
        url
        for url in requests
        if urllib.parse.urlparse(url).scheme not in ("data", "blob", "about")
        and urllib.parse.urlparse(url).hostname not in LOCAL_HOSTS
    ]
    assert outside == [], f"requests left the machine: {outside[:5]}"
    assert requests, "no request recorded: the recorder is not working"


def _wait_for_results(page: Page) -> None:
    page.get_by_role("button", name="Download feature maps (PNG)").wait_for(timeout=SLOW)
    _wait_idle(page)


def _wait_idle(page: Page, timeout: float = SLOW) -> None:
    """Wait until Streamlit has finished the current run: no element left stale from the
    previous run. (Its status widget is no sign: with this app's settings Streamlit never shows
    it, ``tests/test_streamlit_dom.py``.)"""
    page.wait_for_function(
        "() => !document.querySelector('[data-stale=\"true\"]')", timeout=timeout
    )


def _image_sources(page: Page) -> list[str]:
    """Each picture's version: an image's source, a browser-drawn picture's draw count."""
    return page.evaluate(f"() => {{ {page_pictures.helpers()} return pictures().map(version); }}")


def _assert_images_loaded(page: Page, count: int | None = 5) -> None:
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


def _layer_label(name: str, model: str = "efficientnet_lite0", size=(262, 224)) -> str:
    """The layer picker's label: name and output shape at this image's input size ((height,
    width); the sample photo is fed at 224x262)."""
    loaded = hookviz.load_model(model, device="cpu")
    table = hookviz.layer_table(loaded)
    channels, height, width = hookviz.core.layers.layer_shapes(loaded, *size)[name]
    star = "  ★" if name == table.default else ""
    return f"{name} · {channels}×{height}×{width}{star}"


def _go_to(page: Page, title: str) -> None:
    """Open another page of the app from the top navigation."""
    page.locator("[data-testid='stTopNavLink']").filter(has_text=title).first.click()


def _main_text(page: Page) -> str:
    return page.locator("[data-testid='stMain']").inner_text()


def _wait_for_text(page: Page, text: str, where: str = "stMain") -> None:
    page.locator(f"[data-testid='{where}']").get_by_text(text, exact=False).first.wait_for(
        timeout=SLOW
    )


def _choose(page: Page, box: str, option: str) -> None:
    """Pick an option as a user would: open the box, type to filter (long lists are virtual,
    only the visible options exist in the page), click the option. A list that closes again
    (the page moving under it as a late chart draws, on a loaded machine) is opened again, up
    to three times."""
    for attempt in range(3):
        _open_box(page, box)
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
            _wait_idle(page)


def _timed_change(page: Page, name: str, action, image_index: int) -> None:
    """Run ``action`` and wait until image ``image_index`` has a new source; record the time."""
    before = _image_sources(page)[image_index]
    started = time.perf_counter()
    action()
    page.wait_for_function(
        f"([index, before]) => {{ {page_pictures.helpers()} const imgs = pictures();"
        "  return imgs.length > index && version(imgs[index]) !== before && ready(imgs[index]); }",
        arg=[image_index, before],
        timeout=SLOW,
    )
    TIMINGS[name] = round(time.perf_counter() - started, 3)
    _wait_idle(page)


def _upload(page: Page, name: str, data: bytes, mime: str) -> None:
    page.locator("[data-testid='stFileUploaderDropzoneInput']").set_input_files(
        files=[{"name": name, "mimeType": mime, "buffer": data}]
    )


def _encoded(size: tuple[int, int], fmt: str) -> bytes:
    pixels = np.zeros((size[1], size[0], 3), np.uint8)
    pixels[..., 0] = np.linspace(0, 255, size[0], dtype=np.uint8)[None, :]
    pixels[size[1] // 3 : 2 * size[1] // 3, size[0] // 3 : 2 * size[0] // 3] = (20, 200, 40)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format=fmt)
    return buffer.getvalue()


def _shot(page: Page, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


# ---------------------------------------------------------------- flows


def test_first_page_shows_sample_grid_overlay_and_predictions(page):
    _assert_images_loaded(page)
    text = _main_text(page)
    assert "Grad-CAM: “military uniform”" in text
    assert "Feature maps of bn2" in text
    assert "512×600 px" in text
    assert "Top-5 predictions" in text
    assert page.locator("[data-testid='stProgress']").count() == 5  # the top-5 as bars
    device = hookviz.core.devices.describe_device(hookviz.default_device())
    assert f"ms on {device}" in text
    _shot(page, "01-default")


@pytest.mark.parametrize(("fmt", "mime"), [("PNG", "image/png"), ("JPEG", "image/jpeg")])
def test_upload_replaces_the_results(page, fmt, mime):
    before = _image_sources(page)
    _upload(page, f"gradient.{fmt.lower()}", _encoded((330, 210), fmt), mime)
    _wait_for_text(page, "330×210 px")
    _wait_idle(page)
    _assert_images_loaded(page)
    after = _image_sources(page)
    changed = [a != b for a, b in zip(after, before, strict=True)]
    # the original, the overlay, the grid and the heatmap; the overlay's colour bar is the same
    # colormap's (it is drawn again only if the overlay's element was mounted afresh)
    assert [changed[i] for i in (0, 1, 3, 4)] == [True] * 4, (before, after)
    _shot(page, f"02-upload-{fmt.lower()}")


def test_controls_update_the_images(page):
    label = _layer_label("blocks.3")
    _timed_change(page, "layer change -> grid", lambda: _choose(page, "Target layer", label), 3)
    _wait_for_text(page, "Feature maps of blocks.3")

    _timed_change(
        page,
        "class from top-5 -> overlay",
        lambda: (
            _open_box(page, "Explain the class")
            or page.get_by_role("option", name="#2 suit", exact=False).click()
        ),
        1,
    )
    _wait_for_text(page, "Grad-CAM: “suit”")

    _timed_change(
        page,
        "class typed by name -> overlay",
        lambda: _choose(page, "Explain the class", "goldfish"),
        1,
    )
    _wait_for_text(page, "Grad-CAM: “goldfish”")

    _timed_change(
        page, "colormap -> overlay", lambda: _choose(page, "Heatmap colormap", "viridis"), 1
    )

    def nudge_alpha() -> None:
        slider = page.get_by_role("slider").nth(1)  # channels, then opacity
        slider.focus()
        page.keyboard.press("ArrowRight")

    _timed_change(page, "opacity -> overlay", nudge_alpha, 1)
    _assert_images_loaded(page)
    # the browser draws the overlay first; the server's record of the change follows
    page.wait_for_function("() => location.search.includes('alpha=0.55')", timeout=SLOW)
    _shot(page, "03-controls")


def test_corrupt_upload_shows_error_then_next_upload_works(page):
    _upload(page, "broken.png", b"\x89PNG\r\n\x1a\n" + b"garbage" * 20, "image/png")
    _wait_for_text(page, "Could not use")
    _wait_idle(page)
    assert "broken.png" in _main_text(page)
    _assert_images_loaded(page)  # the sample stays on screen
    _shot(page, "04-corrupt-upload")
    _upload(page, "fine.png", _encoded((240, 360), "PNG"), "image/png")
    _wait_for_text(page, "240×360 px")
    _wait_idle(page)
    assert "Could not use" not in _main_text(page)
    _assert_images_loaded(page)


def test_downloads_decode(page):
    with page.expect_download() as overlay_download:
        page.get_by_role("button", name="Download overlay (PNG)").click()
    overlay = Image.open(overlay_download.value.path())
    assert overlay.format == "PNG" and overlay.size == (512, 600)

    with page.expect_download() as heatmap_download:
        page.get_by_role("button", name="Download heatmap (.npy)").click()
    heatmap = np.load(heatmap_download.value.path())
    assert heatmap.shape == (600, 512) and heatmap.dtype == np.float32
    assert heatmap.min() >= 0.0 and heatmap.max() <= 1.0

    with page.expect_download() as grid_download:
        page.get_by_role("button", name="Download feature maps (PNG)").click()
    assert Image.open(grid_download.value.path()).format == "PNG"


@pytest.mark.parametrize(
    ("model", "layer"),
    [("resnet18", "layer4"), ("vgg11", "features"), ("mobilenet_v3_large", "features")],
)
def test_untrained_architectures(page, model, layer):
    page.get_by_text("untrained", exact=True).click()
    _wait_for_text(page, "Untrained: random weights", where="stSidebar")
    _wait_idle(page)
    _choose(page, "Network", f"{model} (random weights)")  # no download for random weights
    _wait_for_text(page, f"Feature maps of {layer}")
    _wait_idle(page)
    _assert_images_loaded(page)
    assert "Untrained" in page.locator("[data-testid='stSidebar']").inner_text()
    _shot(page, f"05-untrained-{model}")


def test_shared_url_restores_the_view(browser, server):
    query = "?model=resnet18&weights=untrained&layer=layer3&target=1&cam_cmap=viridis"
    page, requests = _open(browser, server + "/" + query)
    _wait_for_text(page, "Feature maps of layer3")
    assert "Grad-CAM: “goldfish”" in _main_text(page)
    assert "layer=layer3" in page.url and "target=1" in page.url
    _assert_only_local(requests)
    page.context.close()


@pytest.mark.parametrize(
    ("name", "width", "height", "dark"),
    [
        ("laptop-light", 1366, 768, False),
        ("laptop-dark", 1366, 768, True),
        ("narrow-light", 420, 900, False),
    ],
)
def test_layout_at_two_widths_and_both_themes(browser, server, name, width, height, dark):
    page, requests = _open(browser, server, width=width, height=height, dark=dark)
    _assert_images_loaded(page)
    overflow = page.evaluate(
        "() => document.querySelector('[data-testid=\"stMain\"]').scrollWidth - window.innerWidth"
    )
    assert overflow <= 0, f"the page scrolls sideways by {overflow}px at {width}px"
    if width >= 1366:
        # original, overlay and grid sit side by side in the first screenful
        boxes = [  # original, overlay, grid (image 2 is the overlay's colour bar)
            page.locator(page_pictures.PICTURES).nth(i).bounding_box() for i in (0, 1, 3)
        ]
        assert boxes[0]["x"] < boxes[1]["x"] < boxes[2]["x"]
        assert all(box["y"] < height for box in boxes)
    _shot(page, f"06-{name}")
    _assert_only_local(requests)
    page.context.close()


def test_first_paint_from_a_cold_start(browser):
    """From `streamlit run` to the default page fully drawn, with nothing loaded beforehand
    (a new server process: torch import, model load, layer trace, first analysis)."""
    started = time.perf_counter()
    with running_app(free_port(), timeout=120) as url:
        page, requests = _open(browser, url)
        _assert_images_loaded(page)
        TIMINGS["first paint (cold start: streamlit run -> default page drawn)"] = round(
            time.perf_counter() - started, 3
        )
        _assert_only_local(requests)
        page.context.close()


def test_many_sessions_at_once_each_see_their_own_results(browser, server):
    """Four browser sessions against one server, each with its own image and layer, their
    requests overlapping on the server: every session must see only its own results."""
    sizes = [(200 + 17 * i, 150 + 11 * i) for i in range(4)]
    layers = ["blocks.2", "blocks.3", "blocks.4", "blocks.5"]
    sessions = [_open(browser, server) for _ in sizes]
    started = time.perf_counter()
    for index, ((page, _), size) in enumerate(zip(sessions, sizes, strict=True)):
        _upload(page, f"session{index}.png", _encoded(size, "PNG"), "image/png")
    for (page, _), (width, height) in zip(sessions, sizes, strict=True):
        _wait_for_text(page, f"{width}×{height} px")
        _wait_idle(page)
    for (page, _), layer, (width, height) in zip(sessions, layers, sizes, strict=True):
        size = hookviz.load_model("efficientnet_lite0", device="cpu").preprocessing.input_size(
            width, height
        )
        _choose(page, "Target layer", _layer_label(layer, size=size))
    mismatches = 0
    for (page, _), layer, (width, height) in zip(sessions, layers, sizes, strict=True):
        _wait_for_text(page, f"Feature maps of {layer}")
        _wait_idle(page)
        text = _main_text(page)
        others = [f"{w}×{h} px" for w, h in sizes if (w, h) != (width, height)]
        mismatches += f"{width}×{height} px" not in text or any(o in text for o in others)
        with page.expect_download() as download:
            page.get_by_role("button", name="Download heatmap (.npy)").click()
        mismatches += np.load(download.value.path()).shape != (height, width)
    elapsed = time.perf_counter() - started
    TIMINGS["4 concurrent sessions: upload + layer change each, all done"] = round(elapsed, 3)
    for page, requests in sessions:
        _assert_only_local(requests)
        page.context.close()
    assert mismatches == 0


def _scroll_to(page: Page, text: str) -> None:
    """Scroll a text into view for a screenshot (retried: an element the last run redrew can
    be replaced while Playwright waits for it to be stable)."""
    for attempt in range(3):
        _wait_idle(page)
        try:
            page.get_by_text(text, exact=False).first.scroll_into_view_if_needed(timeout=5_000)
            return
        except Exception:  # a detached element: take the new one
            if attempt == 2:
                raise


def _panel(page: Page, name: str) -> None:
    """Pick a panel of the Beyond / Diagnose pages (a segmented control)."""
    page.locator("[data-testid='stButtonGroup']").get_by_role("radio", name=name).click()


def test_cam_methods_and_diagnostics_in_the_browser(browser, server):
    page, requests = _open(browser, server + "/?method=gradcam%2B%2B&layer=blocks.5")
    _wait_for_text(page, "Grad-CAM++: “military uniform”")
    _assert_images_loaded(page)
    _timed_change(page, "method -> overlay", lambda: _choose(page, "CAM method", "Layer-CAM"), 1)
    _wait_for_text(page, "Layer-CAM: “military uniform”")
    _go_to(page, "Diagnose the network")
    _wait_for_text(page, "Histogram of blocks.5")
    _wait_idle(page)
    assert "/diagnose" in page.url and "method=layercam" in page.url
    # the statistics panel's three charts (mean/std, zero fraction, histogram)
    page.wait_for_function(
        "() => document.querySelectorAll(\"[data-testid='stVegaLiteChart']\").length >= 3",
        timeout=SLOW,
    )
    _panel(page, "Gradient flow")
    _wait_for_text(page, "Gradient of the score of “military uniform”")
    _panel(page, "Intervene")
    _wait_for_text(page, "Logit of “military uniform”")
    _wait_idle(page)
    assert "diagnose_panel=intervene" in page.url
    _shot(page, "07-methods-and-diagnostics")
    _assert_only_local(requests)
    page.context.close()


def test_beyond_one_heatmap_in_the_browser(browser, server):
    page, requests = _open(browser, server, height=1400)
    _go_to(page, "Beyond one heatmap")
    _wait_for_text(page, "all from the same forward pass")
    _wait_idle(page)
    _panel(page, "Layer sweep")
    _wait_for_text(page, "blocks.2 · ")
    _panel(page, "Step by step")
    _wait_for_text(page, "removed by the ReLU")
    _wait_idle(page)
    _assert_images_loaded(page, count=None)  # the visible panel's pictures
    _scroll_to(page, "removed by the ReLU")
    _shot(page, "08-step-by-step")
    _panel(page, "Trust check")
    page.get_by_text("Run the trust check", exact=False).click()
    _wait_for_text(page, "Deletion area")
    _wait_idle(page)
    _scroll_to(page, "Deletion area")
    _shot(page, "09-trust-check")
    _assert_only_local(requests)
    page.context.close()


@pytest.mark.parametrize(
    ("model", "layer"),
    [("resnet18", "layer4"), ("vgg11", "features"), ("mobilenet_v3_large", "features")],
)
def test_views_and_diagnostics_on_untrained_architectures(browser, server, model, layer):
    page, requests = _open_without_waiting(
        browser,
        server + f"/beyond?model={model}&weights=untrained&method=gradcam%2B%2B&beyond_panel=sweep",
        height=1400,
    )
    _wait_for_text(page, f"{layer} · ")
    _panel(page, "Top-5 gallery")
    _wait_for_text(page, "all from the same forward pass")
    _go_to(page, "Diagnose the network")
    _wait_for_text(page, "Histogram of")
    _panel(page, "Gradient flow")
    _wait_for_text(page, "Gradient of the score of")
    _panel(page, "Intervene")
    _wait_for_text(page, "Logit of")
    _wait_idle(page)
    _assert_images_loaded(page, count=None)
    assert "Something went wrong" not in _main_text(page)
    _shot(page, f"10-views-untrained-{model}")
    _assert_only_local(requests)
    page.context.close()


def test_scorecam_keeps_the_previous_result_and_can_be_cancelled(browser, server):
    """Score-CAM on an untrained VGG-11 layer with 512 channels takes about a minute here: the
    page says so, keeps the previous (Grad-CAM) result on screen marked as the previous one,
    and its Cancel button brings the Grad-CAM view back at once."""
    page, requests = _open_without_waiting(
        browser, server + "/?model=vgg11&weights=untrained&layer=features.17"
    )
    _wait_for_text(page, "Grad-CAM: “")
    _wait_idle(page)
    _choose(page, "CAM method", "Score-CAM (slow: one forward per channel)")
    _wait_for_text(page, "Score-CAM masks the image with each of the layer's 512 channels")
    page.get_by_text("Score-CAM:", exact=False).first.wait_for(timeout=SLOW)  # progress bar
    # the previous result stays, marked as such, with its pictures
    assert "Previous result" in _main_text(page)
    assert "Grad-CAM: “" in _main_text(page)
    _assert_images_loaded(page)
    _shot(page, "11-scorecam-running")
    started = time.perf_counter()
    page.get_by_role("button", name="Cancel Score-CAM").click()
    page.wait_for_function(
        "() => !document.body.innerText.includes('Score-CAM masks the image')", timeout=SLOW
    )
    _wait_for_text(page, "Grad-CAM: “")
    _wait_idle(page)
    TIMINGS["Score-CAM cancelled by its Cancel button"] = round(time.perf_counter() - started, 3)
    assert "Previous result" not in _main_text(page)
    assert page.get_by_role("combobox", name="CAM method").input_value() == "Grad-CAM"
    assert "method=" not in page.url
    _assert_only_local(requests)
    page.context.close()


def test_scorecam_is_cancelled_by_any_control_change(browser, server):
    page, requests = _open_without_waiting(
        browser, server + "/?model=vgg11&weights=untrained&layer=features.17&method=scorecam"
    )
    _wait_for_text(page, "Score-CAM masks the image with each of the layer's 512 channels")
    page.get_by_text("Score-CAM:", exact=False).first.wait_for(timeout=SLOW)  # progress bar
    started = time.perf_counter()
    _choose(page, "CAM method", "Grad-CAM")
    _wait_for_text(page, "Grad-CAM: “")
    _wait_idle(page)
    TIMINGS["Score-CAM cancelled by a method change"] = round(time.perf_counter() - started, 3)
    assert "Score-CAM masks the image" not in _main_text(page)
    _assert_only_local(requests)
    page.context.close()


def _open_without_waiting(browser, url: str, height: int = 900):
    context = browser.new_context(viewport={"width": 1366, "height": height})
    page = context.new_page()
    requests: list[str] = []
    page.on("request", lambda request: requests.append(request.url))
    page.goto(url)
    return page, requests
