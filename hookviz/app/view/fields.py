"""Every value of the view: its default, how the address reads and writes it, and what a value
read from the address must satisfy. The display defaults are the library's
(``hookviz.render``), so that the page and the "Reproduce in Python" snippet agree.

A value whose default is None means "chosen by the page": the model's default layer, the
runner-up class to contrast, the strongest channel, no channel overlay.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import hookviz
from hookviz import render
from hookviz.app.view.target import TOP1, ViewTarget


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, tuple):
        return ",".join(str(v) for v in value)
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


@dataclass(frozen=True)
class Field:
    """One value of the view.

    Attributes:
        default: its value when nothing was chosen (left out of the URL).
        parse: turns the URL's text into a value (ValueError or KeyError when it can't).
        sane: whether a parsed URL value makes sense at all (an opacity of 7 does not: it falls
            back to the default; values that depend on the model are clamped later instead).
        text: the URL's text of a value (``parse`` reads it back).
    """

    default: Any
    parse: Callable[[str], Any] = str
    sane: Callable[[Any], bool] = lambda value: True
    text: Callable[[Any], str] = _text


def _flag(text: str) -> bool:
    return {"1": True, "true": True, "0": False, "false": False}[text.lower()]


def _channels(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split(",") if part != "")


def _target() -> Field:
    return Field(TOP1, ViewTarget.parse, text=ViewTarget.text)


FIELDS: dict[str, Field] = {
    # shared sidebar
    # the uploaded (or opened) file's name; None: the sample. A link cannot carry the file
    # itself: it names it, so whoever opens the link is told what they do not see.
    "image": Field(None),
    "model": Field(hookviz.DEFAULT_MODEL),
    "weights": Field("pretrained"),
    "layer": Field(None),  # None: the model's default layer
    "all_modules": Field(False, _flag),
    "target": _target(),
    "method": Field("gradcam"),
    # explore: display
    "channels": Field(render.DEFAULT_CHANNELS, int, lambda n: n >= 1),
    "order": Field(render.DEFAULT_ORDER),
    "scale": Field(render.DEFAULT_SCALE),
    # (a colormap the renderer lacks falls back here: the pages pass it straight to it)
    "grid_cmap": Field(render.DEFAULT_GRID_CMAP, sane=lambda name: name in render.COLORMAPS),
    "cam_cmap": Field(render.DEFAULT_CAM_CMAP, sane=lambda name: name in render.COLORMAPS),
    "alpha": Field(render.DEFAULT_ALPHA, float, lambda a: 0.0 <= a <= 1.0),
    "channel_overlay": Field(None, int, lambda n: n >= 0),  # None: off
    # beyond one heatmap
    "beyond_panel": Field("gallery"),
    "contrast": Field(None, int, lambda n: n >= 0),  # None: the runner-up
    "trust": Field(False, _flag),
    "rollout_fusion": Field("mean"),
    "rollout_discard": Field(0.9, float, lambda x: 0.0 <= x < 1.0),
    "overview_all": Field(False, _flag),  # the whole network: every layer, not the stages
    "concepts_k": Field(5, int, lambda k: 2 <= k <= 10),
    "relevance_rule": Field(
        "epsilon_plus_flat", sane=lambda name: name in hookviz.RELEVANCE_COMPOSITES
    ),
    # present
    "present_picture": Field("overlay"),
    # compare
    "compare_model": Field(None),  # None: the first other model that loads offline
    "compare_weights": Field("pretrained"),
    "compare_layer": Field(None),  # None: that model's default layer
    # the other model's class where it has none of the sidebar's name, or is asked its own
    "compare_target": _target(),
    "compare_match": Field(True, _flag),  # explain the sidebar's class in both, by name
    # what a channel looks for
    "vis_channel": Field(None, int, lambda n: n >= 0),  # None: the strongest on the image
    "vis_steps": Field(128, int, lambda n: n in (32, 64, 128, 256, 512)),
    "vis_seed": Field(0, int, lambda n: n >= 0),
    "vis_count": Field(1, int, lambda n: n in (1, 2, 4)),
    "vis_y": Field(None, int, lambda n: n >= 0),  # None: the channel's strongest position
    "vis_x": Field(None, int, lambda n: n >= 0),
    # dataset run
    "run_dir": Field(None),
    # diagnose
    "diagnose_panel": Field("stats"),
    "intervene_mode": Field("scale"),
    "intervene_channels": Field(None, _channels),  # None: the three strongest
    "intervene_scale": Field(0.0, float, lambda x: 0.0 <= x <= 3.0),
    "intervene_keep": Field(16, int, lambda n: n >= 1),
}
