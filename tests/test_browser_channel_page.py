"""The "What a channel looks for" page in a real browser, the way a new user meets it: the
first visit (controls, estimates, the filter check), making a picture then changing channel
and coming back, a long picture stopped by a control change or Cancel, Explore's overlaid
channel opening this page, a phone-width window.

Screenshots are ``channel-*.png``; the measured times join the other browser tests'
(``timings.json``). The one picture let finish uses 32 steps (about 4 s on 2 idle CPU cores at
the default layer; much longer when other work shares the cores). The whole file takes about
40 s on 2 idle cores. Shared fixtures and helpers: ``browser_page.py``.
"""

from __future__ import annotations

import re
import time
from typing import TYPE_CHECKING

from playwright.sync_api import expect

from .browser_page import (
    SLOW,
    TIMINGS,
    assert_images_loaded,
    browser_fixture,  # noqa: F401  (a fixture: browser)
    choose,
    close_session,
    main_text,
    open_session,
    server_fixture,  # noqa: F401  (a fixture: server)
    shot,
    wait_for_query,
    wait_for_text,
    wait_idle,
)

if TYPE_CHECKING:
    from playwright.sync_api import Locator, Page

MAKING = 300_000  # ms: 32 steps take about 4 s alone on 2 cores, minutes on a busy machine
SOON = 20_000  # ms: what "at once" / "within a few seconds" may take on 2 busy CPU cores
# "Make it (32 steps, about 21 s)" / "(128 steps, about 1.4 min)"
MAKE_LABEL = re.compile(r"^Make it \((\d+) steps, about (\d+(?:\.\d+)?) (s|min)\)$")
# "... = 10.9712, plus the bias 0.0000: **10.9712** = 10.9712, what `conv_head` computed at"
FILTER_LINE = re.compile(
    r"plus the bias (-?\d+\.\d+): (-?\d+\.\d+) (=|≠) (-?\d+\.\d+), what (\S+) computed at "
    r"\((\d+), (\d+)\)"
)


def _open(browser, url: str, *, width: int = 1280, height: int = 800):
    """A new session at ``url`` (not waiting for Explore's results), its requests recorded."""
    return open_session(browser, url, width=width, height=height, wait=False)


# ---------------------------------------------------------------- helpers


def _make(page: Page, what: str = "channel") -> Locator:
    """The Make-it button of the channel's (``make@channel``) or the class's visualization."""
    # not the disabled "Making it" (or "once the other picture is made") under the same key
    return page.locator(f".st-key-make-{what} button:not([disabled])").filter(
        has_text=re.compile(r"^Make it \(")
    )


def _live_make_buttons(page: Page, what: str = "channel", stale_too: bool = False) -> int:
    """Clickable Make-it buttons drawn by the current run (with ``stale_too``, also those left
    faded from the previous run, which a click would still press). While a picture is made
    the button is a disabled "Making it" under the same key: not counted."""
    script = (
        "([what, staleToo]) => [...document.querySelectorAll(`.st-key-make-${what} button`)]"
        "  .filter(b => !b.disabled && b.innerText.startsWith('Make it'))"
        "  .filter(b => staleToo || !b.closest('[data-stale=true]')).length"
    )
    return page.evaluate(script, [what, stale_too])


def _progress(page: Page) -> Locator:
    return page.locator("[data-testid='stProgress']").filter(has_text="Step ")


def _wait_for_page(page: Page) -> None:
    """The channel page drawn to the end: both Make-it buttons (their estimates timed) or the
    pictures made before, and the run over."""
    page.get_by_text("How this channel computes").wait_for(timeout=SLOW)
    page.wait_for_function(
        "() => [['channel', 'Mean activation on it:'], ['class', 'Class score on it:']].every("
        "  ([what, made]) => document.querySelector(`.st-key-make-${what} button`)"
        "    || document.body.innerText.includes(made))",
        timeout=SLOW,
    )
    wait_idle(page)


