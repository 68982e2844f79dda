"""The page as a user installs it: the wheel built from this repository, installed into a fresh
virtual environment, run as ``hookviz app`` from a folder outside the clone, serving a network
of the user's own code (``--model package.module:function``) with their class names, which the
page then explains. Real build, real processes, a real Streamlit session (the browser-less
client, ``bench/streamlit_client.py``), no network: the fresh environment finds the other
packages in this one's site-packages (a ``.pth`` line), and hookviz only in its own."""

from __future__ import annotations

import os
import site
import subprocess
import sys
import textwrap
import time
import urllib.request
import zipfile
from pathlib import Path

import pytest

from bench.streamlit_client import SUCCESS, Session
from hookviz.app import launch
from hookviz.app.pages import addresses
from scripts.appserver import free_port

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parent.parent
CLASSES = ["otter", "heron", "kingfisher"]
PAGES = [
    addresses.BEYOND, addresses.METHODS, addresses.CHANNEL, addresses.DIAGNOSE,
    addresses.COMPARE, addresses.PRESENT, addresses.LIVE_CAMERA, addresses.YOUR_MODEL,
]  # fmt: skip

NET = '''
import torch
from torch import nn


class Net(nn.Module):
    """A small CNN no zoo has: three classes."""

    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 16, 3, padding=1), nn.ReLU()
        )
        self.head = nn.Linear(16, 3)

    def forward(self, x):
        return self.head(self.features(x).mean(dim=(2, 3)))


def build():
    torch.manual_seed(0)
    return Net()
'''


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel built from this repository (no download: this environment's setuptools)."""
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "--no-build-isolation",
         "-q", "-w", str(out)],
        check=True, capture_output=True,
    )  # fmt: skip
    (built,) = out.glob("hookviz-*.whl")
    return built


@pytest.fixture(scope="module")
def fresh(tmp_path_factory, wheel) -> Path:
    """A fresh virtual environment with the wheel installed; its other packages are this
    environment's (a ``.pth`` line), so nothing is downloaded, and its hookviz is the wheel's
    alone (this environment's editable hookviz is not seen: ``.pth`` files of an added folder
    are not read)."""
    folder = tmp_path_factory.mktemp("venv") / "fresh"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True)
    python = folder / "bin" / "python"
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps",
         "--no-index", "-q", str(wheel)],
        check=True, capture_output=True,
    )  # fmt: skip
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    (Path(purelib) / "this_environments_packages.pth").write_text(
        "\n".join(site.getsitepackages()) + "\n"
    )
    return folder


def test_the_wheel_holds_the_page_and_its_browser_code(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    shipped = {path.relative_to(ROOT).as_posix() for path in (ROOT / "hookviz").rglob("*.js")}
    assert shipped and shipped <= names
    assert "hookviz/app/streamlit_config.toml" in names
    assert "hookviz/app/entry/main_script.py" in names and "hookviz/app/main.py" in names
    assert not any(name.startswith(("ui/", "tests/", "app.py")) for name in names)


def test_hookviz_app_from_a_fresh_install_serves_the_users_own_network(fresh, tmp_path):
    work = tmp_path / "work"
    (work / "mynets").mkdir(parents=True)
    (work / "mynets" / "__init__.py").write_text("")
    (work / "mynets" / "net.py").write_text(textwrap.dedent(NET))
    (work / "classes.txt").write_text("\n".join(CLASSES) + "\n")
    where = subprocess.run(
        [str(fresh / "bin" / "python"), "-c", "import hookviz.app; print(hookviz.app.__file__)"],
        cwd=work, check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    assert where.startswith(str(fresh)), where  # the wheel's hookviz, not the clone's

    port = free_port()
    environment = {k: v for k, v in os.environ.items() if k != "HOOKVIZ_MODELS_DIR"}
    server = subprocess.Popen(
        # (--host 127.0.0.2: the page's settings say 127.0.0.1, and the user's option wins)
        [str(fresh / "bin" / "hookviz"), "app", "--port", str(port), "--host", "127.0.0.2",
         "--model", "mynets.net:build", "--classes", "classes.txt", "--name", "birds",
         "--server.headless", "true"],
        cwd=work, env=environment, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        url = f"http://127.0.0.2:{port}"
        _wait_healthy(url, server)
        with Session(url, timeout=120) as session:
            session.open({"model": "card:birds"})
            assert session.wait_finished(timeout=240) == SUCCESS
            assert not session.errors(), session.errors()
            assert session.widget_value("Network") == "card: birds (your code: mynets.net:build)"
            classes = session.widget("Explain the class")
            # its three classes, by the names of its file
            assert {name for name in CLASSES if any(name in o for o in classes.options)} == set(
                CLASSES
            ), list(classes.options)
            assert "hook on `features" in session.text()  # a layer of the user's network
            # every page of the installed package works on it (Live camera: without a camera)
            for page in PAGES:
                session.open({"model": "card:birds"}, page=page)
                assert session.wait_finished(timeout=240) == SUCCESS, page
                assert not session.page_not_found, page
                assert not session.errors(), (page, session.errors())
                if page == addresses.YOUR_MODEL:  # (no model picker: it lists the cards)
                    assert "mynets.net:build" in session.text(), session.text()
                else:
                    assert session.widget_value("Network").startswith("card: birds"), page
    finally:
        server.terminate()
        output = server.communicate(timeout=30)[0]
    assert "Traceback" not in output, output


def test_a_mistake_in_the_model_options_is_said_before_the_page_starts(fresh, tmp_path):
    run = [str(fresh / "bin" / "hookviz"), "app", "--port", str(free_port())]
    said = subprocess.run(
        [*run, "--model", "nosuch.module:build"], cwd=tmp_path, capture_output=True, text=True
    )
    assert said.returncode == launch.EXIT_ERROR
    assert "hookviz app: --model nosuch.module:build:" in said.stderr
    assert "nosuch" in said.stderr and "Traceback" not in said.stderr
    said = subprocess.run(
        [*run, "--classes", "c.txt"], cwd=tmp_path, capture_output=True, text=True
    )
    assert said.returncode == launch.EXIT_ERROR
    assert "--classes belongs to a --model" in said.stderr


def _wait_healthy(url: str, server: subprocess.Popen, timeout: float = 180.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise AssertionError(f"hookviz app exited: {server.communicate()[0]}")
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as answer:
                if answer.read() == b"ok":
                    return
        except OSError:
            time.sleep(0.5)
    raise AssertionError("hookviz app did not answer")
