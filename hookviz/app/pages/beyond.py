"""The "Beyond one heatmap" page: the top-5 gallery, evidence against and contrast, the layer
sweep, Grad-CAM step by step, the deletion/insertion trust check, attention rollout and the
layer's concepts (Deep Feature Factorization) and the relevance of its channels (LRP and its
conditional heatmaps). One panel at a time (the
chosen panel is part of the view and the link), and only that panel computes.
"""

from __future__ import annotations

import base64
import functools

import pandas as pd
import streamlit as st
from PIL import Image

import hookviz
from hookviz import marks, render
from hookviz.app import charts, feedback, panels
from hookviz.app.caches import encoded, insight
from hookviz.app.method_texts import METHOD_LABELS
from hookviz.app.pages import addresses
from hookviz.app.sidebar import layer
from hookviz.app.sidebar.scene import Scene
from hookviz.app.texts import STEPS_HELP, TRUST_HELP
from hookviz.app.view import state
from hookviz.app.view.literal import literal
from hookviz.core.features import order_by_weight
from hookviz.core.methods import NEEDS_GRADIENT

HEAD_FUSIONS = ("mean", "max", "min")

PANELS = {
    "gallery": "Top-5 gallery",
    "against": "Against / contrast",
    "sweep": "Whole network",
    "steps": "Step by step",
    "trust": "Trust check",
    "rollout": "Attention rollout",
    "concepts": "Concepts",
    "relevance": "Relevance",
}
# the channels the Relevance panel shows one by one, most relevant first
RELEVANT_CHANNELS = 6
RULE_WORDS = {
    "epsilon_plus_flat": "ε+ flat (z+ on convolutions, ε on dense layers, flat first layer)",
    "epsilon_plus": "ε+ (z+ on convolutions, ε on dense layers)",
    "epsilon_alpha2_beta1_flat": "ε α2β1 flat (α2β1 on convolutions, flat first layer)",
    "epsilon_alpha2_beta1": "ε α2β1 (α2β1 on convolutions)",
    "epsilon": "ε everywhere (close to input × gradient)",
}


def page(scene: Scene) -> None:
    if not panels.header("Beyond one heatmap", scene):
        return
    if not panels.explains_classes(scene, "Beyond one heatmap"):
        return
    panel = panels.pick("beyond_panel", PANELS)
    {
        "gallery": _gallery,
        "against": _against,
        "sweep": _sweep,
        "steps": _steps,
        "trust": _trust,
        "rollout": _rollout,
        "concepts": _concepts,
        "relevance": _relevance,
    }[panel](scene)


def _overlay(scene: Scene, cam: hookviz.GradCAM | hookviz.Rollout) -> bytes:
    return encoded.small_overlay(
        scene.view.digest, cam, float(state.wish("alpha")), str(state.wish("cam_cmap"))
    )


def _gallery(scene: Scene) -> None:
    view = scene.view
    method = view.method if view.method not in hookviz.SLOW_METHODS else "gradcam"
    if method in NEEDS_GRADIENT and _no_gradient_here(scene, "the five heatmaps"):
        return
    with feedback.working("A backward pass per top-5 class…", queue=scene.loaded.lock):
        cams = insight.gallery(view.digest, view.model, view.pretrained, view.layer, method)
    for column, item in zip(st.columns(len(cams)), cams, strict=True):
        column.image(_overlay(scene, item))
        column.caption(f"{literal(item.class_name)} · {item.probability:.1%}")
    slow = METHOD_LABELS[view.method]
    note = "" if method == view.method else f" (Grad-CAM: {slow} five times would take long)"
    st.caption(f"The CAM of each top-5 class, all from the same forward pass{note}.")


