"""A link whose values the page cannot use: each is replaced by its default, and the top of the
page says which, naming the field and the value given, until the user changes a control.
Driven headless with AppTest (the real app, the real bundled model)."""

from __future__ import annotations

from streamlit.testing.v1 import AppTest

from hookviz.app.view.target import TOP1

from .test_app import APP, TIMEOUT, _assert_results, _box

NOTICE = "not valid here"


def _run(params: dict[str, str]) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    for key, value in params.items():
        at.query_params[key] = value
    return at.run()


def _notices(at: AppTest) -> list[str]:
    return [i.value for i in at.info if NOTICE in i.value]


def test_a_links_mistyped_values_are_named_until_the_user_changes_a_control() -> None:
    at = _run(
        {"layer": "nosuch", "target": "99999", "method": "bogus", "opacity": "abc", "alpha": "7"}
    )
    _assert_results(at)
    assert _box(at, "Target layer").value == "bn2"
    assert _box(at, "Explain the class").value == TOP1
    assert at.slider(key="alpha").value == 0.5
    notices = _notices(at)
    assert len(notices) == 1, notices
    said = notices[0]
    for given in ("layer 'nosuch'", "class 99999", "method 'bogus'", "'abc'", "opacity 7"):
        assert given in said, (given, said)
    assert "defaults are shown" in said
    # the address keeps none of them (it names the layer shown)
    assert not {"target", "method", "alpha", "opacity"} & set(at.query_params)
    assert at.query_params["layer"] == "bn2"

    # the notice stays over a rerun that changes nothing, and goes with the user's first change
    at.run()
    assert len(_notices(at)) == 1
    _box(at, "Target layer").set_value("blocks.3")
    at.run()
    _assert_results(at)
    assert not _notices(at)


def test_a_valid_link_says_nothing_and_a_value_given_is_shown_escaped() -> None:
    at = _run({"layer": "blocks.5", "alpha": "0.7"})
    _assert_results(at)
    assert not _notices(at)

    at = _run({"layer": "**bold** <b>x</b> [a](http://e.com) `c`"})
    _assert_results(at)
    (said,) = _notices(at)
    # every markdown character of the value is escaped: it reads as typed, nothing is formatted
    assert r"\*\*bold\*\*" in said and r"\[a\](http://e.com)" in said and r"\`c\`" in said
    assert r"\<b\>" in said

    # a number as long as Python reads (thousands of digits) is cut like any long value
    at = _run({"target": "9" * 4000})
    (said,) = _notices(at)
    assert "9" * 100 not in said and "…" in said
