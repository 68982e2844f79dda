"""The "Diagnose the network" page: activation statistics of every layer, the gradient flow and
interventions on the current layer. One panel at a time; only that panel computes."""

from __future__ import annotations

import pandas as pd
import streamlit as st

import hookviz
from hookviz.app import charts, feedback, panels
from hookviz.app.caches import encoded, insight
from hookviz.app.sidebar.scene import Scene
from hookviz.app.texts import FLOW_HELP, INTERVENE_HELP, STATS_HELP
from hookviz.app.view import state
from hookviz.app.view.literal import literal

PANELS = {
    "stats": "Activation statistics",
    "flow": "Gradient flow",
    "intervene": "Intervene",
}
MODES = {"scale": "scale chosen channels", "keep": "keep only the strongest channels"}


def page(scene: Scene) -> None:
    if not panels.header("Diagnose the network", scene):
        return
    panel = panels.pick("diagnose_panel", PANELS)
    {"stats": _statistics, "flow": _flow, "intervene": _intervene}[panel](scene)


def _statistics(scene: Scene) -> None:
    view = scene.view
    with feedback.working("Measuring every layer in one forward pass…", queue=scene.loaded.lock):
        stats = insight.layer_stats(view.digest, view.model, view.pretrained)
    frame = pd.DataFrame(
        {
            "depth": range(len(stats)),
            "layer": [s.name for s in stats],
            "type": [s.type_name for s in stats],
            "mean": [s.mean for s in stats],
            "std": [s.std for s in stats],
            "min": [s.min for s in stats],
            "max": [s.max for s in stats],
            "zero fraction": [s.zero_fraction for s in stats],
        }
    )
    left, right = st.columns(2)
    marked = view.layer
    left.altair_chart(
        charts.over_depth(frame, ["mean", "std"], "activation", marked), width="stretch"
    )
    right.altair_chart(
        charts.over_depth(frame, ["zero fraction"], "fraction", marked), width="stretch"
    )
    st.dataframe(frame, hide_index=True, height=240)
    current = next((s for s in stats if s.name == view.layer), None)
    if current is not None:
        st.altair_chart(
            charts.histogram(current.bin_edges, current.histogram, view.layer), width="stretch"
        )
        st.caption(
            f"Histogram of {view.layer}'s output values for this image, counts on a log scale "
            f"({current.zero_fraction:.0%} exactly zero)."
        )
    st.markdown(STATS_HELP)


def _flow(scene: Scene) -> None:
    if not panels.explains_classes(scene, "Gradient flow (of the class score)"):
        return
    view, cam = scene.view, scene.analysis.cam
    with feedback.working("One backward pass through every layer…", queue=scene.loaded.lock):
        records = insight.gradient_flow(view.digest, view.model, view.pretrained, cam.class_index)
    frame = pd.DataFrame(
        {
            "depth": range(len(records)),
            "layer": [r.name for r in records],
            "gradient RMS": [max(r.grad_rms, 1e-30) for r in records],
            "gradient norm": [r.grad_norm for r in records],
        }
    )
    st.altair_chart(charts.gradient_flow(frame), width="stretch")
    st.caption(f"Gradient of the score of “{literal(cam.class_name)}”.")
    st.markdown(FLOW_HELP)


def _intervene(scene: Scene) -> None:
    if not panels.explains_classes(scene, "An intervention (its effect on the class scores)"):
        return
    view, analysis = scene.view, scene.analysis
    features = analysis.features
    count = features.num_channels
    mode = state.widget(
        "intervene_mode",
        st.radio,
        state.resolve("intervene_mode", state.options_valid(MODES)),
        "Intervention",
        list(MODES),
        format_func=MODES.get,
        horizontal=True,
    )
    if mode == "scale":
        strongest = tuple(features.channel_order("mean", min(3, count)))
        wished = state.wish("intervene_channels")
        valid = wished is not None and all(0 <= c < count for c in wished)
        chosen = state.widget(
            "intervene_channels",
            st.multiselect,
            list(wished if valid else strongest),
            f"Channels of {view.layer}",
            list(range(count)),
            key=f"intervene_channels@{view.layer}",
            help="By default the three with the strongest mean activation.",
        )
        chosen = tuple(sorted(int(c) for c in chosen))
        state.shown("intervene_channels", None if chosen == strongest else chosen)
        scale = state.widget(
            "intervene_scale",
            st.slider,
            state.clamp("intervene_scale", 0.0, 3.0),
            "Multiply them by",
            0.0,
            3.0,
            step=0.1,
        )
    else:
        keep = state.widget(
            "intervene_keep",
            st.slider,
            state.clamp("intervene_keep", 1, count),
            "Channels kept",
            1,
            count,
        )
        kept = set(features.channel_order("mean", keep))
        chosen = tuple(c for c in range(count) if c not in kept)
        scale = 0.0
    with feedback.working("Forward pass with the intervention…", queue=scene.loaded.lock):
        result = insight.intervention(
            view.digest,
            view.model,
            view.pretrained,
            view.layer,
            chosen,
            float(scale),
            analysis.cam.class_index,
        )
    alpha, cmap = float(state.wish("alpha")), str(state.wish("cam_cmap"))
    before, after = st.columns(2)
    before.markdown("**Untouched model**")
    before.dataframe(_prediction_frame(result.original), hide_index=True)
    before.image(encoded.small_overlay(view.digest, analysis.cam, alpha, cmap))
    after.markdown(f"**{len(chosen)} channel(s) × {scale:g}**")
    after.dataframe(_prediction_frame(result.predictions), hide_index=True)
    after.image(encoded.small_overlay(view.digest, result.cam, alpha, cmap))
    if result.cam.blank:
        after.caption("No positive evidence left at this layer.")
    index = analysis.cam.class_index
    st.caption(
        f"Logit of “{literal(analysis.cam.class_name)}”: {result.original_scores[index]:.3f} → "
        f"{result.scores[index]:.3f}"
    )
    st.markdown(INTERVENE_HELP)


def _prediction_frame(predictions: list[hookviz.Prediction]) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "class": [p.name for p in predictions],
            "probability": [f"{p.probability:.1%}" for p in predictions],
        }
    )
