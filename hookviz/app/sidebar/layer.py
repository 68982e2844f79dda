"""The sidebar's layer box: every layer whose output is a map of the image, with its shape for
this image, the default starred; the "every module" switch; the layers that can't be picked."""

from __future__ import annotations

import streamlit as st

import hookviz
from hookviz.app.caches import models
from hookviz.app.view import state
from hookviz.core.methods import CLASSLESS

LAYER_NOTE = "layer_note"  # the caption under the layer box (its type and shape)


def layer_section(
    loaded: hookviz.LoadedModel, name: str, pretrained: bool, input_size: tuple[int, int]
) -> tuple[str, tuple[str, str]]:
    """The layer box with what it picked, and the box's widget key and label of it. A pick
    reruns the whole page, not fragments: a layer change redraws most of it anyway, and a
    fragment run that computes a new layer's forward pass is long enough to be interrupted by
    the next control change, which left the last layer's slider beside the new layer's
    pictures (7 of 10 tries with a slider step 50-150 ms after the pick; none as a full run).
    (The browser shows the pictures of a layer it has seen at once, ``browser.pictures.Swap``.)"""
    table = hookviz.layer_table(loaded)
    every = bool(state.wish("all_modules"))
    layers = {layer.name: layer for layer in (table.hookable if every else table.distinct)}
    names = list(layers)
    shapes = models.layer_shapes(name, pretrained, *input_size)
    wished = state.wish("layer")
    if wished is not None and wished not in layers:
        wished = table.canonical(wished)  # a name for the same tensor
    current = state.shown("layer", wished if wished in layers else table.default)

    def label(layer: str) -> str:
        # name and shape only: the sidebar is narrow (the type is in the caption below)
        channels, height, width = shapes.get(layer) or layers[layer].shape
        star = "  ★" if layer == table.default else ""
        blank = "  (no gradient)" if layers[layer].zero_gradient else ""
        return f"{layer} · {channels}×{height}×{width}{star}{blank}"

    height, width = input_size
    # the labels carry this image's shapes: a new input size needs a fresh widget
    key = f"layer@{height}x{width}:{every}"
    chosen = state.widget(
        "layer",
        st.selectbox,
        current,
        "Target layer",
        names,
        format_func=label,
        key=key,
        help="Modules whose output is a map of the image (a transformer's patch tokens count, "
        "as a grid), in execution order, with their output shape for this image (★ = the "
        "default: the last layer whose grid follows the image and reaches the class score; "
        "'no gradient': the class score does not depend on it). Deep layers: coarse maps of "
        "object parts; early layers: fine maps of edges and colours.",
    )
    # (keyed: the browser fades it while it shows another layer's pictures, ``browser.pictures``)
    # (it names the layer in full: a long name is cut in the box)
    st.container(key=LAYER_NOTE).caption(
        f"{chosen}: {layers[chosen].type_name} · output "
        f"{'×'.join(map(str, shapes.get(chosen, ())))} for this image"
        + (" (the patch tokens, as a grid)" if loaded.tokens is not None else "")
    )
    if layers[chosen].note:
        st.warning(f"{layers[chosen].note}. Pick ★ {table.default} for a heatmap.")
    state.widget(
        "all_modules",
        st.toggle,
        every,
        f"Show every module ({len(table.hookable)} instead of {len(table.distinct)})",
        help="The short list leaves out Identity modules and containers that only pass on "
        "their last child's output (the same tensor under a second name).",
    )
    if table.excluded:
        with st.expander(f"{len(table.excluded)} modules can't be picked"):
            for layer in table.excluded:
                st.caption(layer.reason)
    return chosen, (key, label(chosen))


def zero_gradient(
    loaded: hookviz.LoadedModel, name: str, method: str = "gradcam"
) -> hookviz.LayerInfo | None:
    """Layer ``name``'s entry where the class scores do not depend on it (a ViT's layers after
    its last attention: a gradient CAM is then blank by construction; a method without a class,
    such as Eigen-CAM, is not), else None."""
    table = hookviz.layer_table(loaded)
    found = [info for info in table.layers if info.name == name and info.zero_gradient]
    return found[0] if found and method not in CLASSLESS else None