def _against(scene: Scene) -> None:
    view, cam = scene.view, scene.analysis.cam
    if _no_gradient_here(scene, "evidence against and the contrast"):
        return
    predictions = scene.analysis.predictions
    others = [p.index for p in predictions if p.index != cam.class_index] or [cam.class_index]
    names = {p.index: p.name for p in predictions}
    second = state.widget(
        "contrast",
        st.selectbox,
        state.resolve("contrast", state.options_valid(others), others[0]),
        "Rather than",
        others,
        format_func=lambda i: names.get(i, scene.loaded.class_name(i)),
        key=f"contrast@{view.digest[:10]}:{view.model}:{view.pretrained}:{cam.class_index}",
    )
    with feedback.working("Backward passes for the contrast…", queue=scene.loaded.lock):
        against, why = insight.against_and_contrast(
            view.digest, view.model, view.pretrained, view.layer, cam.class_index, second
        )
    left, right = st.columns(2)
    left.image(_overlay(scene, against))
    left.caption(f"Evidence against “{literal(cam.class_name)}” (Grad-CAM of the negated score)")
    if against.blank:
        _point_to_teaching_layer(
            scene,
            left,
            "Blank: at this layer the weighted sum of the channels is positive everywhere, so "
            "no region speaks against the class.",
        )
    right.image(_overlay(scene, why))
    right.caption(
        f"Why “{literal(cam.class_name)}” rather than "
        f"“{literal(names.get(second, second))}”: Grad-CAM of the difference of their scores"
    )


def _no_gradient_here(scene: Scene, what: str, stop: bool = True) -> bool:
    """Where the class scores do not depend on the sidebar's layer (a ViT's layers after its
    last attention: only the class token reaches the head), say so where the pictures would
    be, with the way out, instead of blank pictures (``stop``: draw none of them)."""
    info = layer.zero_gradient(scene.loaded, scene.view.layer)
    if info is None:
        return False
    table = hookviz.layer_table(scene.loaded)
    blank = "would be blank" if stop else "are blank"
    st.warning(f"{info.note}: {what} {blank}. Pick ★ {table.default} for them.")
    st.button(
        f"Use ★ {table.default}",
        key=f"no_gradient@{scene.view.layer}",
        on_click=state.choose,
        args=("layer", table.default),
    )
    return True


def _point_to_teaching_layer(scene: Scene, where, why: str) -> None:
    """Explain an empty picture (``why``) in ``where`` and offer a layer where every picture
    of this page shows something."""
    view = scene.view
    with feedback.working(
        "Looking for a layer where every picture shows something…", queue=scene.loaded.lock
    ):
        layer = insight.teaching_layer(
            view.digest, view.model, view.pretrained, scene.analysis.cam.class_index, view.layer
        )
    if layer is None:
        where.info(why + " Earlier layers may show it.")
        return
    where.info(why + f" At `{layer}` it does.")
    where.button(
        f"Go to {layer}",
        key=f"teach@{layer}:{why[:12]}",
        on_click=state.choose,
        args=("layer", layer),
        help="The deepest block-level layer before this one where the gradient varies inside "
        "each channel and the evidence has both signs.",
    )


def _sweep(scene: Scene) -> None:
    """The whole network at a glance: each stage's Grad-CAM, shape, receptive field and
    strongest channels, and a way into Explore at that stage."""
    view, cam = scene.view, scene.analysis.cam
    row = st.container(horizontal=True, vertical_alignment="center")
    every = state.widget(
        "overview_all",
        row.toggle,
        bool(state.wish("overview_all")),
        "Every layer",
        help="Every layer with a feature map, in the order they run, instead of the stages "
        "(the last layer at each resolution). Still one forward and one backward pass.",
    )
    if row.button(
        "Step through on Present",
        key="overview_present",
        icon=":material/slideshow:",
        help="Present, for a projector: ← and → walk the room through these stages, one "
        "picture as large as the screen.",
    ):
        st.switch_page(addresses.page_at(addresses.PRESENT))
    what = "every layer" if every else "every stage"
    with feedback.working(f"One forward and one backward over {what}…", queue=scene.loaded.lock):
        stages = insight.overview(view.digest, view.model, view.pretrained, cam.class_index, every)
    for column, stage in zip(_grid_cells(len(stages)), stages, strict=True):
        column.image(_overlay(scene, stage.cam))
        height, width = stage.cam.cam.shape
        column.caption(f"{stage.layer} · {height}×{width}")
        column.image(render.jpeg_bytes(_strongest_strip(stage.maps)))
        channels, sees = stage.shape[0], _field_words(stage.receptive_field, stages.input_size)
        column.caption(
            f"{channels} channels; strongest {', '.join(map(str, stage.channels))} · {sees}"
        )
        if column.button(
            "Explore",
            key=f"overview_explore@{stage.layer}",
            help=f"Open {stage.layer} on Explore: its feature maps and Grad-CAM.",
        ):
            state.choose("layer", stage.layer)
            st.switch_page(addresses.page_at(addresses.EXPLORE))
    st.caption(
        "The network stage by stage, in the order it runs: the Grad-CAM of the same class at the "
        "end of each stage (from one forward pass and one `torch.autograd.grad` call for all "
        "of them), the stage's strongest channels by mean activation, and how much of the "
        "model's input one cell of its grid sees (its receptive field). Early layers are "
        "sharp but see little and are less class-specific; deep layers are coarse, see most "
        "of the image and are semantic. hookviz.overview(loaded, image) gives the same in "
        "Python."
    )


