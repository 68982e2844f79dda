"""Regenerate the documentation's screenshots: one picture of each page of the app.

Usage:  python scripts/docs_screenshots.py [--only explore,beyond,...] [--out docs/images]

Starts ``streamlit run app.py`` on a free loopback port, opens each page at 1366x900 in
headless Chromium on the sample photo with the bundled model (the app's defaults), waits until
the page is complete (the page's own last elements present, Streamlit idle, every picture
decoded or drawn) and writes ``docs/images/page-<name>.png``, compressed. The Dataset run page
is shown on a small run made for it with ``hookviz cam`` in a temporary folder. Two pictures
are taken as a class sees them: ``present-projector``, the Present page at a projector's
1280x720 with the sidebar collapsed, and ``live-camera``, the Live camera page playing
Chromium's fake camera, fed the sample photo (a short Y4M video written in the temporary
folder), with its overlay, top-5 and frames per second.

Needs Playwright for Python and Debian's Chromium (/usr/bin/chromium, or $HOOKVIZ_CHROMIUM);
about two minutes on 2 CPU cores.
"""

from __future__ import annotations

import argparse
import io
import re
import subprocess
import sys
import tempfile
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from appserver import CHROMIUM_FLAGS, ROOT, chromium_path, free_port, running_app
from page_pictures import helpers
from PIL import Image, ImageOps

sys.path.insert(0, str(ROOT))
from hookviz.app.browser.streamlit_dom import BY_NAME  # Streamlit's DOM hooks, in one list

MAIN = BY_NAME["main"].value
CHART = BY_NAME["vega_chart"].value
STALE = f'[{BY_NAME["stale"].value}="true"]'
SPINNER = BY_NAME["spinner"].value
SKELETON = BY_NAME["skeleton"].value
SIDEBAR = BY_NAME["sidebar"].value
CLOSE_SIDEBAR = BY_NAME["collapse_sidebar_button"].value
METRIC = BY_NAME["metric_value"].value

SIZE = {"width": 1366, "height": 900}
MOST_BYTES = 400_000  # each picture; above it the PNG is stored with a 256-colour palette
SLOW_MS = 180_000  # a cold start imports torch and loads the model
MAKING_MS = 900_000  # a visualization: about 6 s for 64 steps on 2 idle cores, minutes if busy
VIS_STEPS = 64
PROJECTOR = {"width": 1280, "height": 720}  # a classroom projector
CAMERA_FRAME = (640, 480)  # the fake camera's frames: a webcam's size
FRAMES_SHOWN_S = 6.0  # the camera plays this long before its picture: a settled frame rate
# Chromium's fake camera and no prompt to allow it; the file it plays is added to these
FAKE_CAMERA = ["--use-fake-device-for-media-stream", "--use-fake-ui-for-media-stream"]


