"""How fast the page reacts, as ratios to a minimal Streamlit page measured in the same browser
run (``bench/reference_page.py``: one slider, one 600x512 PNG).

Each figure is the time from a control change (the input event: the key press on a slider,
the press on a select box's option) to the changed picture loaded and decoded, taken in the
page's own clock (Playwright in Debian's Chromium, the flags of the browser tests), the median
of several rounds, on the sample photo and on a 37-megapixel JPEG. The reference is measured
before and after hookviz's controls, and the ratios use the median of both. First paint: a
fresh browser tab on a warm server, the median of five (shell, sidebar and original image; the
whole default page), and ``streamlit run`` cold to the whole default page (a new server
process each time, ``--colds`` of them in a row: the first after heavy disk work pays for the
page cache).

    python bench/page_speed.py [--rounds 10] [--colds 3] [--out bench/page_speed.json] [--quick]

``--quick`` measures the reference and the sample photo only (no cold start, no 37 MP photo):
a two-minute check while working on the page.

Nothing here is asserted: the machines are shared and noisy; BENCHMARKS.md reports one run.
"""

from __future__ import annotations

import argparse
import io
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np
from PIL import Image

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from playwright.sync_api import Page, sync_playwright  # noqa: E402

from scripts.appserver import CHROMIUM_FLAGS, chromium_path, free_port, running_app  # noqa: E402
from scripts.page_pictures import PICTURES, helpers  # noqa: E402

SLOW = 300_000
CAMS = ("viridis", "inferno")
GRIDS = ("magma", "viridis")
# picture indices on the Explore page
ORIGINAL, OVERLAY, COLORBAR, GRID, HEATMAP = range(5)
# Classes outside the sample's top-5 that typing their name narrows the class box to a few
# matches: a fresh one for each pick (a class seen before would be found in the caches)
BOX_CLASSES = (
    "goldfish",
    "tench",
    "ostrich",
    "magpie",
    "chickadee",
    "bulbul",
    "junco",
    "kite",
    "vulture",
    "peacock",
    "quail",
    "partridge",
)
RANKS = ("#2", "#3", "#4", "#5")  # the top-5 clicks from the top-1, in turn


def open_box(page: Page, name: str) -> None:
    """Open a select box as a user would: scrolled into view first (a box clicked at the
    window's bottom edge, scrolled there by the click itself, opens its list and closes it
    again at once)."""
    box = page.get_by_role("combobox", name=name)
    box.evaluate("e => e.scrollIntoView({block: 'center'})")
    box.click()


def big_photo(megapixels: float = 37.0) -> bytes:
    """The sample photo enlarged to about 37 megapixels with fine noise (so the JPEG is as
    large as a camera's: about 15 MB)."""
    import hookviz

    sample = hookviz.sample_image()
    scale = (megapixels * 1e6 / (sample.width * sample.height)) ** 0.5
    size = (round(sample.width * scale), round(sample.height * scale))
    pixels = np.asarray(sample.resize(size, Image.Resampling.BILINEAR), dtype=np.int16)
    noise = np.random.default_rng(0).integers(-12, 13, pixels.shape[:2], dtype=np.int16)
    pixels = np.clip(pixels + noise[..., None], 0, 255).astype(np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="JPEG", quality=92)
    return buffer.getvalue()


def idle(page: Page) -> None:
    page.wait_for_function(
        "() => !document.querySelector('[data-stale=\"true\"]')"
        " && !document.querySelector('[data-testid=\"stSpinner\"]')",
        timeout=SLOW,
    )


def sources(page: Page) -> list[str]:
    """Each picture's version (an image's source, a drawn picture's draw count)."""
    return page.evaluate(f"() => {{ {helpers()} return pictures().map(version); }}")


# Timing happens in the page's own clock: from the user's input event (the key press or the
# pointer press on the option) to the load of the changed picture (an image's load event, or a
# drawn picture's "hookviz:drawn" event: its pixels are then in place, as an image's are at
# load, both on screen at the next frame). Timing in Python instead adds
# Playwright's own work (its actionability checks, the round trips to the browser), which is
# not the page's and was up to half of the reference's figure.
CLOCK = """
window.__hvInput = 0;
window.__hvLoads = [];
for (const type of ['pointerdown', 'keydown']) {
  window.addEventListener(type, () => { window.__hvInput = performance.now(); }, true);
}
document.addEventListener('load', (event) => {
  if (event.target.tagName === 'IMG') window.__hvLoads.push([event.target.src, performance.now()]);
}, true);
document.addEventListener('hookviz:drawn', (event) => {
  window.__hvLoads.push([event.target.id + ':' + event.target.dataset.drawn, performance.now()]);
}, true);
"""