PER_ROW = 6  # the whole network's layers to a row (the stages of most CNNs fit in one)


def _grid_cells(count: int) -> list:
    """``count`` cells in rows of ``PER_ROW`` (on a narrow screen they stack in reading
    order); the stages of a CNN in one row of their own width."""
    if count <= PER_ROW:
        return list(st.columns(count))
    cells = []
    for start in range(0, count, PER_ROW):
        cells.extend(st.columns(PER_ROW)[: min(PER_ROW, count - start)])
    return cells


def _strongest_strip(maps) -> Image.Image:
    """A stage's strongest channels side by side, each on its own range (viridis)."""
    tiles = [render.heatmap_image(_unit(channel), "viridis") for channel in maps]
    height = max(tile.height for tile in tiles)
    strip = Image.new("RGB", (sum(t.width for t in tiles) + 2 * (len(tiles) - 1), height), "white")
    left = 0
    for tile in tiles:
        strip.paste(tile, (left, 0))
        left += tile.width + 2
    return strip.resize((max(1, strip.width * 4), strip.height * 4), Image.Resampling.NEAREST)


def _field_words(field: tuple[int, int] | None, input_size: tuple[int, int]) -> str:
    if field is None:
        return "receptive field not followed through windowed attention"
    if field == input_size:
        return "sees the whole input"
    return f"sees {field[0]}×{field[1]} of the {input_size[0]}×{input_size[1]} input"


def _steps(scene: Scene) -> None:
    view, cam = scene.view, scene.analysis.cam
    no_gradient = _no_gradient_here(scene, "steps 2 to 7", stop=False)
    grid_cmap, cam_cmap = str(state.wish("grid_cmap")), str(state.wish("cam_cmap"))
    steps = insight.steps(view.digest, view.model, view.pretrained, view.layer, cam.class_index)
    top, _ = order_by_weight(scene.analysis.features.activations, steps.weights, "weight", 8)
    channels, height, width = steps.activations.shape
    first, second = st.columns(2)
    first.markdown(f"**1 · A** = output of `{view.layer}`: {channels}×{height}×{width}")
    # (two rows of four: tiles large enough to be read from the back of a room)
    first.image(
        render.feature_grid(steps.activations, top, cmap=grid_cmap, columns=4), width="stretch"
    )
    second.markdown(f"**2 · ∂y/∂A** for “{literal(cam.class_name)}”: {channels}×{height}×{width}")
    second.image(
        render.feature_grid(steps.gradients, top, cmap=grid_cmap, columns=4), width="stretch"
    )
    if no_gradient:
        second.info("Zero in every cell: only the class token reaches the head (above).")
    elif steps.flat_gradient:
        _point_to_teaching_layer(
            scene,
            second,
            "Flat tiles: the next operation is a global average pooling, which spreads the "
            "gradient evenly over every cell, so ∂y/∂A is one number per channel here and all "
            "the spatial detail of Grad-CAM comes from A.",
        )
    third, fourth = st.columns(2)
    third.markdown("**3 · α** = mean of each gradient map (the 8 largest |α|)")
    third.dataframe(
        pd.DataFrame({"channel": top, "α": steps.weights[top]}), hide_index=True, height=220
    )
    bound = float(abs(steps.weighted_sum).max()) or 1.0
    signed = render.colorize((steps.weighted_sum / bound + 1) / 2, "coolwarm")
    fourth.markdown("**4 · Σ α·A** (blue < 0 < red)")
    fourth.image(
        _cells(Image.fromarray(signed), 480, height, width), output_format="PNG", width="stretch"
    )
    fifth, sixth, seventh = st.columns(3)
    removed = float(steps.removed.max())
    fifth.markdown(f"**5 · removed by the ReLU** (max {removed:.3g})")
    removed_cells = _cells(render.heatmap_image(_unit(steps.removed), "gray"), 480, height, width)
    fifth.image(removed_cells, width="stretch")
    if no_gradient:
        fifth.caption("Nothing: every α is 0, so Σ α·A is 0 in every cell.")
    elif removed == 0.0:
        fifth.caption("Nothing: Σ α·A is positive in every cell at this layer.")
    sixth.markdown(f"**6 · ReLU(Σ α·A)**: {height}×{width}")
    cam_cells = _cells(render.heatmap_image(_unit(steps.cam), cam_cmap), 480, height, width)
    sixth.image(cam_cells, width="stretch")
    full_h, full_w = cam.size
    seventh.markdown(f"**7 · upsampled** to {full_w}×{full_h}")
    seventh.image(_overlay(scene, cam))
    st.markdown(STEPS_HELP)


