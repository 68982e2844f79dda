"""The class explained, in a real browser: the top-5 radio and the class box show one class;
a top-5 class is drawn by the browser at once with its texts, a class picked in the box is the
server's to draw and redraws only what the class changes; the class box follows each image
and each weights; a class change on another page reruns that page, and on Explore carries
through to the pictures, the downloads and the address. (The top-5's order after a new image is
``test_page_state.py``'s, at the server.) Shared fixtures and helpers: ``browser_page.py``."""

from __future__ import annotations

import numpy as np
from PIL import Image

import hookviz

from .browser_page import (
    CLASS_SPY,
    SLOW,
    TEXT_SPY,
    TITLE_IS,
    assert_images_loaded,
    bars,
    browser_fixture,  # noqa: F401  (a fixture: browser)
    close_session,
    draw_counts,
    drawn,
    drawn_before_the_reply,
    encoded,
    image_sources,
    main_text,
    navigate,
    open_box,
    open_page_fixture,  # noqa: F401  (a fixture: open_page)
    open_session,
    options,
    overlay_class,
    pick,
    press,
    server_fixture,  # noqa: F401  (a fixture: server)
    set_untrained,
    shot,
    timed_change,
    top_five,
    upload,
    wait_for_new_overlay,
    wait_for_query,
    wait_for_results,
    wait_for_text,
    wait_idle,
)


def test_class_picker_follows_the_image_and_the_weights(open_page):
    page = open_page()
    upload(page, "gradient.png", encoded((400, 300), "PNG"), "image/png")
    wait_for_text(page, "400×300 px")
    wait_idle(page)
    box = page.get_by_role("combobox", name="Explain the class")
    top = overlay_class(page)
    assert top != "military uniform"  # the sample's class: the upload changed the prediction
    assert box.input_value().startswith(f"Top-1: {top} ("), box.input_value()
    assert bars(page)[0][1] == top

    set_untrained(page)
    shown_bars = bars(page)
    assert [rank for rank, _, _ in shown_bars] == [1, 2, 3, 4, 5]
    assert box.input_value().startswith(f"Top-1: {shown_bars[0][1]} ("), box.input_value()
    listed = options(page, "Explain the class")
    second = [o for o in listed if o.startswith("#2 ")]
    assert second == [second[0]], second  # one "#2" option, and it is the second bar's
    assert second[0].startswith(f"#2 {shown_bars[1][1]} ("), (second, shown_bars)
    page.get_by_text("Top-5 predictions").first.scroll_into_view_if_needed()
    shot(page, "22-class-picker-untrained")


def test_the_top_five_radio_and_the_class_box_show_one_class(open_page, lite0):
    """One click on the top-5 radio explains that class; the class box follows it; a class
    picked in the box lights no radio button; Top-1 again brings both back (each a fragment
    run: a stale label in either would be defect 3 again)."""
    sample = hookviz.sample_image()
    third = hookviz.predict(lite0, sample)[2]
    page = open_page()
    box = page.get_by_role("combobox", name="Explain the class")
    radio = top_five(page)
    assert radio.get_by_role("radio").count() == 5
    radio.get_by_text(f"#3 {third.name} (").click()
    wait_for_text(page, f"Grad-CAM: “{third.name}”")
    wait_idle(page)
    wait_for_query(page, f"target={third.index}")
    page.wait_for_function(
        "(want) => document.querySelector('input[aria-label^=\"Explain the class\"]')"
        "  ?.value.startsWith(want)",
        arg=f"#3 {third.name} (",
        timeout=SLOW,
    )
    assert radio.get_by_role("radio", checked=True).count() == 1
    shot(page, "22b-class-from-the-top-five")

    timed_change(
        page,
        "class typed by name -> overlay",
        lambda: pick(page, "Explain the class", "goldfish"),
        1,
    )
    wait_for_text(page, "Grad-CAM: “goldfish”")
    wait_idle(page)
    assert box.input_value() == "goldfish"
    assert radio.get_by_role("radio", checked=True).count() == 0  # no top-5 class is shown

    radio.get_by_text("Top-1: ").click()
    wait_for_text(page, "Grad-CAM: “military uniform”")
    wait_idle(page)
    page.wait_for_function("() => !location.search.includes('target=')", timeout=SLOW)
    # the class box is a fragment of its own: it may follow the address a moment later
    page.wait_for_function(
        "(want) => document.querySelector('input[aria-label^=\"Explain the class\"]')"
        "  ?.value.startsWith(want)",
        arg="Top-1: military uniform (",
        timeout=SLOW,
    )
    assert_images_loaded(page)


