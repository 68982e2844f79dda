"""Hostile input, as a fuzzer would send it (issue 45 item 5), in process: every view field of
the address (``hookviz.app.view.fields``) with garbage on every page (AppTest: the real app,
the real bundled model), and checkpoints whose safetensors header promises 10 GB to the
library. The real server's side (repeated keys, raw query strings, malformed websocket
messages, image bombs through an upload) is ``test_fuzz_server.py``.

Bounded: a seeded draw of values (``hostile_inputs``), one value per field per run, three runs
per page (one per category: markup, numbers, texts); invalid values fall back to the defaults,
so after each page's first run its analysis comes from the caches."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from hookviz.app.main import PAGES
from hookviz.app.pages import addresses
from hookviz.app.view import state
from hookviz.app.view.fields import FIELDS

from .hostile_inputs import (
    CATEGORIES,
    TEXTS,
    hostile_address,
    live_markup,
    safetensors_header_length,
    safetensors_promising,
)
from .test_app import APP, TIMEOUT, _open_page

pytestmark = pytest.mark.slow

# Every page but the live camera, whose component (streamlit-webrtc) needs a real server's
# session manager: AppTest has none (test_fuzz_server.py opens it on a real server).
FUZZED_PAGES = [path for path, *_ in PAGES if path != addresses.LIVE_CAMERA]
BUG = "Something went wrong on our side"  # feedback.report_unexpected: an exception's message
# What each page draws once it got through (its main content, whatever the address said).
MAIN_CONTENT = {
    addresses.EXPLORE: "**Raw heatmap**",
    addresses.BEYOND: "The CAM of each top-5 class",
    addresses.METHODS: "**CAM family**",
    addresses.CHANNEL: "#### How this channel computes",
    addresses.DIAGNOSE: "### Diagnose the network",
    addresses.COMPARE: "**Where they differ**",
    addresses.PRESENT: "Keys: ← → the network's stages",
    addresses.YOUR_MODEL: "**Model cards of this server**",
    addresses.DATASET: "Run folder",
}
# Errors a page means to show for an address value (not a bug's).
INTENDED_ERRORS = ("Cannot open",)
LONG = next(text for text in TEXTS if len(text) >= 10_000)
SEED = 45


def _rendered(at: AppTest) -> list[str]:
    """Every text the page renders as markdown (alerts, captions, headings, markdown) and the
    labels and help of its widgets (markdown too)."""
    kinds = ("markdown", "caption", "info", "warning", "error", "success", "title", "header")
    texts = [str(element.value) for kind in kinds for element in at.get(kind)]
    texts += [str(element.value) for element in at.get("subheader")]
    for kind in ("selectbox", "radio", "slider", "toggle", "checkbox", "text_input", "button"):
        for widget in at.get(kind):
            texts += [str(getattr(widget, "label", "")), str(getattr(widget, "help", "") or "")]
    return texts


def _page_with(address: dict[str, str], page: str) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    for name, value in address.items():
        at.query_params[name] = value
    if page == addresses.EXPLORE:
        return at.run()
    return _open_page(at, page)


def _assert_survived(at: AppTest, page: str, address: dict[str, str]) -> None:
    """No exception, no error but an intended one, the page's main content drawn, the whole
    page run to its end, and no markup of the address rendered live, nor a long value whole."""
    assert not at.exception, [e.value for e in at.exception]
    errors = [str(e.value) for e in at.error]
    assert not [e for e in errors if BUG in e], (page, address, errors)
    assert all(e.startswith(INTENDED_ERRORS) for e in errors), (page, errors)
    assert at.session_state[state.COMPLETE_KEY], f"{page} stopped before its end"
    rendered = _rendered(at)
    assert any(MAIN_CONTENT[page] in text for text in rendered), (page, rendered[:20])
    live = [(text[:200], live_markup(text)) for text in rendered if live_markup(text)]
    assert not live, f"markup of the address rendered live on {page}: {live}"
    if LONG in address.values():
        echoed = [text[:200] for text in rendered if LONG in text]
        assert not echoed, f"a 10,000-character value echoed whole on {page}: {echoed}"


@pytest.mark.parametrize("category", list(CATEGORIES))
@pytest.mark.parametrize("page", FUZZED_PAGES)
def test_every_field_of_a_hostile_link_on_every_page(page: str, category: str) -> None:
    """A link whose every view field holds garbage of one kind (markup, numbers that are not,
    or long, unicode, control and traversal text) opens each page: the defaults replace what
    cannot be used, the page draws its content, and nothing of the garbage is rendered live."""
    address = hostile_address_for(page, category)
    at = _page_with(address, page)
    _assert_survived(at, page, address)
    at.run()  # a rerun (the address now the page's own) stays whole too
    _assert_survived(at, page, {})


def hostile_address_for(page: str, category: str) -> dict[str, str]:
    return hostile_address(sorted(FIELDS), category, SEED + FUZZED_PAGES.index(page))


_PHISH = "[free prize](https://example.com/phish) <img src=x onerror=alert(1)>"


def test_a_linked_model_name_is_escaped_and_cut() -> None:
    """A link naming a model the server does not offer says so, with the name as typed (no
    link, no tag, no emphasis of it rendered) and a long one cut (it was written into the
    notice as it was)."""
    for value in (_PHISH, LONG):
        at = _page_with({"model": value}, addresses.BEYOND)
        notices = [str(i.value) for i in at.info if "does not offer" in str(i.value)]
        assert notices, [i.value for i in at.info]
        assert not [n for n in notices if live_markup(n) or LONG in n], notices


def test_a_linked_run_folder_is_escaped_in_its_error() -> None:
    """A link's run folder that is no run: the error names it as typed, nothing of it live (the
    library's message, which names the folder too, was written into the error as it was)."""
    at = _page_with({"run_dir": _PHISH}, addresses.DATASET)
    errors = [str(e.value) for e in at.error]
    assert errors and not [e for e in errors if live_markup(e)], errors


