"""The Present page, for a projector: one picture as large as the screen allows (the overlay,
the heatmap alone or the feature maps) with its texts in large type, and the keyboard to walk
the room through the network: ← and → step through its stages (the layer sweep's layers, and
the sidebar's own), ↑ and ↓ through this image's top-5 classes. Every other choice is the
sidebar's, and a step is an ordinary choice of layer or class (in the address, undone by
Back). The picture's full-screen button fills the projector; its value under the pointer
answers "how strong is it there?".

The page is the picture: no app title or page heading (``main.py`` leaves them out here), the
steps in one slim row above it, the picture sized to the window's height (the CSS in
``hookviz/app/browser/pictures.py``), so the browser's own full screen (F11) shows the same page
larger; the choice of picture and the keys' hint below it. Esc, or the row's small "Leave Present"
button, goes back to Explore.
"""

from __future__ import annotations

import streamlit as st
from streamlit.delta_generator import DeltaGenerator

import hookviz
from hookviz.app import panels
from hookviz.app.browser import pictures
from hookviz.app.method_texts import METHOD_LABELS
from hookviz.app.pages import addresses
from hookviz.app.pages.explore import display
from hookviz.app.pages.explore.page import grid, overlay_texts
from hookviz.app.sidebar.scene import Scene
from hookviz.app.view import state
from hookviz.app.view.literal import literal
from hookviz.app.view.target import TOP1, ViewTarget

PICTURES = {"overlay": "Over the image", "heatmap": "Heatmap alone", "grid": "Feature maps"}
STAGES = 8  # layers a walk through the network steps through (the sidebar's own added)


def page(scene: Scene) -> None:
    if scene.pending:  # (no heading: the page is the picture, and the top navigation names it)
        name = METHOD_LABELS[scene.view.method]
        st.info(f"{name} is still to run: open **Explore** to run it, or pick another method.")
        return
    if not panels.explains_classes(scene, "Present (its stages end in the top-5 classes)"):
        return
    view, analysis = scene.view, scene.analysis
    # in the page's order: the one slim row of steps, the picture, then what a teacher sets
    # before the lesson (what the picture is) and the keys' hint, below the room's view
    row = st.container(horizontal=True, horizontal_alignment="center", key="present_steps")
    picture = st.container(key=pictures.PRESENT)
    below = st.container()
    _steps(scene, row)
    # Esc presses it too (js/projector.js, which knows its key), unless the key closes a list
    # or edits a widget (a Streamlit shortcut would fire there too)
    leave = row.button("Leave Present", key="present_leave", icon=":material/close:", help="Esc")
    if leave:
        st.switch_page(addresses.page_at(addresses.EXPLORE))
    with below:
        shown = panels.pick("present_picture", PICTURES)
    with picture:
        pictures.image_sources(view.digest)
        options = display.display_options(analysis)
        if shown == "grid":
            grid(scene, analysis, view.key, options, previous=False, on_present=True)
        else:
            title, alt, captions = overlay_texts(scene, analysis)
            if shown == "overlay":
                pictures.overlay(
                    view.key, options["alpha"], options["cam_cmap"], title, alt, captions, None
                )
            else:  # (its indices, which the overlay otherwise sends)
                pictures.heat_indices(view.key)
                pictures.heatmap(view.key, options["cam_cmap"], alt, [title, *captions], None)
    below.caption(
        "Keys: ← → the network's stages, ↑ ↓ this image's top-5 classes, Esc leaves (click the "
        "page first if a key does nothing). F11 or the picture's full-screen button fills the "
        "projector; Back undoes a step."
    )


def walk(loaded: hookviz.LoadedModel, layer: str) -> list[str]:
    """The layers ← and → step through: the layer sweep's stages and ``layer``, in the order
    the network runs them."""
    table = hookviz.layer_table(loaded)
    order = {info.name: position for position, info in enumerate(table.layers)}
    chosen = {*hookviz.stage_layers(loaded, STAGES), layer}
    return sorted(chosen, key=lambda name: order.get(name, len(order)))


def _steps(scene: Scene, row: DeltaGenerator) -> None:
    """The four step buttons, in ``row``."""
    view, analysis = scene.view, scene.analysis
    layers = walk(scene.loaded, view.layer)
    at = layers.index(view.layer)
    earlier, later = layers[max(at - 1, 0)], layers[min(at + 1, len(layers) - 1)]
    top = [p.index for p in analysis.predictions]
    names = {p.index: p.name for p in analysis.predictions}
    shown = analysis.cam.class_index
    rank = top.index(shown) if shown in top else None
    previous = top[(rank - 1) % len(top)] if rank is not None else top[0]
    following = top[(rank + 1) % len(top)] if rank is not None else top[0]

    def target(index: int) -> ViewTarget:
        return TOP1 if index == top[0] else ViewTarget.of_class(index)

    first, last = at == 0, at == len(layers) - 1
    buttons = (  # (key, shortcut, label, the choice it makes)
        ("earlier", "Left", "First stage" if first else f"Earlier: {earlier}", ("layer", earlier)),
        ("later", "Right", "Last stage" if last else f"Later: {later}", ("layer", later)),
        # (a button's label is markdown: class names may come from a user's file)
        ("up", "Up", f"Class: {literal(names[previous])}", ("target", target(previous))),
        ("down", "Down", f"Class: {literal(names[following])}", ("target", target(following))),
    )
    for name, shortcut, label, choice in buttons:
        row.button(
            label,
            key=f"present_{name}",
            shortcut=shortcut,
            disabled=choice == ("layer", view.layer),  # (at the first or the last stage)
            on_click=state.choose,
            args=choice,
        )
