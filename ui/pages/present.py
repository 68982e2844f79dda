"""The Present page, for a projector: one picture as large as the screen allows (the overlay,
the heatmap alone or the feature maps) with its texts in large type, and the keyboard to walk
the room through the network: ← and → step through its stages (the layer sweep's layers, and
the sidebar's own), ↑ and ↓ through this image's top-5 classes. Every other choice is the
sidebar's, and a step is an ordinary choice of layer or class (in the address, undone by
Back). The picture's full-screen button fills the projector; its value under the pointer
answers "how strong is it there?".
"""

from __future__ import annotations

import streamlit as st

import hookviz
from ui import panels
from ui.browser import pictures
from ui.pages.explore import display
from ui.pages.explore.page import DARK_BACKGROUND, overlay_texts
from ui.sidebar.scene import Scene
from ui.view import state
from ui.view.target import TOP1, Target

PICTURES = {"overlay": "Over the image", "heatmap": "Heatmap alone", "grid": "Feature maps"}
STAGES = 8  # layers a walk through the network steps through (the sidebar's own added)


def page(scene: Scene) -> None:
    if not panels.header("Present", scene):
        return
    if not panels.explains_classes(scene, "Present (its stages end in the top-5 classes)"):
        return
    view, analysis = scene.view, scene.analysis
    shown = panels.pick("present_picture", PICTURES, "overlay")
    _steps(scene)
    with st.container(key="present"):
        pictures.image_sources(view.digest)
        options = display.display_options(analysis)
        if shown == "grid":
            _grid(scene, options)
        else:
            title, alt, captions = overlay_texts(scene, analysis)
            if shown == "overlay":
                pictures.overlay(
                    view.key, options["alpha"], options["cam_cmap"], title, alt, captions, None
                )
            else:
                pictures.heatmap(view.key, options["cam_cmap"], alt, [title, *captions], None)
    st.caption(
        "Keys: ← → the network's stages, ↑ ↓ this image's top-5 classes (click the page first "
        "if a key does nothing). The picture's full-screen button fills the projector; Back "
        "undoes a step."
    )


def walk(loaded: hookviz.LoadedModel, layer: str) -> list[str]:
    """The layers ← and → step through: the layer sweep's stages and ``layer``, in the order
    the network runs them."""
    table = hookviz.layer_table(loaded)
    order = {info.name: position for position, info in enumerate(table.layers)}
    chosen = {*hookviz.stage_layers(loaded, STAGES), layer}
    return sorted(chosen, key=lambda name: order.get(name, len(order)))


def _steps(scene: Scene) -> None:
    view, analysis = scene.view, scene.analysis
    layers = walk(scene.loaded, view.layer)
    at = layers.index(view.layer)
    top = [p.index for p in analysis.predictions]
    shown = analysis.cam.class_index
    rank = top.index(shown) if shown in top else None

    def target(index: int) -> Target:
        return TOP1 if index == top[0] else Target.of_class(index)

    earlier, later, up, down = st.columns(4)
    earlier.button(
        f"Earlier: {layers[at - 1]}" if at > 0 else "First stage",
        key="present_earlier",
        shortcut="Left",
        disabled=at == 0,
        on_click=state.choose,
        args=("layer", layers[at - 1] if at > 0 else view.layer),
        width="stretch",
    )
    later.button(
        f"Later: {layers[at + 1]}" if at + 1 < len(layers) else "Last stage",
        key="present_later",
        shortcut="Right",
        disabled=at + 1 == len(layers),
        on_click=state.choose,
        args=("layer", layers[at + 1] if at + 1 < len(layers) else view.layer),
        width="stretch",
    )
    previous = top[(rank - 1) % len(top)] if rank is not None else top[0]
    following = top[(rank + 1) % len(top)] if rank is not None else top[0]
    names = {p.index: p.name for p in analysis.predictions}
    up.button(
        f"Class: {names[previous]}",
        key="present_up",
        shortcut="Up",
        on_click=state.choose,
        args=("target", target(previous)),
        width="stretch",
    )
    down.button(
        f"Class: {names[following]}",
        key="present_down",
        shortcut="Down",
        on_click=state.choose,
        args=("target", target(following)),
        width="stretch",
    )


def _grid(scene: Scene, options: dict) -> None:
    analysis, key = scene.analysis, scene.view.key
    features = analysis.features
    channels, height, width = features.activations.shape
    dark = st.context.theme.type == "dark"
    pictures.grid(
        key,
        display.grid_orders(analysis, options),
        options["order"],
        options["orderings"],
        options["scale"],
        options["grid_cmap"],
        DARK_BACKGROUND if dark else (255, 255, 255),
        shown=options["channels"],
        wished=int(state.wish("channels")),
        title=f"Feature maps of {features.layer}",
        caption=f"{{n}} of {channels} channels, {height}×{width} cells each",
        alt=f"feature maps of {features.layer}: {{n}} channels",
        swap=None,
    )