# The Dataset run page's run: the sample photo made into a few pictures (each one row)
RUN_PHOTOS = {
    "hopper.jpg": lambda sample: sample,
    "hopper-mirrored.jpg": ImageOps.mirror,
    "hopper-grey.jpg": lambda sample: ImageOps.grayscale(sample).convert("RGB"),
    "hopper-face.jpg": lambda sample: sample.crop(
        (sample.width // 5, 0, sample.width * 4 // 5, sample.height * 3 // 5)
    ),
    "hopper-wide.jpg": lambda sample: ImageOps.pad(
        sample, (sample.width * 2, sample.height), color=(240, 240, 240)
    ),
    "hopper-turned.jpg": lambda sample: sample.rotate(90, expand=True),
}


@dataclass(frozen=True)
class Shot:
    """One page: where it is, and what must be on it before the picture is taken."""

    name: str  # docs/images/page-<name>.png
    path: str  # the page's address, after the server's
    ready: Callable  # (page) -> None: waits for the page's own last element
    size: dict | None = None  # a window of its own (a session of its own); None: SIZE


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "docs" / "images"))
    parser.add_argument("--only", help="comma-separated page names (default: every page)")
    args = parser.parse_args()
    only = set(args.only.split(",")) if args.only else None
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)

    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory(prefix="hookviz-docs-") as scratch:
        run_dir = None
        if only is None or {"dataset", "dataset-circuit", "dataset-concepts"} & only:
            run_dir = _small_run(Path(scratch))
        shots = [shot for shot in _shots(run_dir) if only is None or shot.name in only]
        flags = CHROMIUM_FLAGS + FAKE_CAMERA
        if only is None or "live-camera" in only:
            video = _camera_video(Path(scratch) / "camera.y4m")
            flags = [*flags, f"--use-file-for-fake-video-capture={video}"]
        with running_app(free_port(), timeout=120) as url, sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=chromium_path(), args=flags)
            shared = browser.new_context(viewport=SIZE, color_scheme="light").new_page()
            for shot in shots:
                started = time.perf_counter()
                page = shared
                if shot.size is not None:
                    own = browser.new_context(viewport=shot.size, color_scheme="light")
                    page = own.new_page()
                page.goto(url + shot.path)
                try:
                    shot.ready(page)
                    _complete(page)
                except Exception:
                    failed = Path(tempfile.gettempdir()) / f"page-{shot.name}-failed.png"
                    page.screenshot(path=failed)
                    print(f"{shot.name}: not complete; the page as it was: {failed}")
                    raise
                target = out / f"page-{shot.name}.png"
                size = _save(page.screenshot(), target)
                took = time.perf_counter() - started
                print(f"{target}: {size / 1000:.0f} KB in {took:.1f} s")
                if page is not shared:
                    page.context.close()
            browser.close()