def _steady(page: Page, locator: Locator) -> None:
    """Wait until ``locator`` stops moving: charts draw after a run ends, and push what is
    below them down (a click at the old place would miss)."""
    last = None
    for _ in range(50):
        box = locator.bounding_box()
        if box is not None and box == last:
            return
        last = box
        page.wait_for_timeout(250)
    raise AssertionError(f"{locator} kept moving: {last}")


def _channel_input(page: Page) -> Locator:
    return page.get_by_role("spinbutton", name=re.compile(r"^Channel of "))


def _type_number(page: Page, box: Locator, value: int) -> None:
    """Type a number into a number input and press Enter, as a user would."""
    box.click()
    box.fill(str(value))
    box.press("Enter")


def _estimate_seconds(label: str) -> tuple[int, float]:
    """(steps, seconds) from a Make-it button's label."""
    found = MAKE_LABEL.match(label.strip())
    assert found, f"a Make-it button without its estimate: {label!r}"
    value = float(found[2]) * (60 if found[3] == "min" else 1)
    return int(found[1]), value


# ---------------------------------------------------------------- flows


def test_first_visit_shows_the_controls_estimates_and_the_filter_check(browser, server):
    started = time.perf_counter()
    page, requests = _open(browser, server + "/channel")
    _wait_for_page(page)
    TIMINGS["open /channel (model, analysis, two estimates)"] = round(
        time.perf_counter() - started, 3
    )
    page.get_by_role("heading", name="What a channel looks for").wait_for(timeout=5_000)
    channel_box = _channel_input(page)
    label = channel_box.get_attribute("aria-label")
    top = int(re.search(r"\(0 to (\d+)\)", label)[1])
    channel = channel_box.input_value()
    assert channel.isdigit() and 0 <= int(channel) <= top, (label, channel)
    assert f"What excites channel {channel}" in main_text(page)
    assert f"vis_channel={channel}" in page.url
    assert page.get_by_role("combobox", name="Steps").input_value() == "128"
    assert page.get_by_role("spinbutton", name="Seed").input_value() == "0"
    for what in ("channel", "class"):
        steps, seconds = _estimate_seconds(_make(page, what).inner_text())
        assert steps == 128 and seconds > 0
        TIMINGS[f"estimate shown for the {what} at 128 steps (s)"] = seconds
    assert page.get_by_role("button", name="Cancel").count() == 0
    assert _progress(page).count() == 0

    # how the channel computes: the map with the picked cell, the arithmetic checked
    page.get_by_role("slider", name="Row on the map").wait_for(timeout=5_000)
    page.get_by_role("slider", name="Column on the map").wait_for(timeout=5_000)
    assert re.search(rf"Channel {channel}: \(\d+, \d+\) marked", main_text(page))
    line = FILTER_LINE.search(main_text(page))
    assert line, "no 'Σ patch × kernel ... = v = r' line"
    _bias, value, check, reference, _conv, _y, _x = line.groups()
    assert check == "=", f"the arithmetic does not match the network: {line[0]}"
    assert abs(float(value) - float(reference)) < 1e-3, line[0]
    assert_images_loaded(page, None)
    shot(page, "channel-01-laptop")
    shot(page, "channel-01-laptop-filter", at="How this channel computes")
    close_session(page, requests)


