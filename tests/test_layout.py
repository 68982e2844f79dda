"""The library's layout: every public name importable from ``hookviz``, the old flat module paths
still working (as the very same modules), the page never importing torch, the library never
importing streamlit."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

import hookviz
from hookviz._moved import MOVED

ROOT = Path(__file__).resolve().parent.parent


def test_every_public_name_is_importable_from_the_package():
    missing = [name for name in hookviz.__all__ if not hasattr(hookviz, name)]
    assert missing == []
    from hookviz import render, snippet  # modules that are part of the API

    assert callable(render.overlay) and callable(snippet.reproduce_snippet)


@pytest.mark.parametrize(("old", "new"), sorted(MOVED.items()))
def test_old_module_paths_are_the_moved_modules(old, new):
    assert importlib.import_module(old) is importlib.import_module(new)
    assert getattr(hookviz, old.rpartition(".")[2]) is importlib.import_module(new)


def test_old_paths_work_in_a_fresh_interpreter():
    code = (
        "from hookviz.pipeline import ForwardPass; from hookviz.cam import to_pixel_grid;"
        "import hookviz.layers, hookviz.bundled;"
        "from hookviz.models import LoadedModel, torchvision_weights_path;"
        "import hookviz.core.forward_pass as f; assert ForwardPass is f.ForwardPass;"
        "print('ok')"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True
    )
    assert out.stdout.strip() == "ok"


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
    return found


def test_the_page_never_imports_torch_and_the_library_never_imports_streamlit():
    page_files = [ROOT / "app.py", *sorted((ROOT / "ui").rglob("*.py"))]
    assert len(page_files) > 1, "the ui package is missing"
    assert [p.name for p in page_files if "torch" in _imports(p)] == []
    library = sorted((ROOT / "hookviz").rglob("*.py"))
    assert [p.name for p in library if "streamlit" in _imports(p)] == []
