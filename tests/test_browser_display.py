"""The display options in a real browser (opacity, colormaps, channels shown, channel order,
the grid's colour scale): drawn by the browser exactly and before the server answers; the
downloads decode and follow a display change; the channel overlay box stays put when the chart
above it draws. Shared fixtures and helpers: ``browser_page.py``."""

from __future__ import annotations

import numpy as np
from PIL import Image

import hookviz

from .browser_page import (
    DRAW_SPY,
    SLOW,
    browser_fixture,  # noqa: F401  (a fixture: browser)
    choose,
    close_session,
    drawn,
    drawn_before_the_reply,
    image_sources,
    open_page_fixture,  # noqa: F401  (a fixture: open_page)
    open_session,
    press,
    server_fixture,  # noqa: F401  (a fixture: server)
    shot,
    timed_change,
    wait_for_new_overlay,
    wait_for_query,
    wait_for_results,
    wait_idle,
)


def _wait_drawn(page, alpha: str, cmap: str, grid: str = "viridis", channels: str = "64") -> None:
    page.wait_for_function(
        "([alpha, cmap, grid, channels]) => {"
        " const [o, g, h] = document.querySelectorAll('[data-testid=hvPicture]');"
        " return !!o && !!g && !!h && o.dataset.alpha === alpha && o.dataset.cmap === cmap"
        " && h.dataset.cmap === cmap && g.dataset.cmap === grid"
        " && g.dataset.channels === channels; }",
        arg=[alpha, cmap, grid, channels],
        timeout=SLOW,
    )


def test_display_changes_are_drawn_in_the_browser_exactly_and_before_the_server_answers(
    browser, server, lite0
):
    """The opacity, the colormaps, the number of channels shown, the channel order and the
    grid's colour scale are drawn by the page itself: the new overlay, heatmap, colour bar and
    feature-map grid are on screen before the server has answered the change, and they are
    ``hookviz.render``'s pictures at display size, pixel for pixel (the grid on either colour
    scale). The server still records the change: the address names it, the download is of it,
    a reload draws it again. (The times from the opacity and the colormap change to the new
    overlay are recorded.)"""
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
        assert np.array_equal(drawn(page, 0), np.asarray(overlay)), (alpha, cmap)
        assert np.array_equal(drawn(page, 1), hookviz.render.colorbar(cmap, 256, 10)), cmap
        channels = features.channel_order(order, n)
        tiles = hookviz.render.laid_out_grid(features.activations, channels, cmap=grid, scale=scale)
        assert np.array_equal(drawn(page, 2), tiles), (grid, n, scale, order)
        assert np.array_equal(drawn(page, 3), hookviz.render.colorize(heat, cmap)), cmap
        caption = f"{n} of 1280 channels, {rows}×{columns} cells each"
        grid_picture = page.locator("[data-testid=hvPicture]").nth(1)
        assert caption in grid_picture.locator("[data-testid=hvCaption]").inner_text()

    page, requests = open_session(browser, server, init_script=DRAW_SPY)
    _wait_drawn(page, "0.5", "inferno")
    expect(0.5, "inferno")

    timed_change(
        page, "opacity -> overlay", lambda: press(page, "Heatmap opacity", "ArrowRight"), 1
    )
    _wait_drawn(page, "0.55", "inferno")
    assert drawn_before_the_reply(page), "the overlay waited for the server"
    expect(0.55, "inferno")

    timed_change(page, "colormap -> overlay", lambda: choose(page, "Heatmap colormap", "magma"), 1)
    _wait_drawn(page, "0.55", "magma")
    expect(0.55, "magma")
    choose(page, "Feature-map colormap", "cividis")
    _wait_drawn(page, "0.55", "magma", "cividis")
    expect(0.55, "magma", "cividis")
    wait_idle(page)
    press(page, "Channels shown", "ArrowRight")  # 65: a second row of 16 tiles
    _wait_drawn(page, "0.55", "magma", "cividis", "65")
    assert drawn_before_the_reply(page), "the grid waited for the server"
    expect(0.55, "magma", "cividis", 65)
    wait_idle(page)
    wait_for_query(page, "channels=65")
    # one colour scale over the maps shown: the browser scales the values for each count
    page.locator("[data-testid=stSidebar]").get_by_text("shared", exact=True).click()
    page.wait_for_function(
        "() => document.querySelectorAll('[data-testid=hvPicture]')[1].dataset.scale === 'shared'"
    )
    assert drawn_before_the_reply(page), "the colour scale waited for the server"
    expect(0.55, "magma", "cividis", 65, "shared")
    wait_for_query(page, "scale=shared")
    wait_idle(page)
    for key, n in (("ArrowLeft", 64), ("Home", 1), ("End", 256)):
        press(page, "Channels shown", key)
        _wait_drawn(page, "0.55", "magma", "cividis", str(n))
        expect(0.55, "magma", "cividis", n, "shared")
        wait_idle(page)
    press(page, "Channels shown", "ArrowLeft")
    _wait_drawn(page, "0.55", "magma", "cividis", "255")
    wait_idle(page)
    wait_for_query(page, "channels=255")
    # the channel order: by max activation, then by channel number, drawn by the browser
    for label, order in (("max activation", "max"), ("index", "index")):
        page.locator("[data-testid=stSidebar]").get_by_text(label, exact=True).click()
        page.wait_for_function(
            "(order) => document.querySelectorAll('[data-testid=hvPicture]')[1].dataset.order"
            " === order",
            arg=order,
        )
        assert drawn_before_the_reply(page), f"the order {order} waited for the server"
        expect(0.55, "magma", "cividis", 255, "shared", order)
        wait_for_query(page, f"order={order}")
        wait_idle(page)
    assert "alpha=0.55" in page.url and "cam_cmap=magma" in page.url
    assert "grid_cmap=cividis" in page.url
    with page.expect_download(timeout=30_000) as overlay_download:
        page.get_by_role("button", name="Download overlay (PNG)").click()
    downloaded = np.asarray(Image.open(overlay_download.value.path()), np.int16)
    full = np.asarray(hookviz.render.overlay(sample, cam.heatmap, alpha=0.55, cmap="magma"))
    assert np.abs(downloaded - full.astype(np.int16)).max() <= 1

    page.reload()
    wait_for_results(page)
    _wait_drawn(page, "0.55", "magma", "cividis", "255")
    expect(0.55, "magma", "cividis", 255, "shared", "index")
    shot(page, "22c-display-drawn-in-the-browser")
    close_session(page, requests)


