"""Shared fixtures. Tests never touch the network: weight downloads are switched off and the
torch hub cache points at an empty temporary folder, so only bundled weights and files a test
places itself can load.

How the suite is organised:

- ``browser`` marks every test that starts the real page (``streamlit run`` and Chromium
  through Playwright). Nobody writes it: ``pytest_collection_modifyitems`` below sets it on
  each test that, itself or through a fixture it needs, starts the app server or Chromium.
  Without Playwright or Chromium these tests skip, unless ``HOOKVIZ_REQUIRE_BROWSER=1`` (CI).
- ``slow`` marks, by hand, the other tests that take more than about a second each on 2 cores:
  real processes (the command line, torchrun), long dataset runs, perturbation methods and
  feature visualization at full size, whole-app AppTest runs that load several models.
- The inner loop, about 2 minutes on 2 cores: ``python -m pytest -m "not browser and not slow"``.
- Everything, as CI runs it (``.ci/run``): ``python -m pytest``. Both run one pytest-xdist
  worker per core, a file's tests in one worker (``-n auto --dist loadfile`` in pyproject.toml;
  ``-n0`` runs in this process), and print the 20 slowest tests (``--durations=20``); a new test
  over about a second belongs in ``slow``.
- Browser tests leave screenshots and timings in ``test-artifacts/browser`` (or
  ``$HOOKVIZ_ARTIFACTS/browser``); the run's summary names the folder.
- A test that stops a process mid-way waits for events, never for time: see
  ``held_input.py`` (an input that holds a run until the test lets it go) and
  ``processes.py``.
"""

from __future__ import annotations

import functools
import inspect
import os
import re
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest

from deploy.serve import replica_threads

# pytest-xdist runs the suite in one worker per core (``-n auto`` in pyproject.toml). Each worker,
# and every app or torchrun process it starts, gets its share of the cores for torch's threads:
# two workers each spinning two threads on two cores ran the inner loop 2.4x slower than one.
# Set before torch is imported, since its thread pool reads it then; the rule is the replica
# launcher's (the cores shared out, a value already set kept).
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
if _WORKERS > 1:
    os.environ["OMP_NUM_THREADS"] = replica_threads(_WORKERS)

import torch  # noqa: E402  (after the thread count above)

# Set before any test imports hookviz or torchvision so nothing sees the real hub cache.
os.environ["HOOKVIZ_OFFLINE"] = "1"
os.environ["TORCH_HOME"] = tempfile.mkdtemp(prefix="hookviz-torch-home-")
# The app's upload folder (every app the tests start inherits it): this run's own.
os.environ["HOOKVIZ_SHARED_DIR"] = tempfile.mkdtemp(prefix="hookviz-uploads-")

import hookviz  # noqa: E402  (after the settings above)


@pytest.fixture(scope="session")
def detector() -> hookviz.LoadedModel:
    """An untrained Faster R-CNN MobileNet-320 (torchvision's, seeded by its name)."""
    return hookviz.load_model("fasterrcnn_mobilenet_v3_large_320_fpn", False, device="cpu")


@pytest.fixture(scope="session")
def segmenter() -> hookviz.LoadedModel:
    """An untrained LRASPP MobileNet (torchvision's, 21 VOC categories)."""
    return hookviz.load_model("lraspp_mobilenet_v3_large", False, device="cpu")


@pytest.fixture(scope="session")
def embedder() -> hookviz.LoadedModel:
    """An untrained ResNet-18 without its head: an embedder of 512 values."""
    return hookviz.load_model("resnet18", False, device="cpu", task="embedding")


@pytest.fixture(scope="session")
def resnet18() -> hookviz.LoadedModel:
    """An untrained ResNet-18 (seeded): real architecture, in-place ReLUs, shared modules."""
    torch.manual_seed(0)
    return hookviz.load_model("resnet18", pretrained=False, device="cpu")


@pytest.fixture(scope="session")
def vgg11() -> hookviz.LoadedModel:
    """An untrained VGG-11 (seeded): every conv is followed by ReLU(inplace=True)."""
    torch.manual_seed(0)
    return hookviz.load_model("vgg11", pretrained=False, device="cpu")


@pytest.fixture(scope="session")
def lite0() -> hookviz.LoadedModel:
    """The bundled, pretrained EfficientNet-Lite0."""
    return hookviz.load_model("efficientnet_lite0", device="cpu")


@pytest.fixture(scope="session")
def sample() -> object:
    """The sample photo (Grace Hopper, 512x600)."""
    return hookviz.sample_image()


def random_input(height: int = 224, width: int = 224, seed: int = 0) -> torch.Tensor:
    """A reproducible (1, 3, H, W) preprocessed-looking input."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(1, 3, height, width, generator=generator)


# Where the browser tests write their screenshots and timings.
ARTIFACTS = (
    Path(
        os.environ.get(
            "HOOKVIZ_ARTIFACTS", Path(__file__).resolve().parent.parent / "test-artifacts"
        )
    )
    / "browser"
)


# What starts the real page: the app server (scripts/appserver.running_app, or `streamlit run`
# itself) and Chromium (Playwright). Found in the source, so a new fixture that starts either
# makes its tests browser tests without anyone listing it.
_STARTS_BROWSER = re.compile(
    r"\brunning_app\(|\bsync_playwright\(|\bchromium\.launch\(|[\"']streamlit[\"'],\s*[\"']run[\"']"
)


@functools.cache
def _starts_browser(function: Callable) -> bool:
    try:
        source = inspect.getsource(function)
    except (OSError, TypeError):  # built-in or generated: none of ours
        return False
    return bool(_STARTS_BROWSER.search(source))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark ``browser`` every test that starts the real page, itself or through any fixture
    it needs (directly or not), so that no one has to remember the marker and
    ``-m "not browser"`` leaves them all out."""
    for item in items:
        info = getattr(item, "_fixtureinfo", None)
        definitions = info.name2fixturedefs.values() if info is not None else ()
        functions = [getattr(item, "function", None)]
        functions += [definition.func for defs in definitions for definition in defs]
        if any(_starts_browser(f) for f in functions if f is not None):
            item.add_marker(pytest.mark.browser)


def pytest_terminal_summary(terminalreporter) -> None:
    """Say where the browser tests left their screenshots and timings."""
    if ARTIFACTS.exists():
        terminalreporter.write_line(f"browser screenshots and timings: {ARTIFACTS}")
