"""The target layer in a real browser: a layer change redraws the results (and "Show every
module" lists the aliases); the channels shown are kept across layers; a slider step just
after a new layer leaves one slider of that layer; a layer seen before is drawn by the browser
at once, with its texts. Shared fixtures and helpers: ``browser_page.py``."""

from __future__ import annotations

import re

import numpy as np

import hookviz

from .browser_page import (
    SLOW,
    TEXT_SPY,
    assert_images_loaded,
    browser_fixture,  # noqa: F401  (a fixture: browser)
    channels_shown,
    choose,
    close_session,
    draw_counts,
    drawn,
    drawn_before_the_reply,
    image_sources,
    layer_label,
    main_text,
    open_box,
    open_page_fixture,  # noqa: F401  (a fixture: open_page)
    open_session,
    pick,
    press,
    server_fixture,  # noqa: F401  (a fixture: server)
    shot,
    slider_value,
    timed_change,
    top_five,
    wait_for_query,
    wait_for_text,
    wait_idle,
)


def test_a_layer_change_redraws_the_results_and_every_module_lists_them_all(open_page, lite0):
    """A layer pick redraws the pictures, the headings, the caption and the channel slider's
    range (the time from the pick to the new grid is recorded); the "Show every module" switch
    lists the aliases, and switched off on an alias the page moves to the listed name; the
    address keeps both."""
    table = hookviz.layer_table(lite0)
    page = open_page()
    sidebar = page.locator("[data-testid='stSidebar']")
    before = image_sources(page)
    timed_change(
        page,
        "layer change -> grid",
        lambda: choose(page, "Target layer", layer_label("blocks.3")),
        3,
    )
    wait_for_text(page, "Feature maps of blocks.3")
    wait_idle(page)
    wait_for_query(page, "layer=blocks.3")
    after = image_sources(page)
    assert after[1] != before[1] and after[3] != before[3], "the overlay or the grid stayed"
    assert "Grad-CAM for “military uniform” at blocks.3" in main_text(page)
    assert "64 of 80 channels" in main_text(page)
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
        open_box(page, "Target layer")
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
    wait_for_query(page, "all_modules=1")
    wait_idle(page)
    assert offered(alias)
    assert "Feature maps of blocks.3" in main_text(page)  # the layer stays
    # an alias (the same tensor as a listed layer), then the short list again: the page shows
    # the listed name, results and all
    canonical = table.canonical(alias)
    pick(page, "Target layer", alias + " ·")
    wait_for_text(page, f"Feature maps of {alias}")
    wait_idle(page)
    sidebar.get_by_text(f"Show every module ({len(table.hookable)} instead of").click()
    page.wait_for_function(
        "(layer) => new URLSearchParams(location.search).get('layer') === layer",
        arg=canonical,
        timeout=SLOW,
    )
    wait_for_text(page, f"Feature maps of {canonical}")
    wait_idle(page)
    assert page.get_by_role("combobox", name="Target layer").input_value().startswith(canonical)
    assert_images_loaded(page)
    shot(page, "29b-layer-and-every-module")


def test_layer_change_keeps_channels_shown(open_page):
    page = open_page()
    assert channels_shown(page) == (64, 1280)
    steps = [("blocks.3", (64, 80)), ("bn2", (64, 1280)), ("conv_stem", (32, 32))]
    steps.append(("bn2", (64, 1280)))  # the wish is clamped on a small layer, not lost
    for layer, expected in steps:
        choose(page, "Target layer", layer_label(layer))
        wait_for_text(page, f"Feature maps of {layer}")
        # (a layer seen before is drawn before the server's run: wait for the run's address)
        wait_for_query(page, f"layer={layer}")
        wait_idle(page)
        assert channels_shown(page) == expected, layer
        assert slider_value(page, "Channels shown") == expected[0], layer
        assert "channels=1&" not in page.url + "&", page.url
        if layer == "blocks.3":
            shot(page, "20-channels-kept-on-blocks3")


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
        choose(page, "Target layer", layer_label(layer))
        # the race this test is about: the step lands while the new layer's run is under way
        page.wait_for_timeout(50 if index % 2 == 0 else 150)
        page.get_by_role("slider", name="Channels shown").first.focus()
        page.keyboard.press("Home")
        wait_for_text(page, f"Feature maps of {layer}")
        wait_idle(page)
        page.wait_for_timeout(500)
        wait_idle(page)
        sliders = page.get_by_role("slider", name="Channels shown")
        assert sliders.count() == 1, f"{sliders.count()} sliders after {layer}"
        assert sliders.get_attribute("max") == str(channels), layer
        shown, of = channels_shown(page)
        assert of == channels and str(shown) == sliders.input_value(), (layer, shown, of)
        page.get_by_role("slider", name="Channels shown").focus()  # back to 64 for the next
        press(page, "Channels shown", "ArrowRight", until=64)
        wait_idle(page)