def test_make_a_picture_then_change_channel_and_come_back(browser, server):
    page, requests = _open(browser, server + "/channel")
    _wait_for_page(page)
    first = int(_channel_input(page).input_value())
    choose(page, "Steps", "32")
    page.get_by_role("button", name=re.compile(r"^Make it \(32 steps")).first.wait_for(timeout=SLOW)
    wait_idle(page)
    steps, estimate = _estimate_seconds(_make(page).inner_text())
    assert steps == 32
    assert "vis_steps=32" in page.url

    started = time.perf_counter()
    _make(page).click()
    _progress(page).first.wait_for(timeout=SOON)  # "Step i of 32 · ..."
    assert page.locator(".st-key-cancel-channel button").is_visible()
    # the button became a disabled "Making it": no copy of it (not even a faded one left from
    # the previous run) that a click would press to start over
    assert _live_make_buttons(page, stale_too=True) == 0
    # nor of the class's: it waits, disabled, until this one is made
    assert _live_make_buttons(page, "class", stale_too=True) == 0
    shot(page, "channel-02-making")
    page.get_by_text("Mean activation on it:").wait_for(timeout=MAKING)
    wait_idle(page)
    took = time.perf_counter() - started
    TIMINGS["make the channel's picture, 32 steps (s)"] = round(took, 3)
    TIMINGS["its estimate (s)"] = estimate
    caption = page.get_by_text("Mean activation on it:").inner_text()
    assert re.search(r"Mean activation on it: -?\d+\.\d+", caption), caption
    assert "seed 0, 32 steps" in caption, caption
    assert _make(page).count() == 0 and _progress(page).count() == 0
    assert page.locator(".st-key-cancel-channel").count() == 0
    assert page.locator("[data-testid='stVegaLiteChart']").count() >= 1  # the objective curve
    assert_images_loaded(page, None)
    # the class's button is untouched, still with its estimate
    assert _estimate_seconds(_make(page, "class").inner_text())[0] == 32
    shot(page, "channel-02-made", at=f"What excites channel {first}")

    other = first + 1 if first == 0 else first - 1
    _type_number(page, _channel_input(page), other)
    page.get_by_text(f"What excites channel {other}").wait_for(timeout=SOON)
    _make(page).wait_for(timeout=SLOW)
    wait_idle(page)
    assert "Mean activation on it:" not in main_text(page)
    assert f"vis_channel={other}" in page.url

    started = time.perf_counter()
    _type_number(page, _channel_input(page), first)
    page.get_by_text(f"What excites channel {first}").wait_for(timeout=SOON)
    page.get_by_text("Mean activation on it:").wait_for(timeout=SOON)
    TIMINGS["back to the made channel -> its picture (s)"] = round(time.perf_counter() - started, 3)
    wait_idle(page)
    assert _make(page).count() == 0
    assert _progress(page).count() == 0
    assert "seed 0, 32 steps" in page.get_by_text("Mean activation on it:").inner_text()
    assert_images_loaded(page, None)
    close_session(page, requests)


def _start(page: Page) -> None:
    """Click the channel's Make-it button and wait until the progress bar counts steps."""
    _make(page).click()
    _progress(page).first.wait_for(timeout=SOON)


def test_a_control_change_or_cancel_stops_a_long_picture(browser, server):
    page, requests = _open(browser, server + "/channel")
    _wait_for_page(page)
    choose(page, "Steps", "512")
    page.get_by_role("button", name=re.compile(r"^Make it \(512 steps")).first.wait_for(
        timeout=SLOW
    )
    wait_idle(page)
    _start(page)
    text = _progress(page).first.inner_text()
    assert re.search(r"Step \d+ of 512", text), text
    started = time.perf_counter()
    _type_number(page, page.get_by_role("spinbutton", name="Seed"), 1)
    _progress(page).first.wait_for(state="detached", timeout=SOON)
    _make(page).wait_for(timeout=SOON)
    wait_idle(page, timeout=SOON)
    TIMINGS["512 steps cancelled by a seed change -> button back (s)"] = round(
        time.perf_counter() - started, 3
    )
    assert _estimate_seconds(_make(page).inner_text())[0] == 512
    assert "Mean activation on it:" not in main_text(page)
    assert "vis_seed=1" in page.url
    assert page.locator(".st-key-cancel-channel").count() == 0
    shot(page, "channel-03-cancelled-by-seed")

    _start(page)
    started = time.perf_counter()
    page.locator(".st-key-cancel-channel button").click()
    _make(page).wait_for(timeout=SOON)
    wait_idle(page, timeout=SOON)
    TIMINGS["512 steps stopped by Cancel -> button back (s)"] = round(
        time.perf_counter() - started, 3
    )
    assert _progress(page).count() == 0
    assert _estimate_seconds(_make(page).inner_text())[0] == 512
    assert "Mean activation on it:" not in main_text(page)
    assert "Cancelled: nothing was made." in main_text(page)  # the Cancel is confirmed

    # neither stopped run left a picture behind: seed 0 offers its button again
    _type_number(page, page.get_by_role("spinbutton", name="Seed"), 0)
    page.wait_for_url(re.compile(r"^(?!.*vis_seed=)"), timeout=SOON)
    _make(page).wait_for(timeout=SOON)
    wait_idle(page, timeout=SOON)
    assert _estimate_seconds(_make(page).inner_text())[0] == 512
    assert "Mean activation on it:" not in main_text(page)
    close_session(page, requests)


