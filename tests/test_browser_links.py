"""Shared links in a real browser: an address opens the view it names (model, weights, layer,
class, colormap), on the page and panel it names (with its toggles); moving between the pages
keeps the view, and an upload; Back and Forward step through the choices and the pages.
Shared fixtures and helpers: ``browser_page.py``."""

from __future__ import annotations

from .browser_page import (
    assert_images_loaded,
    browser_fixture,  # noqa: F401  (a fixture: browser)
    encoded,
    go_to,
    main_text,
    open_page_fixture,  # noqa: F401  (a fixture: open_page)
    press,
    server_fixture,  # noqa: F401  (a fixture: server)
    shot,
    top_five,
    upload,
    wait_for_query,
    wait_for_text,
    wait_idle,
)

LINK = (
    "/beyond?model=resnet18&weights=untrained&layer=layer3&target=1&cam_cmap=viridis"
    "&beyond_panel=trust&trust=1"
)


def test_a_shared_link_restores_the_view_the_page_and_its_panel(open_page):
    page = open_page(LINK, wait=False)
    wait_for_text(page, "Beyond one heatmap")
    wait_for_text(page, "Deletion area")  # the trust panel, its check run
    wait_idle(page)
    assert page.evaluate("location.pathname") == "/beyond", page.url
    shot(page, "26-shared-link-trust")
    go_to(page, "Diagnose the network")
    wait_for_text(page, "Histogram of layer3")
    wait_idle(page)
    assert "layer=layer3" in page.url and "/diagnose" in page.url, page.url
    go_to(page, "Explore")
    wait_for_text(page, "Feature maps of layer3")  # resnet18's layer: the model was restored
    wait_idle(page)
    assert "Grad-CAM: “goldfish”" in main_text(page)
    assert "layer=layer3" in page.url and "target=1" in page.url

    upload(page, "mine.png", encoded((320, 240), "PNG"), "image/png")
    wait_for_text(page, "mine.png · 320×240 px")
    wait_idle(page)
    go_to(page, "Beyond one heatmap")
    wait_for_text(page, "Deletion area")
    wait_idle(page)
    go_to(page, "Explore")
    wait_for_text(page, "Feature maps of layer3")
    wait_idle(page)
    assert "mine.png · 320×240 px" in main_text(page)
    assert_images_loaded(page)
    shot(page, "26-upload-kept-across-pages")


CHECKED_IS = """(prefix) => {
  const group = [...document.querySelectorAll("[data-testid='stSidebar'] [role='radiogroup']")]
    .find((g) => g.innerText.includes("Top-1:"));
  const input = group && group.querySelector("input:checked");
  return !!input && input.closest("label").innerText.startsWith(prefix);
}"""


def _wait_checked(page, prefix: str) -> None:
    """Until the top-5 radio's checked option starts with ``prefix`` (the run the history step
    started has redrawn the sidebar), and Streamlit's run is over."""
    page.wait_for_function(CHECKED_IS, arg=prefix, timeout=60_000)
    wait_idle(page)


def _history_step(page, go, path: str, query_part: str) -> None:
    """Back or Forward (``go``), then wait until the page stands on ``path`` with an address
    holding ``query_part`` and Streamlit's run is over."""
    go()
    page.wait_for_function(
        "([path, part]) => location.pathname === path && location.search.includes(part)",
        arg=[path, query_part],
    )
    wait_idle(page)


def test_back_and_forward_step_through_the_choices_and_the_pages(open_page):
    """Each choice is one history entry and each page visit one more: Back undoes the last
    class picked, then the one before; Forward redoes; Back from another page returns to the
    page before it with its view (nothing writes the later view back)."""
    page = open_page("/")
    wait_idle(page)
    # Three rounds: Back once came with the browser's stale copy of the class box (the class
    # before the last pick) in about one round in four, and that value won over the address.
    for _ in range(3):
        top_five(page).get_by_text("#2 ").first.click()
        wait_for_query(page, "target=")
        wait_idle(page)
        second = page.evaluate("new URLSearchParams(location.search).get('target')")
        top_five(page).get_by_text("#3 ").first.click()
        page.wait_for_function("(t) => !location.search.includes('target=' + t)", arg=second)
        wait_idle(page)
        _history_step(page, page.go_back, "/", f"target={second}")
        _wait_checked(page, "#2 ")
        # the run Back started is over: had it written the later view back, it would be there
        assert f"target={second}" in page.url, page.url
        page.go_back()
        page.wait_for_function("() => !location.search.includes('target=')")
        _wait_checked(page, "Top-1")
        assert "target=" not in page.url, page.url
    _history_step(page, page.go_forward, "/", f"target={second}")
    _wait_checked(page, "#2 ")
    go_to(page, "Beyond one heatmap")
    wait_for_text(page, "Beyond one heatmap")
    wait_for_query(page, f"target={second}")  # the view goes along
    wait_idle(page)
    _history_step(page, page.go_back, "/", f"target={second}")  # one Back: Explore again
    wait_for_text(page, "Feature maps of")
    assert "Beyond one heatmap" not in main_text(page)


def test_a_links_notice_goes_with_a_display_change_a_class_or_another_page(open_page):
    """The notice of a link's unusable values stays until the user acts: a display option or a
    class picked (each reruns only the pictures' fragments) or another page takes it away."""
    page = open_page("/?layer=nosuch&opacity=abc", wait=False)
    wait_for_text(page, "not valid here")
    wait_idle(page)
    press(page, "Heatmap opacity", "ArrowRight")
    wait_for_query(page, "alpha=")
    wait_idle(page)
    assert "not valid here" not in main_text(page)
    shot(page, "26-link-notice-gone-after-a-display-change")

    page = open_page("/?layer=nosuch", wait=False)
    wait_for_text(page, "not valid here")
    wait_idle(page)
    top_five(page).get_by_text("#2 ").click()
    wait_for_query(page, "target=")
    wait_idle(page)
    assert "not valid here" not in main_text(page)

    page = open_page("/?layer=nosuch", wait=False)
    wait_for_text(page, "not valid here")
    wait_idle(page)
    go_to(page, "Methods side by side")
    wait_for_text(page, "Methods side by side")
    wait_idle(page)
    assert "not valid here" not in main_text(page)