def _shots(run_dir: Path | None) -> list[Shot]:
    def text(words: str) -> Callable:
        return lambda page: (
            _main(page).get_by_text(words, exact=False).first.wait_for(timeout=SLOW_MS)
        )

    def explore(page) -> None:
        # the last thing Explore draws is the feature-map grid's download button
        page.get_by_role("button", name="Download feature maps (PNG)").wait_for(timeout=SLOW_MS)

    def channel(page) -> None:
        # make the visualization, so the picture shows one (the button's label has its estimate)
        make = page.get_by_role("button", name=f"Make it ({VIS_STEPS} steps, about")
        make.first.wait_for(timeout=SLOW_MS)
        _idle(page)
        make.first.click()
        made = _main(page).get_by_text("Mean activation on it", exact=False).first
        made.wait_for(timeout=MAKING_MS)

    def dataset(page) -> None:
        # the last row's overlay with its button (the page draws them last), and the table
        opens = page.get_by_role("button", name="Open in Explore")
        opens.nth(len(RUN_PHOTOS) - 1).wait_for(timeout=SLOW_MS)
        _table_drawn(page)

    def your_model(page) -> None:
        text("Model cards of this server")(page)
        page.get_by_role("combobox", name="Architecture").wait_for(timeout=SLOW_MS)
        page.get_by_role("button", name="Upload").nth(1).wait_for(timeout=SLOW_MS)

    def projector(page) -> None:
        # as a teacher shows it: the sidebar collapsed (its `«`), the picture at the window's
        # height
        text("Keys:")(page)
        _idle(page)
        page.locator(SIDEBAR).hover()  # (its `«` shows while the pointer is over it)
        page.locator(CLOSE_SIDEBAR).click()
        page.mouse.move(PROJECTOR["width"] - 1, PROJECTOR["height"] - 1)  # (off the picture)
        page.wait_for_function(
            "(sidebar) => { const box = document.querySelector(sidebar)"
            ".getBoundingClientRect(); return box.x + box.width <= 0; }",
            arg=SIDEBAR,
            timeout=SLOW_MS,
        )
        page.wait_for_function(
            "() => document.querySelector('canvas.hv-main')?.dataset.drawn", timeout=SLOW_MS
        )

    def camera(page) -> None:
        # START is inside streamlit-webrtc's frame, which appears a few seconds after the
        # page; then the server's frame rate climbs above 0 and the top-5 is drawn
        text("Frames per second")(page)
        frame = page.frame_locator("iframe[title*='webrtc']")
        start = frame.get_by_role("button", name=re.compile("^start$", re.IGNORECASE))
        start.click(timeout=SLOW_MS)
        rate = f"() => parseFloat(document.querySelector({METRIC!r})?.innerText) > 0"
        page.wait_for_function(rate, timeout=SLOW_MS)
        text("Top-5")(page)
        # the overlays coming back are playing in the frame's video
        video = frame.locator("video")
        video.wait_for(timeout=SLOW_MS)
        deadline = time.monotonic() + SLOW_MS / 1000
        while not video.evaluate("(v) => v.readyState >= 2 && v.currentTime > 0.5"):
            if time.monotonic() > deadline:
                raise TimeoutError("the camera's video does not play")
            time.sleep(0.2)
        # a rate over a full window of frames, not the first frames' (the readout is redrawn
        # every half second while the camera plays)
        time.sleep(FRAMES_SHOWN_S)
        page.wait_for_function(rate, timeout=SLOW_MS)

    def charts(count: int, words: str) -> Callable:
        def ready(page) -> None:
            text(words)(page)
            _table_drawn(page)
            page.wait_for_function(
                "([chart, count]) => document.querySelectorAll("
                "`${chart} canvas, ${chart} svg`).length >= count",
                arg=[CHART, count],
                timeout=SLOW_MS,
            )

        return ready

    shots = [
        Shot("explore", "/", explore),
        Shot("beyond", "/beyond", text("all from the same forward pass")),
        Shot("methods", "/methods", text("Compute the slow methods")),
        Shot("channel", f"/channel?vis_steps={VIS_STEPS}", channel),
        Shot("diagnose", "/diagnose", charts(3, "Histogram of")),
        Shot("compare", "/compare", text("Agreement of the two heatmaps")),
        Shot("present", "/present", text("Keys:")),
        Shot("present-projector", "/present", projector, size=PROJECTOR),
        Shot("live-camera", "/camera", camera),
        Shot("your-model", "/your-model", your_model),
    ]
    shots += [
        Shot("beyond-overview", "/beyond?beyond_panel=sweep", text("gives the same in Python")),
        Shot("beyond-concepts", "/beyond?beyond_panel=concepts", text("Concept 1")),
        Shot("beyond-relevance", "/beyond?beyond_panel=relevance", text("What is channel")),
    ]
    if run_dir is not None:
        query = urllib.parse.urlencode({"run_dir": str(run_dir)})
        shots.append(Shot("dataset", f"/dataset?{query}", dataset))
        query = urllib.parse.urlencode({"run_dir": str(run_dir.parent / "circuit")})
        shots.append(Shot("dataset-circuit", f"/dataset?{query}", charts(1, "Strongest links")))
        query = urllib.parse.urlencode({"run_dir": str(run_dir.parent / "concepts")})
        shots.append(Shot("dataset-concepts", f"/dataset?{query}", text("Concept 4")))
    return shots


def _table_drawn(page) -> None:
    """A dataframe is drawn: its grid of cells for screen readers (hidden, beside the canvas
    that shows the table) exists once the table's code has loaded and drawn it."""
    grid = page.get_by_role("grid", include_hidden=True).first
    grid.wait_for(state="attached", timeout=SLOW_MS)


def _main(page):
    return page.locator(MAIN)


def _idle(page) -> None:
    """Streamlit has finished its run: nothing left stale from the last one, no spinner."""
    page.wait_for_function(
        "([stale, spinner]) => !document.querySelector(stale) && !document.querySelector(spinner)",
        arg=[STALE, SPINNER],
        timeout=SLOW_MS,
    )


def _complete(page) -> None:
    """Idle, every element drawn (on a busy machine an element whose code still loads is a
    grey placeholder for a while, after the run has ended), every visible picture decoded
    (images) or drawn (the page's canvases), and the fonts loaded."""
    _idle(page)
    page.wait_for_function(
        f"(skeleton) => {{ {helpers()}"
        "  const shown = pictures().filter((e) => e.offsetParent !== null);"
        "  return !document.querySelector(skeleton) && shown.every(ready)"
        "    && document.fonts.status === 'loaded'; }",
        arg=SKELETON,
        timeout=SLOW_MS,
    )
    # (an image decoded after the last check is painted at the next frame)
    page.evaluate("() => new Promise((done) => requestAnimationFrame(() => done()))")