def test_a_colormap_the_renderer_lacks_falls_back_on_every_page_that_draws_one() -> None:
    """A link's colormap that is not one of the renderer's was passed on to it by the pages
    that read the wish directly (Beyond, Channel, Compare, Diagnose): an unexpected error."""
    for page in (addresses.BEYOND, addresses.CHANNEL, addresses.COMPARE):
        address = {"cam_cmap": "nosuch", "grid_cmap": "", "alpha": "0.3"}
        at = _page_with(address, page)
        _assert_survived(at, page, address)
        notices = " ".join(str(i.value) for i in at.info)
        assert "heatmap colormap 'nosuch'" in notices, notices


# --- a safetensors header promising 10 GB ------------------------------------------------------

_LOAD_IN_A_FRESH_PROCESS = textwrap.dedent(
    """
    import resource, sys
    import hookviz
    from tests.hostile_inputs import safetensors_header_length, safetensors_promising

    hookviz.load_model("resnet18", pretrained=False)  # torch and the model, before measuring
    sources = {
        "offsets": safetensors_promising(),
        "shape": safetensors_promising(shape_only=True),
        "header": safetensors_header_length(),
    }
    path = sys.argv[1]
    for name, data in sources.items():
        with open(path, "wb") as file:
            file.write(data)
        for given in (path, data):
            before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            try:
                hookviz.load_model("resnet18", checkpoint=given, pretrained=False)
            except hookviz.HookvizError as exc:
                said = str(exc).replace(chr(10), " ")
            else:
                said = "LOADED"
            grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
            print(name, type(given).__name__, grown // 1024, said, sep="\\t")
    """
)


def test_a_safetensors_header_promising_10_gb_is_refused_before_anything_is_allocated(tmp_path):
    """``load_model(..., checkpoint=...)`` given a 100-byte safetensors file whose header says
    its tensor is 10 GB (by its offsets, by its shape, or a header length of 10 GB), as a path
    and as bytes: a CheckpointError naming the file, and the process's peak memory grows by
    less than 64 MB (measured in a fresh process, after torch and the model are loaded)."""
    done = subprocess.run(
        [sys.executable, "-c", _LOAD_IN_A_FRESH_PROCESS, str(tmp_path / "huge.safetensors")],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=Path(__file__).resolve().parent.parent,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [line.split("\t") for line in done.stdout.splitlines() if line.count("\t") == 3]
    assert len(rows) == 6, done.stdout
    for name, given, grown_mb, said in rows:
        assert said != "LOADED", (name, given)
        assert "could not be read" in said, (name, given, said)
        assert int(grown_mb) < 64, (name, given, grown_mb, said)


def _memory_mb(field: str) -> float:
    """This process's ``VmRSS`` (now) or ``VmHWM`` (its peak), in MB."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise AssertionError(f"no {field}")


def _load_on_your_model(at: AppTest, name: str, data: bytes) -> float:
    """Load ``data`` named ``name`` as a resnet18 on the Your model page; the growth of this
    process's peak memory (the page runs in it) over the load, in MB."""
    at.selectbox(key="own_architecture").set_value("resnet18")
    at.file_uploader(key="own_checkpoint").set_value((name, data, "application/octet-stream"))
    at.run()
    before = _memory_mb("VmRSS")
    with open("/proc/self/clear_refs", "w") as refs:
        refs.write("5")  # (the peak, VmHWM, starts again from here)
    at.button(key="own_load").click().run()
    return _memory_mb("VmHWM") - before


def test_the_your_model_page_refuses_a_checkpoint_promising_10_gb() -> None:
    """The Your model page given such a file says it could not be read; no exception, and
    this process's peak memory grows by less than 256 MB over the load."""
    at = _page_with({}, addresses.YOUR_MODEL)
    files = {
        "huge.safetensors": safetensors_promising(),
        "shape.safetensors": safetensors_promising(shape_only=True),
        "header.safetensors": safetensors_header_length(),
    }
    for name, data in files.items():
        grown = _load_on_your_model(at, name, data)
        assert not at.exception, [e.value for e in at.exception]
        errors = [str(e.value) for e in at.error]
        assert len(errors) == 1 and "could not be read" in errors[0], errors
        assert not [e for e in errors if BUG in e], errors
        assert grown < 256, (name, grown)


def test_a_checkpoint_named_with_markup_is_named_as_typed() -> None:
    """A refused checkpoint whose file name is markup: the error names it, nothing of it live."""
    at = _page_with({}, addresses.YOUR_MODEL)
    _load_on_your_model(at, _PHISH + ".safetensors", safetensors_promising())
    errors = [str(e.value) for e in at.error]
    assert errors and not [e for e in errors if live_markup(e)], errors
