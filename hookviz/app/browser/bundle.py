"""The browser code as Streamlit takes it: one script per component, made of the modules in
``js/`` that its entry needs (``main.js`` for the pictures, ``pictures.py``; ``tab.js`` for
what the whole tab keeps, ``tab.py``).

Each module is an ES module of one mechanism, with ``import``/``export`` lines that say what it
takes from the others. A Streamlit component gets its JavaScript as one text (run as a module
from a blob: relative imports cannot resolve), so the modules are put one after the other in
the order of their imports, their ``import`` lines dropped and their ``export`` words taken
off (the entry's ``export default`` stays: it is the component's), after the ``DOM``
constant of ``streamlit_dom``. They then share one scope: a top-level name defined by two
modules is refused here rather than left to fail in the browser.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from hookviz.app.browser import streamlit_dom

JS = Path(__file__).with_name("js")
ENTRY = "main.js"

_IMPORT = re.compile(r'^import\s+\{[^}]*\}\s+from\s+"\./([\w.-]+\.js)";\n', re.M)
_EXPORT = re.compile(r"^export (?!default)", re.M)
_DEFINED = re.compile(r"^(?:export\s+)?(?:async\s+)?(?:function|const|let|class)\s+(\w+)", re.M)


class BundleError(ValueError):
    """The modules cannot be put together (an unknown import, a cycle, a name defined twice)."""


def module_order(folder: Path = JS, entry: str = ENTRY) -> list[str]:
    """The modules ``entry`` needs, each after the modules it imports."""
    order: list[str] = []
    visiting: list[str] = []

    def visit(name: str) -> None:
        if name in order:
            return
        if name in visiting:
            raise BundleError(f"import cycle: {' -> '.join([*visiting, name])}")
        path = folder / name
        if not path.is_file():
            raise BundleError(f"{visiting[-1] if visiting else 'bundle'} imports missing {name}")
        visiting.append(name)
        for imported in _IMPORT.findall(path.read_text(encoding="utf-8")):
            visit(imported)
        visiting.pop()
        order.append(name)

    visit(entry)
    return order


def bundle(folder: Path = JS, entry: str = ENTRY) -> str:
    """The one script: ``DOM``, then each module in ``module_order``, without its imports."""
    parts = [f"const DOM = {json.dumps(streamlit_dom.for_browser(), indent=2)};\n"]
    defined: dict[str, str] = {"DOM": "streamlit_dom"}
    for name in module_order(folder, entry):
        text = (folder / name).read_text(encoding="utf-8")
        for symbol in _DEFINED.findall(text):
            if symbol in defined:
                raise BundleError(f"{symbol} is defined by both {defined[symbol]} and {name}")
            defined[symbol] = name
        body = _EXPORT.sub("", _IMPORT.sub("", text))
        if re.search(r"^import\b", body, re.M):
            raise BundleError(
                f"{name}: an import this bundler cannot read (import {{...}} from ...)"
            )
        parts.append(f"// ---- {name}\n{body}")
    return "\n".join(parts)