def _save(png: bytes, target: Path) -> int:
    """Write the screenshot as a compressed PNG (a palette where a full-colour one is too big);
    return its size in bytes."""
    picture = Image.open(io.BytesIO(png)).convert("RGB")
    data = _png(picture)
    if len(data) > MOST_BYTES:
        data = _png(picture.quantize(colors=256, method=Image.Quantize.MEDIANCUT, dither=0))
    target.write_bytes(data)
    return len(data)


def _png(picture: Image.Image) -> bytes:
    buffer = io.BytesIO()
    picture.save(buffer, format="PNG", optimize=True)
    return buffer.getvalue()


def _camera_video(target: Path) -> Path:
    """The sample photo as the fake camera's video: a YUV4MPEG2 file of a few identical 4:2:0
    frames (the raw format Chromium's file camera reads besides MJPEG), the whole photo held
    up before a dark background at the camera's 4:3 ``CAMERA_FRAME`` (a crop to 4:3 would
    cut the uniform off, and the top-1 with it), in limited-range BT.601 as a webcam sends
    it. Chromium plays the file in a loop."""
    import hookviz

    width, height = CAMERA_FRAME
    photo = ImageOps.pad(hookviz.sample_image().convert("RGB"), CAMERA_FRAME, color=(60, 60, 60))
    rgb = np.asarray(photo, dtype=np.float32) / 255.0
    r, g, b = rgb[..., 0], rgb[..., 1], rgb[..., 2]
    y = 16 + 65.481 * r + 128.553 * g + 24.966 * b
    cb = 128 - 37.797 * r - 74.203 * g + 112.0 * b
    cr = 128 + 112.0 * r - 93.786 * g - 18.214 * b

    def plane(values: np.ndarray) -> bytes:
        return np.clip(np.rint(values), 0, 255).astype(np.uint8).tobytes()

    def half(values: np.ndarray) -> np.ndarray:  # 4:2:0: the mean of each 2x2 block
        return values.reshape(height // 2, 2, width // 2, 2).mean(axis=(1, 3))

    frame = b"FRAME\n" + plane(y) + plane(half(cb)) + plane(half(cr))
    header = f"YUV4MPEG2 W{width} H{height} F15:1 Ip A1:1 C420jpeg\n".encode()
    target.write_bytes(header + frame * 15)
    return target


def _small_run(scratch: Path) -> Path:
    """A ``hookviz cam`` run over a few pictures made from the sample photo (and one file that
    is not an image, to show a failed row), and a ``hookviz circuit`` and ``hookviz concepts``
    of the same pictures beside it (``circuit``, ``concepts``), for the Dataset run page."""
    import hookviz

    photos = scratch / "photos"
    photos.mkdir()
    sample = hookviz.sample_image()
    for name, make in RUN_PHOTOS.items():
        make(sample).save(photos / name, quality=90)
    (photos / "notes.jpg").write_text("not an image")
    run = scratch / "runs" / "photos"
    command = [sys.executable, "-m", "hookviz", "cam", str(photos)]
    command += ["--model", "efficientnet_lite0", "--out", str(run), "--quiet"]
    subprocess.run(command, cwd=ROOT, check=True, capture_output=True)
    # and a class's circuit over the same photos, beside it
    command = [sys.executable, "-m", "hookviz", "circuit", str(photos), "--class"]
    command += ["military uniform", "--layers", "blocks.5,blocks.6", "--top", "6"]
    command += ["--model", "efficientnet_lite0", "--out", str(run.parent / "circuit"), "--quiet"]
    subprocess.run(command, cwd=ROOT, check=True, capture_output=True)
    # and the concepts of the last stage over them
    command = [sys.executable, "-m", "hookviz", "concepts", str(photos), "--layer", "bn2"]
    command += ["--k", "4", "--model", "efficientnet_lite0", "--quiet"]
    command += ["--out", str(run.parent / "concepts")]
    subprocess.run(command, cwd=ROOT, check=True, capture_output=True)
    return run


if __name__ == "__main__":
    main()