def test_a_class_click_on_another_page_reruns_that_page(open_page, lite0):
    """The class widgets are a sidebar fragment; off Explore (no class fragments there) a
    change must rerun the whole page, not only the widgets."""
    second = hookviz.predict(lite0, hookviz.sample_image())[1]
    page = open_page()
    navigate(page, "Beyond one heatmap")
    wait_for_text(page, "all from the same forward pass")
    page.get_by_text("Against / contrast", exact=True).click()
    wait_for_text(page, "Evidence against “military uniform”")
    wait_idle(page)
    top_five(page).get_by_text(f"#2 {second.name} (").click()
    wait_for_text(page, f"Evidence against “{second.name}”")
    wait_idle(page)
    pick(page, "Explain the class", "goldfish")
    wait_for_text(page, "Evidence against “goldfish”")
    wait_for_query(page, "target=1")


def test_a_class_change_carries_through_to_the_pictures_and_the_downloads(open_page, lite0):
    """A class picked in the sidebar reruns only Explore's results: the pictures fed by the
    display options afterwards, the downloads and the address must all be of the new class,
    not of the class the page was first drawn with."""
    sample = hookviz.sample_image()
    second = hookviz.predict(lite0, sample)[1]
    expected = hookviz.grad_cam(lite0, sample, "bn2", target=second.index).heatmap
    page = open_page()
    timed_change(
        page, "class from top-5 -> overlay", lambda: pick(page, "Explain the class", "#2 "), 1
    )
    wait_for_text(page, f"Grad-CAM: “{second.name}”")
    wait_idle(page)
    wait_for_query(page, f"target={second.index}")
    assert bars(page)[1][1:] == (second.name, second.index)  # the top-5 stays
    before = image_sources(page)
    press(page, "Heatmap opacity", "ArrowRight")  # a display change after the class change
    wait_for_new_overlay(page, before[1])
    wait_for_query(page, "alpha=0.55")  # the server has it (the browser drew it first)
    assert f"Grad-CAM for “{second.name}” at bn2 · class {second.index}" in main_text(page)
    with page.expect_download(timeout=30_000) as heatmap_download:
        page.get_by_role("button", name="Download heatmap (.npy)").click()
    with page.expect_download(timeout=30_000) as overlay_download:
        page.get_by_role("button", name="Download overlay (PNG)").click()
    heatmap = np.load(heatmap_download.value.path())
    np.testing.assert_allclose(heatmap, expected, atol=1e-5)
    overlay = np.asarray(Image.open(overlay_download.value.path()), np.int16)
    rendered = np.asarray(hookviz.render.overlay(sample, expected, alpha=0.55), np.int16)
    assert np.abs(overlay - rendered).max() <= 1, "the overlay download is not of the new class"
    # the address names the new class: a reload shows it again
    page.reload()
    wait_for_results(page)
    wait_for_text(page, f"Grad-CAM: “{second.name}”")
    shot(page, "22b-class-change-then-display-change")


