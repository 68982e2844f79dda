"""MkDocs hook: a tutorial's widget (``hookviz.show``) shows on the site as its still picture.

mkdocs-jupyter executes each tutorial with nbclient, which stores the state of every widget in
the notebook's metadata (mkdocs-jupyter turns that on). nbconvert then writes each widget
output as a live widget, loaded at reading time from a CDN with the whole state (megabytes of
it), although the site reads offline and no kernel answers a pick there. Without the state,
nbconvert shows the widget's next output instead: the picture (``image/png``) the widget puts
beside its view. The build's nbconvert clears the executed notebook's metadata but its language
and kernel (``ClearMetadataPreprocessor``, which runs after the execution), configured in
``jupyter/jupyter_nbconvert_config.json`` beside this hook: its folder is put first on
``JUPYTER_CONFIG_PATH`` for the build (the kernels the build starts read no nbconvert setting).
"""

from __future__ import annotations

import os
from pathlib import Path

CONFIG = Path(__file__).resolve().parent / "jupyter"


def on_config(config):
    given = os.environ.get("JUPYTER_CONFIG_PATH", "").split(os.pathsep)
    paths = dict.fromkeys([str(CONFIG), *filter(None, given)])
    os.environ["JUPYTER_CONFIG_PATH"] = os.pathsep.join(paths)
    return config
