"""The "Compare" page: the sidebar's image, model, layer and class beside a second model with
its own layer, the class matched by name where both have it, and where the two heatmaps differ.

"Did fine-tuning change what my model looks at?": put the ImageNet model in the sidebar and
your fine-tuned one here (or the other way round), on the same image.
"""

from __future__ import annotations

import streamlit as st
from PIL import Image

import hookviz
from hookviz import render
from hookviz.app import feedback, panels
from hookviz.app.caches import analyses, encoded, models
from hookviz.app.method_texts import METHOD_LABELS
from hookviz.app.sidebar import model_picker
from hookviz.app.sidebar.model_picker import WEIGHTS
from hookviz.app.sidebar.scene import Scene
from hookviz.app.view import state
from hookviz.app.view.keys import AnalysisKey
from hookviz.app.view.literal import literal
from hookviz.app.view.target import TOP1, ViewTarget
from hookviz.core.methods import CLASSLESS
from hookviz.insight.compare import class_named, heatmap_correlation, heatmap_difference

UNLIKELY = 0.01  # a matched class the second model gives less than this is said to be unlikely


def page(scene: Scene) -> None:
    if not panels.header("Compare two models", scene):
        return
    if not panels.explains_classes(scene, "Compare (a class matched by name in two models)"):
        return
    first = scene.analysis
    st.caption(
        "Left: the image, model, layer and class of the sidebar. Right: a second model, with "
        "its own layer; the class is matched by name when it has one of that name. Each "
        "heatmap is scaled to [0, 1] on its own, so the difference shows where the two look, "
        "not how strongly."
    )
    name, pretrained, loaded = _second_model(scene)
    if loaded is None:
        return
    layer = _second_layer(scene, name, pretrained, loaded)
    method = first.cam.method if first.cam.method not in hookviz.SLOW_METHODS else "gradcam"
    try:
        working = f"The hooked forward pass of {literal(loaded.name)}…"
        with feedback.working(working, queue=loaded.lock):
            kept = analyses.forward_pass(scene.view.digest, name, pretrained, layer)
    except hookviz.HookvizError as exc:
        st.error(f"The second model could not analyse this image: {exc}")
        return
    target, matched = _second_target(first, loaded, kept.predictions, method)
    with feedback.working("Computing the gradient…", queue=loaded.lock):
        second = analyses.analysis(
            AnalysisKey(scene.view.digest, name, pretrained, layer, target, method)
        )
    left, right = st.columns(2, gap="large")
    with left:
        _side(scene, scene.view.model, scene.view.pretrained, first, "sidebar")
    with right:
        _side(scene, name, pretrained, second, "matched by name" if matched else "")
        if matched and second.cam.probability < UNLIKELY:
            st.info(
                f"{literal(loaded.name)} gives “{literal(second.cam.class_name)}” p = "
                f"{second.cam.probability:.2%}: it does not see this class in the image, so its "
                "heatmap shows the little evidence there is for it, not what it looks at. Pick "
                "its own top-1 to compare what each model sees."
            )
            st.button(
                "Explain its own classes instead",
                key="compare_own_classes",
                on_click=state.choose,
                args=("compare_match", False),
            )
    _difference(scene, first, second, method)


def _second_model(scene: Scene) -> tuple[str, bool, hookviz.LoadedModel | None]:
    row = st.columns([2, 1])
    weights_wish = state.wish("compare_weights")
    wished = state.wish("compare_model")
    choices = model_picker.model_choices(wished or "", weights_wish)
    ready = [n for n in choices.names if n in choices.uploads or choices.catalog[n].ready]
    fallback = next((n for n in ready if n != scene.view.model), choices.names[0])
    with row[0]:
        name = state.widget(
            "compare_model",
            st.selectbox,
            state.resolve("compare_model", state.options_valid(choices.names), fallback),
            "Second model",
            choices.names,
            format_func=choices.label,
            key=choices.widget_key("compare_model"),
            help="Any model of the sidebar's list: the zoo, timm, model cards, yours.",
        )
    pretrained = True
    if not choices.own_weights(name):
        with row[1]:
            weights = state.widget(
                "compare_weights",
                st.radio,
                state.resolve("compare_weights", state.options_valid(WEIGHTS)),
                "Its weights",
                WEIGHTS,
                horizontal=True,
            )
        pretrained = weights == "pretrained"
    try:
        with feedback.working(f"Loading {choices.label(name)}…"):
            return name, pretrained, models.model(name, pretrained)
    except hookviz.HookvizError as exc:
        st.error(f"Cannot load the second model **{choices.label(name)}**: {exc}")
        return name, pretrained, None