def new_page(browser) -> Page:
    """A browser tab at the laptop size, with the page-side clock installed."""
    page = browser.new_page(viewport={"width": 1366, "height": 900})
    page.add_init_script(CLOCK)
    return page


def timed(page: Page, action, index: int, prepare=None, whole: list | None = None) -> float:
    """Seconds from the input event of ``action`` to image ``index`` showing a new, decoded
    picture, in the page's clock. ``prepare`` runs first, untimed (opening a select box and
    typing: the user's part, not the page's). ``whole``: where to add the seconds until the
    whole page is current (the server's run over and drawn: nothing left stale), checked at
    each animation frame."""
    if prepare is not None:
        prepare()
    before = sources(page)[index]
    page.evaluate("window.__hvLoads = []")
    action()
    page.wait_for_function(
        f"([index, before]) => {{ {helpers()} const all = pictures();"
        "  return all.length > index && version(all[index]) !== before && ready(all[index]); }",
        arg=[index, before],
        timeout=SLOW,
    )
    elapsed = page.evaluate(
        f"(index) => {{ {helpers()} const now = version(pictures()[index]);"
        "  const load = window.__hvLoads.find(([s, t]) => s === now && t >= window.__hvInput);"
        "  return ((load ? load[1] : performance.now()) - window.__hvInput) / 1000; }",
        index,
    )
    if whole is not None:
        page.wait_for_function(
            "() => !document.querySelector('[data-stale=\"true\"]')"
            " && !document.querySelector('[data-hv-stale=\"true\"]')"
            " && (window.__hvIdle = performance.now())",
            polling="raf",
            timeout=SLOW,
        )
        whole.append(page.evaluate("(window.__hvIdle - window.__hvInput) / 1000"))
    idle(page)
    return elapsed


def timed_choice(
    page: Page,
    box: str,
    option: str,
    index: int,
    exact: bool = True,
    whole: list | None = None,
    reading: float = 0.0,
) -> float:
    """A select-box change, timed from the click on the option (after ``reading`` seconds with
    the list open, and the page's run meanwhile over)."""

    def prepare() -> None:
        open_box(page, box)
        if exact:
            page.keyboard.type(option)
        page.get_by_role("option", name=option, exact=exact).first.wait_for()
        if reading:
            page.wait_for_timeout(reading * 1000)
            idle(page)

    return timed(
        page,
        lambda: page.get_by_role("option", name=option, exact=exact).first.click(),
        index,
        prepare,
        whole,
    )


def timed_radio(page: Page, labels: tuple[str, str], index: int) -> float:
    """A radio change in the sidebar (to whichever of two options is not checked), timed from
    the press on it."""
    sidebar = page.locator("[data-testid='stSidebar']")
    checked = sidebar.get_by_role("radio", name=labels[0], exact=True).is_checked()
    option = sidebar.get_by_text(labels[1] if checked else labels[0], exact=True)
    return timed(page, option.click, index)


def timed_top_class(page: Page, rank: str, whole: list | None = None) -> float:
    """A class change as a user makes it from the top-5: one click on the sidebar's top-5
    radio, on ``rank`` ("#2" ... "#5", "Top-1"), timed from the press on it."""
    top = page.locator("[data-testid='stSidebar'] [role='radiogroup']").filter(
        has=page.get_by_text("Top-1:")
    )
    return timed(page, top.get_by_text(rank).first.click, OVERLAY, whole=whole)


def timed_box_class(page: Page, index: int, whole: list | None = None) -> float:
    """A class outside the top-5 picked in the class box (a fresh one each time), timed from
    the press on the option (typing its name to find it is the user's part): a server run of
    the pictures the class changes."""
    name = BOX_CLASSES[index % len(BOX_CLASSES)]
    return timed_choice(page, "Explain the class", name, OVERLAY, whole=whole)


def slider_step(page: Page, label: str, key: str) -> None:
    slider = page.get_by_role("slider", name=label)
    slider.focus()
    page.keyboard.press(key)


def choose(page: Page, box: str, option: str) -> None:
    open_box(page, box)
    page.keyboard.type(option)
    page.get_by_role("option", name=option, exact=True).click()


def other(page: Page, box: str, options: tuple[str, str]) -> str:
    """Whichever of two options is not the current one (so the picture must change)."""
    current = page.get_by_role("combobox", name=box).input_value()
    return options[1] if current == options[0] else options[0]


