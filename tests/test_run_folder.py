"""Runs under a root (issue 45 item 1): with ``HOOKVIZ_RUNS_DIR`` the Dataset run page opens only
folders under it, named relative to it; an absolute path, a ``..`` way out and a symlink out
are refused with the words of a folder that is not there, naming nothing of the server's
folders; served to other machines with no root the page is off and says why. Real runs written
by hookviz, the real page (AppTest), the real launcher's settings."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

import hookviz
from deploy import serve
from hookviz.app import launch
from hookviz.app.pages.dataset import run_folder
from hookviz.app.view.link_notice import escaped
from hookviz.dataset import run_cam

from .test_app import APP, TIMEOUT, _open_page
from .test_dataset_run import _folder


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> dict[str, Path]:
    """A runs folder with one run (``class/cam``), a private run beside it, outside, and a
    symlink inside pointing at it."""
    base = tmp_path_factory.mktemp("server")
    images = _folder(base / "data", count=2)
    lite0 = hookviz.load_model("efficientnet_lite0", device="cpu")
    root = base / "runs"
    run_cam(lite0, [images], root / "class" / "cam", layer="blocks.5")
    private = base / "private" / "teacher-run"
    run_cam(lite0, [images], private, layer="blocks.5")
    (root / "sneaky").symlink_to(private, target_is_directory=True)
    return {"root": root, "private": private, "base": base}


def _page(monkeypatch, root: Path | None, *, network: bool = False, typed: str = "") -> AppTest:
    if root is None:
        monkeypatch.delenv(run_folder.RUNS_DIR_ENV, raising=False)
    else:
        monkeypatch.setenv(run_folder.RUNS_DIR_ENV, str(root))
    monkeypatch.setenv(run_folder.SERVED_TO_NETWORK_ENV, "1" if network else "0")
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    at.run()
    _open_page(at, "dataset")
    if typed:
        at.text_input(key="run_dir").set_value(typed).run()
    assert not at.exception, at.exception
    return at


def _said(at: AppTest) -> str:
    return "\n".join(
        [e.value for e in at.error] + [w.value for w in at.warning] + [c.value for c in at.caption]
        + [m.value for m in at.markdown] + [i.value for i in at.info]
    )  # fmt: skip


@pytest.mark.slow
def test_a_run_under_the_root_opens_by_its_name_and_is_listed(server, monkeypatch):
    at = _page(monkeypatch, server["root"], typed="class/cam")
    assert not at.error, [e.value for e in at.error]
    said = _said(at)
    assert "cam of **efficientnet_lite0**" in said
    assert "`class/cam`" in said  # the runs on this server, by their names
    assert str(server["root"]) not in said


@pytest.mark.slow
@pytest.mark.parametrize("way_out", ["absolute", "dotdot", "symlink", "missing"])
def test_a_way_out_of_the_root_is_refused_naming_nothing(server, monkeypatch, way_out):
    typed = {
        "absolute": str(server["private"]),
        "dotdot": "../private/teacher-run",
        "symlink": "sneaky",
        "missing": "no/such/run",
    }[way_out]
    at = _page(monkeypatch, server["root"], typed=typed)
    assert at.error, _said(at)
    message = at.error[0].value
    assert str(server["base"]) not in message  # never a folder of the server
    assert "cam of" not in _said(at)  # nothing of the private run is shown
    if way_out != "absolute":  # a folder out reads as one that is not there
        missing = _page(monkeypatch, server["root"], typed="zz-not-here").error[0].value
        assert message.replace(escaped(typed), "X") == missing.replace(escaped("zz-not-here"), "X")


@pytest.mark.slow
def test_the_address_cannot_name_a_folder_out_either(server, monkeypatch):
    monkeypatch.setenv(run_folder.RUNS_DIR_ENV, str(server["root"]))
    monkeypatch.setenv(run_folder.SERVED_TO_NETWORK_ENV, "1")
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    at.query_params["run_dir"] = str(server["private"])
    at.run()
    _open_page(at, "dataset")
    assert not at.exception
    assert "cam of" not in _said(at) and at.error


@pytest.mark.slow
def test_served_to_the_network_with_no_root_the_page_is_off(server, monkeypatch):
    at = _page(monkeypatch, None, network=True)
    assert [w.value for w in at.warning] == [run_folder.OFF]
    assert not [t for t in at.text_input if t.key == "run_dir"]
    # on this machine only, no root: any folder, as before
    at = _page(monkeypatch, None, typed=str(server["private"]))
    assert not at.error and "cam of **efficientnet_lite0**" in _said(at)


def test_the_rules_without_a_page(server):
    places = run_folder.RunPlaces(server["root"])
    assert places.locate("class/cam") == (server["root"] / "class" / "cam").resolve()
    assert places.runs() == ["class/cam"]  # (the symlinked run is out, not listed)
    for typed in ["/etc", "~", "../private", "sneaky", "class/cam/../../../private"]:
        with pytest.raises(run_folder.RunFolderRefused):
            places.locate(typed)
    shown = places.shown(f"no hookviz run in {server['root']}/class")
    assert str(server["root"]) not in shown and "class" in shown
    assert run_folder.RunPlaces(None, off=True).runs() == []
    with pytest.raises(run_folder.RunFolderRefused, match="off on this server"):
        run_folder.RunPlaces(None, off=True).locate("anything")


def test_the_launcher_tells_its_replicas_the_root_and_the_network(tmp_path):
    assert launch.RUNS_DIR_ENV == serve.RUNS_DIR_ENV == run_folder.RUNS_DIR_ENV
    assert serve.SERVED_TO_NETWORK_ENV == run_folder.SERVED_TO_NETWORK_ENV
    assert launch.main(["--runs", str(tmp_path / "nope")]) == launch.EXIT_ERROR
    assert serve.page_settings("127.0.0.1", None) == {}
    settings = serve.page_settings("0.0.0.0", tmp_path)
    assert settings == {
        run_folder.RUNS_DIR_ENV: str(tmp_path.resolve()),
        run_folder.SERVED_TO_NETWORK_ENV: "1",
    }
    with pytest.raises(serve.LaunchError, match="no such folder"):
        serve.page_settings("127.0.0.1", tmp_path / "nope")