def test_explore_opens_the_channel_page_at_the_overlaid_channel(browser, server):
    page, requests = _open(browser, server)
    page.get_by_role("button", name="Download feature maps (PNG)").wait_for(timeout=SLOW)
    wait_idle(page)
    page.get_by_text("Channels behind the heatmap", exact=True).click()  # an expander
    overlay = page.get_by_text("Overlay one channel on the image", exact=True)
    overlay.wait_for(timeout=SOON)
    wait_idle(page)
    # the channel-weight chart above it draws after the run and moves it down about 300 px
    page.locator("[data-testid='stExpander'] [data-testid='stVegaLiteChart']").first.wait_for(
        timeout=SOON
    )
    _steady(page, overlay)
    overlay.click()
    assert page.get_by_role("checkbox", name="Overlay one channel on the image").is_checked()
    page.get_by_role("button", name=re.compile(r"What does channel \d+ look for\?")).wait_for(
        timeout=SOON
    )
    wait_idle(page)
    strongest = page.get_by_role("combobox", name="Channel").input_value()
    chosen = "7" if strongest != "7" else "8"  # not the default: the page must be told it
    choose(page, "Channel", chosen)
    button = page.get_by_role("button", name=f"What does channel {chosen} look for?")
    button.wait_for(timeout=SOON)
    wait_idle(page)
    shot(page, "channel-04-explore-overlay", at="Channels behind the heatmap")
    _steady(page, button)  # below the channel's picture, which decodes after the run
    button.click()
    page.wait_for_url(re.compile(r"/channel(\?|$)"), timeout=SOON)
    _wait_for_page(page)
    # waited for, not read once: on a loaded machine the number box can show its first value
    # (0) for a moment after the run that set it is over
    expect(_channel_input(page)).to_have_value(chosen, timeout=SOON)
    wait_for_text(page, f"What excites channel {chosen}")
    wait_for_query(page, f"vis_channel={chosen}")
    close_session(page, requests)


def test_phone_width_renders_without_sideways_scrolling(browser, server):
    page, requests = _open(browser, server + "/channel", width=390, height=844)
    _wait_for_page(page)
    sideways = page.evaluate(
        "() => [document.scrollingElement.scrollWidth - window.innerWidth,"
        " document.querySelector('[data-testid=\"stMain\"]').scrollWidth - window.innerWidth]"
    )
    assert sideways[0] <= 1 and sideways[1] <= 1, f"the page scrolls sideways by {sideways}px"
    for what in ("channel", "class"):  # the class's button is further down
        button = _make(page, what)
        button.scroll_into_view_if_needed()
        assert button.is_visible()
        box = button.bounding_box()
        assert box and box["x"] >= 0 and box["x"] + box["width"] <= 390 + 1, (what, box)
        assert box["y"] >= 0 and box["y"] + box["height"] <= 844, (what, box)
        assert _estimate_seconds(button.inner_text())[0] == 128
    shot(page, "channel-05-phone-class-button")
    _make(page).scroll_into_view_if_needed()
    assert_images_loaded(page, None)
    shot(page, "channel-05-phone")
    shot(page, "channel-05-phone-filter", at="How this channel computes")
    shot(page, "channel-05-phone-arithmetic", at="Σ patch × kernel")
    close_session(page, requests)