def layer_label(name: str, size: tuple[int, int]) -> str:
    import hookviz

    loaded = hookviz.load_model("efficientnet_lite0", device="cpu")
    table = hookviz.layer_table(loaded)
    channels, height, width = hookviz.core.layers.layer_shapes(loaded, *size)[name]
    return f"{name} · {channels}×{height}×{width}" + ("  ★" if name == table.default else "")


def reference(browser, rounds: int) -> list[float]:
    with running_app(free_port(), timeout=120, script=ROOT / "bench" / "reference_page.py") as url:
        page = new_page(browser)
        page.goto(url)
        page.locator(PICTURES).first.wait_for(timeout=SLOW)
        idle(page)
        times = []
        for index in range(rounds * 2):
            key = "ArrowRight" if index % 2 == 0 else "ArrowLeft"
            times.append(timed(page, lambda k=key: slider_step(page, "Brightness", k), 0))
        page.close()
    return times


def controls(page: Page, rounds: int, size: tuple[int, int]) -> dict[str, float]:
    """Median seconds per control on the page as it is (sample or uploaded photo)."""
    results: dict[str, list[float]] = {}

    def add(name: str, seconds: float) -> None:
        results.setdefault(name, []).append(seconds)

    low, high = layer_label("blocks.4", size), layer_label("bn2", size)
    choose(page, "Target layer", low)  # see both layers once
    idle(page)
    choose(page, "Target layer", high)
    idle(page)
    for index in range(rounds):
        key = "ArrowRight" if index % 2 == 0 else "ArrowLeft"
        add(
            "heatmap opacity",
            timed(page, lambda k=key: slider_step(page, "Heatmap opacity", k), OVERLAY),
        )
        box = "Heatmap colormap"
        add("heatmap colormap", timed_choice(page, box, other(page, box, CAMS), OVERLAY))
        box = "Feature-map colormap"
        add("feature-map colormap", timed_choice(page, box, other(page, box, GRIDS), GRID))
        add(
            "channels shown",
            timed(page, lambda k=key: slider_step(page, "Channels shown", k), GRID),
        )
        add("channel order", timed_radio(page, ("mean activation", "max activation"), GRID))
        add("colour scale", timed_radio(page, ("per channel", "shared"), GRID))
        # the pictures (drawn by the browser from the ones it kept), and the whole page (the
        # server's run: the sidebar's caption, the downloads, the texts outside the pictures),
        # under the top-1 class, which both layers were seen with
        for layer in (low, high):
            whole: list[float] = []
            add("layer seen before", timed_choice(page, "Target layer", layer, GRID, whole=whole))
            add("layer seen before: whole page current", whole[0])
        # the top-5's pictures came with the page: drawn by the browser; the whole page when
        # the server's run has redrawn the class box (faded until then) and the downloads'
        # class. A class outside the top-5 picked in the box is the server's run. Then back to
        # the top-1 from the top-5 (the layers above are toggled under it).
        for name, change in (
            ("class from the top-5", lambda w, i=index: timed_top_class(page, RANKS[i % 4], w)),
            (
                "class from the box, outside the top-5",
                lambda w, i=index: timed_box_class(page, i, w),
            ),
            ("class from the top-5", lambda w: timed_top_class(page, "Top-1", w)),
        ):
            whole: list[float] = []
            add(name, change(whole))
            add(f"{name}: whole page current", whole[0])
    return {name: statistics.median(values) for name, values in results.items()}


# The first paint in the page's clock (from the navigation's start): the first moment the
# sidebar names the layer box and the first picture (the original) is decoded, checked when a
# picture loads or draws (and at each frame after that until the sidebar has it).
SHELL_CLOCK = f"""
window.__hvShell = null;
const hvCheckShell = () => {{
  {helpers()}
  if (window.__hvShell !== null) return;
  const first = pictures()[0];
  if (!first || !ready(first)) return;
  const side = document.querySelector('[data-testid="stSidebar"]');
  if (side && side.textContent.includes('Target layer')) window.__hvShell = performance.now();
  else requestAnimationFrame(hvCheckShell);
}};
document.addEventListener('load', hvCheckShell, true);
document.addEventListener('hookviz:drawn', hvCheckShell, true);
"""