def _cells(picture: Image.Image, width: int, height: int, columns: int) -> Image.Image:
    """A coarse map enlarged with visible cells (nearest: each cell is one value)."""
    return picture.resize((width, max(1, width * height // columns)), Image.Resampling.NEAREST)


def _unit(values):
    high = float(values.max())
    return values / high if high > 0 else values


def _trust(scene: Scene) -> None:
    view, cam = scene.view, scene.analysis.cam
    if cam.method in NEEDS_GRADIENT and _no_gradient_here(scene, "the heatmap the check tests"):
        return
    run = bool(state.shown("trust", bool(state.wish("trust"))))  # (a link may ask for it)
    if not run:
        st.button(
            "Run the trust check (68 forward passes)",
            key="trust_run",
            type="primary",
            on_click=state.choose,
            args=("trust", True),
        )
    else:
        with feedback.working(
            "Deleting and inserting pixels in heatmap order…", queue=scene.loaded.lock
        ):
            curves = insight.trust(
                view.digest, view.model, view.pretrained, view.layer, cam.class_index, cam.method
            )
        st.altair_chart(charts.trust(curves, cam.class_name), width="stretch")
        st.caption(
            f"Deletion area {curves.deletion_auc:.3f} (random {curves.deletion_random_auc:.3f},"
            f" lower is better) · insertion area {curves.insertion_auc:.3f} (random "
            f"{curves.insertion_random_auc:.3f}, higher is better)"
        )
        st.markdown(trust_verdict(curves))
    st.markdown(TRUST_HELP)


def trust_verdict(curves: hookviz.TrustCurves) -> str:
    """Whether the heatmap's order beat the random order, in one sentence."""
    deletion = curves.deletion_auc < curves.deletion_random_auc
    insertion = curves.insertion_auc > curves.insertion_random_auc
    if deletion and insertion:
        return (
            "**The heatmap beat random order on both curves**: the pixels it ranks first are "
            "the ones the model needs for this class."
        )
    if deletion or insertion:
        won, lost = ("deletion", "insertion") if deletion else ("insertion", "deletion")
        return (
            f"**The heatmap beat random order on {won} only**, not on {lost}: trust it with "
            "care here (another layer or method may do better)."
        )
    return (
        "**The heatmap did not beat random order**: here it points no better than chance to "
        "what the model needs for this class. Try another layer or method."
    )


def _rollout(scene: Scene) -> None:
    """Attention rollout: for ViTs, where the class token's information comes from."""
    view = scene.view
    if scene.loaded.tokens is None or scene.loaded.tokens.channels_last:
        st.info(
            "Attention rollout follows a vision transformer's class token through its "
            "attention layers: pick a ViT or DeiT (vit_b_16, timm:deit_tiny_patch16_224, …). "
            "For this model use a CAM method."
        )
        return
    left, right = st.columns(2)
    with left:
        fusion = state.widget(
            "rollout_fusion",
            st.segmented_control,
            state.resolve("rollout_fusion", state.options_valid(HEAD_FUSIONS)),
            "Head fusion",
            list(HEAD_FUSIONS),
            required=True,
            help="How each layer's attention heads are combined: their mean, or the strongest "
            "(max) or weakest (min) head at each pair of tokens.",
        )
    with right:
        discard = state.widget(
            "rollout_discard",
            st.slider,
            float(state.resolve("rollout_discard", lambda x: 0.0 <= x < 1.0)),
            "Discard ratio",
            0.0,
            0.95,
            step=0.05,
            help="The fraction of the weakest attention weights dropped in every layer "
            "(noise), never the class token's attention to itself.",
        )
    try:
        with feedback.working(
            "Rolling the attention out through every layer…", queue=scene.loaded.lock
        ):
            result = insight.rollout(view.digest, view.model, view.pretrained, fusion, discard)
    except hookviz.HookvizError as exc:
        st.error(f"Attention rollout failed: {exc}")
        return
    columns = st.columns([1, 1.2])
    columns[0].image(_overlay(scene, result))
    height, width = result.grid.shape
    columns[1].markdown(
        f"Attention rollout (Abnar & Zuidema 2020) through {result.layers} layers, on the "
        f"{height}×{width} patch grid: where the class token gathers its information from. "
        "It has no class: it shows what the model attends to, not the evidence for one "
        "class (compare with the Grad-CAM on Explore)."
    )
    columns[1].caption(
        f"hookviz.attention_rollout(loaded, image, head_fusion={fusion!r}, "
        f"discard_ratio={discard}) gives the same in Python."
    )


def _concepts(scene: Scene) -> None:
    """Deep Feature Factorization of the sidebar's layer: each concept coloured over the image,
    with the classes it scores where the layer feeds the head."""
    view = scene.view
    k = state.widget(
        "concepts_k",
        st.slider,
        int(state.resolve("concepts_k", lambda k: 2 <= k <= 10)),
        "Concepts",
        2,
        10,
        help="How many parts the layer's activations are split into (non-negative matrix "
        "factorisation of its channels by its positions).",
    )
    try:
        with feedback.working("Factorising the layer's activations…", queue=scene.loaded.lock):
            found = insight.concepts(view.digest, view.model, view.pretrained, view.layer, k)
    except hookviz.HookvizError as exc:
        st.error(f"No concepts at this layer: {exc}")
        return
    columns = st.columns([1.2, 1])
    picture = render.fit_within(scene.image.convert("RGB"), 600)
    heat = found.heatmaps_at((picture.height, picture.width))
    columns[0].image(render.jpeg_bytes(render.concepts_overlay(picture, heat)))
    with columns[1]:
        for j in range(found.k):
            # (the swatch inside the line's markdown: a row of columns stacks on a phone)
            st.markdown(f"{_swatch(j)} **Concept {j + 1}**: {_concept_words(found, j)}")
    reason = "" if found.labels is not None else f" Not named by classes: {found.labels_reason}."
    st.caption(
        f"Deep Feature Factorization (Collins et al. 2018) of `{view.layer}` into {found.k} "
        f"concepts: each pixel in the colour of its strongest concept, as strong as that "
        f"concept is there. The factorisation leaves {found.error:.0%} of the activations "
        f"unexplained.{reason} hookviz.concepts(loaded, image, layer={view.layer!r}, k={k}) "
        "gives the same in Python."
    )


@functools.cache
def _swatch(j: int) -> str:
    """Concept ``j``'s colour as an inline markdown picture (a small PNG in the text itself)."""
    square = render.png_bytes(Image.new("RGB", (14, 14), marks.colour(j)))
    return f"![colour {j + 1}](data:image/png;base64,{base64.b64encode(square).decode()})"


def _concept_words(found: hookviz.Concepts, j: int) -> str:
    """Concept ``j`` in words: its classes through the head, or how much of the grid it
    covers."""
    if found.labels is not None:
        pairs = zip(found.labels[j], found.label_probabilities[j], strict=True)
        return ", ".join(f"{literal(name)} {share:.0%}" for name, share in pairs)
    grid = found.maps[j]
    strong = int((grid > 0.5 * grid.max()).sum()) if grid.max() > 0 else 0
    return f"strong in {strong} of the layer's {grid.size} cells"


def _relevance(scene: Scene) -> None:
    """LRP of the class: where its relevance lies in the image, and the sidebar layer's
    channels that carry most of it, each with the relevance that flows through it alone."""
    view, cam = scene.view, scene.analysis.cam
    rule = state.widget(
        "relevance_rule",
        st.selectbox,
        state.resolve("relevance_rule", lambda name: name in RULE_WORDS),
        "Rules (composite)",
        list(RULE_WORDS),
        format_func=RULE_WORDS.get,
        help="Which LRP rule each kind of layer uses, as zennit's composites name them.",
    )
    try:
        with feedback.working(
            f"Propagating the relevance of “{cam.class_name}” back to the pixels…",
            queue=scene.loaded.lock,
        ):
            whole, parts = insight.relevance(
                view.digest, view.model, view.pretrained, view.layer, cam.class_index, rule,
                RELEVANT_CHANNELS,
            )  # fmt: skip
    except hookviz.HookvizError as exc:
        st.error(f"No relevance for this model: {exc}")
        return
    picture = render.fit_within(scene.image.convert("RGB"), 600)
    size = (picture.height, picture.width)
    left, right = st.columns([1.2, 1])
    left.image(render.jpeg_bytes(render.relevance_overlay(picture, whole.heatmap_at(size))))
    total, reached = float(whole.input.sum()), float(whole.layer_relevance.sum())
    right.markdown(
        f"**Relevance of “{literal(cam.class_name)}”** (score {whole.score:.2f}): red for "
        f"the class, blue against it. Of the score, {reached:.3g} reaches the channels of "
        f"`{view.layer}` and {total:.3g} the pixels: each layer's biases (BatchNorm's shifts "
        "among them) keep a share on the way."
    )
    right.caption(
        "Layer-wise Relevance Propagation (Bach et al. 2015) shares the class's score out "
        "layer by layer, back to the pixels; BatchNorm is merged into the layer before it and "
        "residual sums share it between their branches, as zennit does. "
        f"hookviz.relevance(loaded, image, {cam.class_index}, layer={view.layer!r}, "
        f"composite={rule!r}) gives the same in Python."
    )
    st.markdown(f"**The channels of `{view.layer}` most relevant to this class**")
    for row in range(0, len(parts), 3):  # (rows of three: on a phone they stack in order)
        for column, part in zip(st.columns(3), parts[row : row + 3], strict=False):
            _relevant_channel(column, picture, part, whole.layer_relevance, reached)
    st.caption(
        "Each picture is the relevance that flows through that channel alone (Concept "
        "Relevance Propagation's conditional heatmap, Achtibat et al. 2023), each on its own "
        "scale: what the channel is used for in this image, beside what excites it (its "
        "visualization, on the Channel page). "
        "hookviz.relevance(..., channels=[c]) gives one in Python."
    )


def _relevant_channel(column, picture: Image.Image, part, by_channel, reached: float) -> None:
    """One channel's conditional relevance (on its own scale: its share of ``reached``, the
    layer's whole relevance, says how much of it the channel carries) and a way to the Channel
    page."""
    channel = part.channels[0]
    share = float(by_channel[channel]) / reached if reached else 0.0
    heat = part.heatmap_at((picture.height, picture.width))
    column.image(render.jpeg_bytes(render.relevance_overlay(picture, heat)))
    column.caption(f"Channel {channel}: {share:.0%} of the layer's relevance")
    if column.button(
        f"What is channel {channel}?",
        key=f"relevance_channel@{channel}",
        icon=":material/visibility:",
        help="Its feature visualization, its filter and the dataset images that excite it.",
    ):
        state.choose("vis_channel", channel)
        st.switch_page(addresses.page_at(addresses.CHANNEL))