def _assert_drawn_as_render(page, kept, display, target: int) -> None:
    """The overlay (picture 0) and the raw heatmap (picture 3) on screen are
    ``hookviz.render``'s pictures of class ``target`` at display size, pixel for pixel."""
    heat = kept.analysis(target).cam.heatmap_at((display.height, display.width))
    overlay = hookviz.render.overlay(display, heat, alpha=0.5, cmap="inferno")
    assert np.array_equal(drawn(page, 0), np.asarray(overlay)), target
    assert np.array_equal(drawn(page, 3), hookviz.render.colorize(heat, "inferno")), target


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
    page, requests = open_session(browser, server, init_script=CLASS_SPY)
    box = page.get_by_role("combobox", name="Explain the class")

    def expect(target: int) -> None:
        _assert_drawn_as_render(page, kept, display, target)

    def click(rank: int) -> None:
        label = "Top-1: " if rank == 1 else f"#{rank} {top[rank - 1].name} ("
        top_five(page).get_by_text(label).first.click()

    for rank in (2, 4, 1, 3, 2):
        chosen = top[rank - 1]
        page.evaluate("window.__hvSaid = []; window.__hvBoxAtDraw = []")
        before = draw_counts(page)
        click(rank)
        page.wait_for_function(TITLE_IS, arg=f"Grad-CAM: “{chosen.name}”", timeout=SLOW)
        assert drawn_before_the_reply(page), f"#{rank}: the pictures waited for the server"
        counts = draw_counts(page)
        assert counts[1] == before[1], "the grid was drawn again for a class"
        said = page.evaluate("window.__hvSaid")
        assert {index for _, index, _, _, _ in said} == {0, 2}, said
        for _, index, _, text, _ in said:
            if index == 0:  # the overlay's texts, the moment it was drawn
                assert f"Grad-CAM: “{chosen.name}”" in text
                assert f"Grad-CAM for “{chosen.name}” at bn2 · class {chosen.index}" in text
        at_draw = page.evaluate("window.__hvBoxAtDraw")
        assert all(at_draw), "the class box still named the last class"
        # the server's run: the box names the class, no longer faded; nothing drawn again
        wait_idle(page)
        if rank == 1:
            page.wait_for_function("() => !location.search.includes('target=')", timeout=SLOW)
        else:
            wait_for_query(page, f"target={chosen.index}")
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
        assert draw_counts(page) == counts, f"#{rank}: the server's run drew the pictures again"
        expect(chosen.index)
        assert f"Grad-CAM for “{chosen.name}” at bn2" in main_text(page)
    assert box.input_value().startswith(f"#2 {top[1].name} (")
    # from the keyboard: the arrow keys move the radio's choice, and the pictures follow
    top_five(page).get_by_role("radio", checked=True).focus()
    page.keyboard.press("ArrowDown")
    page.wait_for_function(TITLE_IS, arg=f"Grad-CAM: “{top[2].name}”", timeout=SLOW)
    assert drawn_before_the_reply(page), "a choice from the keyboard waited for the server"
    wait_for_query(page, f"target={top[2].index}")
    wait_idle(page)
    expect(top[2].index)
    page.keyboard.press("ArrowUp")  # back to #2
    page.wait_for_function(TITLE_IS, arg=f"Grad-CAM: “{top[1].name}”", timeout=SLOW)
    wait_for_query(page, f"target={top[1].index}")
    wait_idle(page)

    # the grid ordered by the class's channel weights: it changes with the class, so the
    # pictures wait for the server's run, which draws all three
    page.locator("[data-testid=stSidebar]").get_by_text("CAM weight α", exact=True).click()
    wait_for_query(page, "order=weight")
    wait_idle(page)
    click(3)
    page.wait_for_function(TITLE_IS, arg=f"Grad-CAM: “{top[2].name}”", timeout=SLOW)
    assert not drawn_before_the_reply(page), "drawn beside a grid of the last class's weights"
    wait_idle(page)
    expect(top[2].index)
    page.locator("[data-testid=stSidebar]").get_by_text("mean activation", exact=True).click()
    wait_for_query(page, f"target={top[2].index}")
    page.wait_for_function("() => !location.search.includes('order=')", timeout=SLOW)
    wait_idle(page)

    # a panel open beside the pictures (the snippet names the class): the server's run first
    page.locator("[data-testid='stMain'] summary").filter(has_text="Reproduce in Python").click()
    wait_for_text(page, f"target={top[2].index}")
    wait_idle(page)
    click(2)
    page.wait_for_function(TITLE_IS, arg=f"Grad-CAM: “{top[1].name}”", timeout=SLOW)
    assert not drawn_before_the_reply(page), "drawn beside an open panel of the last class"
    wait_for_text(page, f"target={top[1].index}")
    wait_idle(page)
    expect(top[1].index)
    shot(page, "22d-top-five-class-drawn-in-the-browser")
    close_session(page, requests)


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
    page, requests = open_session(browser, server, init_script=TEXT_SPY)
    box = page.get_by_role("combobox", name="Explain the class")

    def expect(target: int) -> None:
        _assert_drawn_as_render(page, kept, display, target)

    # a top-5 class first: the radio names it when the box is used next
    top_five(page).get_by_text(f"#2 {top[1].name} (").first.click()
    page.wait_for_function(TITLE_IS, arg=f"Grad-CAM: “{top[1].name}”", timeout=SLOW)
    wait_for_query(page, f"target={top[1].index}")
    wait_idle(page)
    for typed, name, index in (("goldfi", "goldfish", 1), ("jay", "jay", 17)):
        before = draw_counts(page)
        open_box(page, "Explain the class")
        page.keyboard.type(typed)
        page.evaluate("window.__hvSaid = []")
        page.get_by_role("option", name=name, exact=True).first.click()
        page.wait_for_function(TITLE_IS, arg=f"Grad-CAM: “{name}”", timeout=SLOW)
        wait_for_query(page, f"target={index}")
        wait_idle(page)
        counts = draw_counts(page)
        assert counts[1] == before[1], "the grid was drawn again for a class"
        assert counts[0] > before[0] and counts[2] > before[2], "a picture was not redrawn"
        said = page.evaluate("window.__hvSaid")
        # every draw after the pick was of the class picked (never the radio's last class)
        overlays = [text for _, i, _, text, _ in said if i == 0]
        assert overlays and all(f"Grad-CAM: “{name}”" in text for text in overlays), overlays
        assert box.input_value() == name
        assert top_five(page).get_by_role("radio", checked=True).count() == 0
        expect(index)
    # back to a top-5 class from the radio: drawn at once again
    top_five(page).get_by_text("Top-1: ").first.click()
    page.wait_for_function(TITLE_IS, arg=f"Grad-CAM: “{top[0].name}”", timeout=SLOW)
    assert drawn_before_the_reply(page), "the top-5 waited for the server after the box"
    wait_idle(page)
    page.wait_for_function("() => !location.search.includes('target=')", timeout=SLOW)
    expect(top[0].index)
    shot(page, "22e-class-picked-in-the-box")
    close_session(page, requests)
