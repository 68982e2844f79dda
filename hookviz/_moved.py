"""Old module paths keep working: ``import hookviz.cam`` and ``from hookviz.pipeline import ...``
name the modules that now live in the ``core``, ``models`` and ``insight`` packages.

An import hook rather than twenty one-line files: the folder then shows only the real layout,
and each old name is the very same module object as the new one (so monkeypatching either
patches both).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from types import ModuleType

MOVED = {
    "hookviz.batch": "hookviz.core.batch",
    "hookviz.cam": "hookviz.core.cam",
    "hookviz.devices": "hookviz.core.devices",
    "hookviz.features": "hookviz.core.features",
    "hookviz.hooks": "hookviz.core.hooks",
    "hookviz.inputs": "hookviz.core.inputs",
    "hookviz.layers": "hookviz.core.layers",
    "hookviz.lean_graph": "hookviz.core.lean_graph",
    "hookviz.methods": "hookviz.core.methods",
    "hookviz.pipeline": "hookviz.core.pipeline",
    "hookviz.preprocess": "hookviz.core.preprocess",
    "hookviz.bundled": "hookviz.models.bundled",
    "hookviz.diagnostics": "hookviz.insight.diagnostics",
    "hookviz.evidence": "hookviz.insight.evidence",
}


class _Alias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds an old name and hands back the module that lives at the new one."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in MOVED:
            return None
        return importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec) -> ModuleType:
        return importlib.import_module(MOVED[spec.name])

    def exec_module(self, module: ModuleType) -> None:
        """Nothing to run: the module was executed under its new name."""


def install(package: ModuleType) -> None:
    """Register the alias finder once and bind each old name as an attribute of the package
    (so ``hookviz.cam.to_pixel_grid`` works without an import statement)."""
    if not any(isinstance(finder, _Alias) for finder in sys.meta_path):
        sys.meta_path.append(_Alias())
    for old, new in MOVED.items():
        module = importlib.import_module(new)
        sys.modules.setdefault(old, module)
        setattr(package, old.rpartition(".")[2], module)
