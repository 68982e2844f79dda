"""A page visit is one browser history entry (``hookviz/app/browser/js/history.js``), every time:
the pages are switched round several times, each switch's growth of ``history.length`` counted.
Shared fixtures and helpers: ``browser_page.py``."""

from __future__ import annotations

from .browser_page import (
    browser_fixture,  # noqa: F401  (a fixture: browser)
    go_to,
    open_page_fixture,  # noqa: F401  (a fixture: open_page)
    server_fixture,  # noqa: F401  (a fixture: server)
    wait_for_query,
    wait_for_text,
    wait_idle,
)

# (title in the navigation, a text of its main area) of the pages visited, in turn
ROUND = (
    ("Beyond one heatmap", "Beyond one heatmap"),
    ("Compare", "Compare"),
    ("Explore", "Feature maps of"),
)


def test_each_page_switch_adds_one_history_entry(open_page):
    """A view with a class chosen (so each page's address has a query to write after the
    switch's bare one): three rounds of three pages, one entry each. The new page's run can
    write its view before Streamlit moves the address to the new page (about one switch in
    three here): that push and the switch's are one entry too."""
    page = open_page("/?target=1")
    wait_idle(page)
    grown = []
    for _ in range(3):
        for title, text in ROUND:
            before = page.evaluate("history.length")
            go_to(page, title)
            wait_for_text(page, text)
            wait_for_query(page, "target=1")
            wait_idle(page)
            grown.append((title, page.evaluate("history.length") - before))
    assert all(growth == 1 for _title, growth in grown), grown
    page.go_back()  # the page before, with its own view (not the next page's, on its path)
    page.wait_for_function("() => location.pathname === '/compare'")
    wait_for_text(page, "Compare")
    assert "compare_model=" in page.url, page.url