def _picture_texts(page) -> list[str]:
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
    page, requests = open_session(browser, server, init_script=TEXT_SPY)
    default = layer_label("bn2")

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
        assert np.array_equal(drawn(page, 0), np.asarray(overlay)), layer
        shown = min(64, features.num_channels)  # the wish, as far as the layer has channels
        tiles = hookviz.render.laid_out_grid(
            features.activations, features.channel_order("mean", shown), cmap="viridis"
        )
        assert np.array_equal(drawn(page, 2), tiles), layer
        assert np.array_equal(drawn(page, 3), hookviz.render.colorize(heat, "inferno")), layer

    assert page.evaluate(says, " ".join(default.split()))
    choose(page, "Target layer", layer_label("blocks.4"))  # not seen yet: from the server
    wait_for_text(page, "Feature maps of blocks.4")
    wait_idle(page)
    assert not drawn_before_the_reply(page), "a layer never seen was drawn without the server"
    expect("blocks.4")
    choose(page, "Target layer", layer_label("conv_stem"))  # 32 channels: the slider shows 32
    wait_for_text(page, "Feature maps of conv_stem")
    wait_for_query(page, "layer=conv_stem")
    wait_idle(page)

    # back to each: the grid of bn2 shows the 64 channels wished again, not the 32 of the
    # slider before it
    for layer in ("bn2", "blocks.4", "conv_stem", "bn2"):
        page.evaluate("window.__hvSaid = []")
        choose(page, "Target layer", layer_label(layer))
        wait_until_pictures_say(layer_label(layer))
        assert drawn_before_the_reply(page), f"{layer}: the pictures waited for the server"
        swapped = draw_counts(page)
        said = page.evaluate("window.__hvSaid")
        wait_for_text(page, f"Grad-CAM for “military uniform” at {layer} ·")
        wait_idle(page)
        wait_for_query(page, f"layer={layer}")
        assert draw_counts(page) == swapped, f"{layer}: the server's run drew them again"
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
            assert shown == " ".join(layer_label(layer).split()), (layer, index, shown)
            assert text == final[index], (layer, index, text)
            assert faded or note_text == final_note, (layer, index, note_text)
        expect(layer)
        assert page.get_by_role("combobox", name="Target layer").input_value().startswith(layer)

    # another class (the top-5's #2): a layer seen only under the top-1 waits for the server
    # (its overlay is of that class); then, back at a layer seen under #2, the pictures show
    # at once, the overlay and heatmap of #2 (the grid is the same for every class)
    second = hookviz.ForwardPass(lite0, sample, "bn2").analysis().predictions[1]
    top_five(page).get_by_text("#2").first.click()
    wait_for_text(page, f"Grad-CAM for “{second.name}” at bn2")
    wait_idle(page)
    choose(page, "Target layer", layer_label("blocks.4"))
    wait_for_text(page, f"Grad-CAM for “{second.name}” at blocks.4")
    wait_for_query(page, "layer=blocks.4")
    wait_idle(page)
    assert not drawn_before_the_reply(page), "a picture of another class stood in"
    expect("blocks.4", second.index)
    choose(page, "Target layer", default)
    wait_until_pictures_say(default)
    assert drawn_before_the_reply(page), "bn2 under #2: the pictures waited for the server"
    wait_for_query(page, "layer=bn2")
    wait_idle(page)
    expect("bn2", second.index)

    # a panel open that names the layer: the pictures wait for the server's run
    page.locator("[data-testid='stMain'] summary").filter(has_text="What am I looking at?").nth(
        1
    ).click()
    wait_for_text(page, "registered a forward hook on")
    choose(page, "Target layer", layer_label("blocks.4"))
    wait_for_text(page, "Feature maps of blocks.4")
    wait_idle(page)
    assert not drawn_before_the_reply(page), "swapped beside an open panel of the last layer"
    assert "hook on blocks.4" in main_text(page)
    expect("blocks.4", second.index)
    shot(page, "29c-layer-seen-before-drawn-in-the-browser")
    close_session(page, requests)