def _second_layer(scene: Scene, name: str, pretrained: bool, loaded: hookviz.LoadedModel) -> str:
    table = hookviz.layer_table(loaded)
    names = [layer.name for layer in table.distinct]
    wished = state.wish("compare_layer")
    if wished is not None and wished not in names:
        wished = table.canonical(wished)
    default = table.default
    return state.widget(
        "compare_layer",
        st.selectbox,
        state.resolve("compare_layer", lambda n: n == wished and n in names, default),
        "Its layer",
        names,
        format_func=lambda n: n + ("  ★" if n == default else ""),
        # another model, other layers: a fresh box (a kept one would show the old labels)
        key=f"compare_layer@{name}:{pretrained}",
        help="★ marks this model's default layer (its last convolutional stage).",
    )


def _second_target(
    first: hookviz.Analysis,
    loaded: hookviz.LoadedModel,
    predictions: tuple[hookviz.Prediction, ...],
    method: str,
) -> tuple[ViewTarget, bool]:
    """The second model's class: the first's by name if it has it (unless the user asked for
    its own), else one of its top-5."""
    same = class_named(loaded, first.cam.class_name) if method not in CLASSLESS else None
    if same is not None:
        match = state.widget(
            "compare_match",
            st.toggle,
            bool(state.wish("compare_match")),
            f"The same class in both, “{literal(first.cam.class_name)}”",
            help="Off: the second model explains a class of its own (its top-1 or top-5).",
        )
        if match:
            st.caption(f"Both explain “{literal(first.cam.class_name)}” (matched by name).")
            return ViewTarget.of_class(same), True
    top = {p.index: p for p in predictions}
    options = [TOP1, *(ViewTarget.of_class(index) for index in top)]

    def label(target: ViewTarget) -> str:
        best = predictions[0] if target.is_top1 else top[target.index]
        prefix = "Top-1: " if target.is_top1 else ""
        return f"{prefix}{best.name} ({best.probability:.1%})"

    if method not in CLASSLESS and same is None:
        st.caption(
            f"The second model has no class called “{literal(first.cam.class_name)}”: pick one "
            "of its own."
        )
    target = state.widget(
        "compare_target",
        st.selectbox,
        state.resolve("compare_target", state.options_valid(options)),
        "Its class",
        options,
        format_func=label,
        key=f"compare_target@{loaded.name}:{predictions[0].index}",
    )
    return target, False


def _side(scene: Scene, name: str, pretrained: bool, analysis: hookviz.Analysis, note: str) -> None:
    cam = analysis.cam
    title = METHOD_LABELS[cam.method].split(" (")[0]
    # labelled as the model box labels it for these weights ("random weights", not "download")
    choices = model_picker.model_choices(name, "pretrained" if pretrained else "untrained")
    shown = choices.label(name) if name in choices.names else name
    st.markdown(f"**{shown}**" + (f" · {note}" if note else ""))
    alpha, cmap = float(state.wish("alpha")), str(state.wish("cam_cmap"))
    st.image(encoded.small_overlay(scene.view.digest, cam, alpha, cmap))
    subject = "no class" if cam.method in CLASSLESS else f"“{literal(cam.class_name)}”"
    st.caption(f"{title} at {cam.layer} · {subject} · p = {cam.probability:.1%}")
    for rank, prediction in enumerate(analysis.predictions, start=1):
        st.progress(
            min(max(prediction.probability, 0.0), 1.0),
            text=f"{rank}. {literal(prediction.name)} · {prediction.probability:.1%}",
        )


def _difference(
    scene: Scene, first: hookviz.Analysis, second: hookviz.Analysis, method: str
) -> None:
    st.markdown("**Where they differ**")
    a, b = first.cam, second.cam
    if method in CLASSLESS:
        label = METHOD_LABELS[method].split(" (")[0]
        st.info(f"{label} has no class: the two pictures are each model's own map of the image.")
        return
    if a.class_name.strip().lower() != b.class_name.strip().lower():
        st.info(
            f"They explain different classes (“{literal(a.class_name)}” and "
            f"“{literal(b.class_name)}”): a difference of their heatmaps would mean nothing. "
            "It is drawn when both explain a class of the same name."
        )
        return
    picture = render.fit_within(scene.image, 360)
    size = (picture.height, picture.width)
    first_map, second_map = a.heatmap_at(size), b.heatmap_at(size)
    difference = heatmap_difference(first_map, second_map)
    coloured = Image.fromarray(render.colorize((difference + 1.0) / 2.0, "RdBu_r"))
    columns = st.columns([1, 1.2])
    columns[0].image(render.jpeg_bytes(render.blend(picture, coloured, 0.6)))
    r = heatmap_correlation(first_map, second_map)
    columns[1].markdown(
        f"Red: only the left model looks there; blue: only the right one; white: both or "
        f"neither. Agreement of the two heatmaps: **r = {r:.2f}** (Pearson, 1 = the same "
        "places)."
    )
    columns[1].caption(
        "hookviz.compare(first, second, image) gives the same in Python: both analyses, the "
        "matched class, the difference on the photo's pixel grid and r."
    )