def first_paint_warm(browser, url: str, tabs: int = 5) -> dict[str, object]:
    """The first paint of ``tabs`` new tabs on a warm server, one after the other, each in a
    context of its own (a new visitor: nothing cached in the browser): the median of each
    figure, and each tab's (one tab is one sample of a noisy figure)."""
    each = [_first_paint_tab(browser, url) for _ in range(tabs)]
    report: dict[str, object] = {}
    for name in each[0]:
        report[name] = statistics.median(tab[name] for tab in each)
        report[f"{name}, each tab"] = [tab[name] for tab in each]
    return report


def _first_paint_tab(browser, url: str) -> dict[str, float]:
    page = browser.new_page(viewport={"width": 1366, "height": 900})
    page.add_init_script(SHELL_CLOCK)
    started = time.perf_counter()
    page.goto(url)
    page.locator("[data-testid='stSidebar']").get_by_text("Target layer").wait_for(timeout=SLOW)
    page.locator(PICTURES).first.wait_for(timeout=SLOW)
    page.wait_for_function(
        f"() => {{ {helpers()} const first = pictures()[0]; return !!first && ready(first); }}",
        timeout=SLOW,
    )
    shell = time.perf_counter() - started
    page.wait_for_function("() => window.__hvShell !== null", timeout=SLOW)
    in_page = page.evaluate("window.__hvShell / 1000")
    wait_whole_page(page)
    whole = time.perf_counter() - started
    page.close()
    return {
        "shell, sidebar and original (warm server)": shell,
        "shell, sidebar and original (warm server, page clock)": in_page,
        "whole page (warm server)": whole,
    }


def wait_whole_page(page: Page) -> None:
    page.get_by_role("button", name="Download feature maps (PNG)").wait_for(timeout=SLOW)
    page.wait_for_function(
        f"() => {{ {helpers()} const all = pictures();"
        " return all.length === 5 && all.every(ready); }",
        timeout=SLOW,
    )


def cold_start(browser) -> float:
    started = time.perf_counter()
    with running_app(free_port(), timeout=120) as url:
        page = browser.new_page(viewport={"width": 1366, "height": 900})
        page.goto(url)
        wait_whole_page(page)
        elapsed = time.perf_counter() - started
        page.close()
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--colds", type=int, default=3, help="cold starts, one after another")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "page_speed.json")
    parser.add_argument("--quick", action="store_true", help="the reference and the sample only")
    args = parser.parse_args()
    photo = big_photo()
    report: dict[str, object] = {}
    measured: dict[str, dict[str, float]] = {}
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_FLAGS)
        if not args.quick:
            colds = [cold_start(browser) for _ in range(max(args.colds, 1))]
            report["cold starts: streamlit run -> whole default page (s)"] = colds
            report["cold start: streamlit run -> whole default page, median (s)"] = (
                statistics.median(colds)
            )
        # the reference before and after hookviz's controls: a drift of the machine's speed
        # during the run then weighs on both sides of each ratio alike
        base_times = reference(browser, args.rounds)
        with running_app(free_port(), timeout=120) as url:
            page = new_page(browser)
            page.goto(url)
            wait_whole_page(page)
            idle(page)
            report.update({f"{k} (s)": v for k, v in first_paint_warm(browser, url).items()})
            measured["sample photo"] = controls(page, args.rounds, (262, 224))
            if not args.quick:
                started = time.perf_counter()
                page.locator("[data-testid='stFileUploaderDropzoneInput']").set_input_files(
                    files=[{"name": "big.jpg", "mimeType": "image/jpeg", "buffer": photo}]
                )
                page.locator("[data-testid='stMain']").get_by_text("big.jpg").first.wait_for(
                    timeout=SLOW
                )
                wait_whole_page(page)
                idle(page)
                report["37 MP upload -> whole page (s)"] = time.perf_counter() - started
                width, height = Image.open(io.BytesIO(photo)).size
                import hookviz

                prep = hookviz.load_model("efficientnet_lite0", device="cpu").preprocessing
                name = f"{width}x{height} JPEG, {len(photo) / 1e6:.1f} MB"
                measured[name] = controls(page, args.rounds, prep.input_size(width, height))
            page.close()
        base_times += reference(browser, args.rounds)
        browser.close()
    base = statistics.median(base_times)
    report["reference: minimal page, slider step -> new PNG decoded (s)"] = base
    for name, figures in measured.items():
        report[f"{name} (s)"] = figures
        report[f"{name} (x reference)"] = {k: v / base for k, v in figures.items()}
        print(f"{name}:", json.dumps({k: round(v / base, 2) for k, v in figures.items()}))
    if not args.quick:
        args.out.write_text(json.dumps(report, indent=2))
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