def test_downloads_decode_and_follow_a_display_change(open_page):
    """The three downloads decode as drawn (a PNG overlay at the photo's size, a float32
    heatmap in [0, 1] at the photo's size, a PNG grid); after a display change, which reruns
    only some fragments, they still work and are of the options chosen (the overlay at the
    new opacity)."""
    page = open_page()
    with page.expect_download(timeout=30_000) as overlay_download:
        page.get_by_role("button", name="Download overlay (PNG)").click()
    overlay = Image.open(overlay_download.value.path())
    assert overlay.format == "PNG" and overlay.size == (512, 600)
    with page.expect_download(timeout=30_000) as heatmap_download:
        page.get_by_role("button", name="Download heatmap (.npy)").click()
    heatmap = np.load(heatmap_download.value.path())
    assert heatmap.shape == (600, 512) and heatmap.dtype == np.float32
    assert heatmap.min() >= 0.0 and heatmap.max() <= 1.0
    with page.expect_download(timeout=30_000) as grid_download:
        page.get_by_role("button", name="Download feature maps (PNG)").click()
    assert Image.open(grid_download.value.path()).format == "PNG"

    before = image_sources(page)
    press(page, "Heatmap opacity", "ArrowRight")
    wait_for_new_overlay(page, before[1])
    # the browser draws the overlay before the server has the change: wait for its record
    wait_for_query(page, "alpha=0.55")
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
    shot(page, "24-downloads-after-display-change")


# the first chart on the page has drawn itself (a canvas or an SVG with a height)
CHART_DRAWN = (
    "() => { const c = document.querySelector("
    "\"[data-testid='stVegaLiteChart'] canvas, [data-testid='stVegaLiteChart'] svg\");"
    " return !!c && c.getBoundingClientRect().height > 0; }"
)


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
    page.wait_for_function(CHART_DRAWN, timeout=SLOW)
    # and laid out: two frames after the chart's first drawing
    page.evaluate("() => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)))")
    later = box.bounding_box()["y"]
    assert abs(later - first) < 20, (first, later)


def _value_under(page, picture, fx: float, fy: float) -> tuple[str, tuple[int, int]]:
    """Move the pointer to (fx, fy) of ``picture``'s canvas (fractions of its box) and read
    the value written under it, with the canvas pixel pointed at."""
    canvas = picture.locator("canvas.hv-main")
    canvas.evaluate("(c) => c.scrollIntoView({block: 'center'})")  # (clear of the top bar)
    box = canvas.bounding_box()
    size = canvas.evaluate("(c) => [c.width, c.height]")
    page.mouse.move(box["x"] + fx * box["width"], box["y"] + fy * box["height"])
    value = picture.get_by_test_id("hvValue")
    page.wait_for_function("(e) => e.textContent.trim() !== ''", arg=value.element_handle())
    return value.inner_text(), (int(fx * size[0]), int(fy * size[1]))


def test_each_picture_fills_the_screen_and_says_the_value_under_the_pointer(open_page, lite0):
    """For a projector: the overlay, the grid and the raw heatmap each have a full-screen
    button (the picture then fills the screen, keeping its shape; the button again leaves),
    and the value under the pointer is written beside each: the heatmap's there (as hookviz
    computes it), the channel and its activation on the grid."""
    page = open_page("/")
    wait_idle(page)
    overlay, grid, heatmap = (
        page.get_by_test_id("hvPicture").nth(i) for i in range(3)
    )  # (in the order the page lays them out)
    sample = hookviz.sample_image()
    heat = hookviz.grad_cam(lite0, sample).heatmap_at((sample.height, sample.width))
    for picture in (overlay, heatmap):
        said, (x, y) = _value_under(page, picture, 0.5, 0.3)
        assert said.startswith("heatmap "), said
        assert abs(float(said.split()[1]) - float(heat[y, x])) <= 0.011, (said, heat[y, x])
    said, _ = _value_under(page, grid, 0.02, 0.02)  # inside the first tile
    first = hookviz.feature_maps(lite0, sample, "bn2").channel_order("mean", 1)[0]
    assert said.startswith(f"channel {first} · "), said

    for picture in (overlay, grid, heatmap):
        picture.hover()
        picture.get_by_test_id("hvFullscreen").click()
        page.wait_for_function("() => document.fullscreenElement?.dataset.testid === 'hvPicture'")
        canvas = picture.locator("canvas.hv-main").bounding_box()
        screen = page.viewport_size
        wide, tall = canvas["width"] / screen["width"], canvas["height"] / screen["height"]
        assert wide >= 0.9 or tall >= 0.7, (wide, tall)
        shown = picture.locator("canvas.hv-main").evaluate(
            "(c) => { const s = getComputedStyle(c); return s.objectFit; }"
        )
        assert shown == "contain"  # its shape kept inside the full-screen box
        picture.get_by_test_id("hvFullscreen").click()
        page.wait_for_function("() => !document.fullscreenElement")
    shot(page, "30-values-and-full-screen")
