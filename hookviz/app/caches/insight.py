"""The caches of the insight panels and the channel page: the gallery of methods, evidence
against and contrast, attention rollout, the layer sweep, Grad-CAM's steps, the teaching
layer, the trust curves, the diagnostics (layer statistics, gradient flow), interventions,
a channel's filter, and the made visualizations with their time per step.

Bounds: each is keyed by the image's content hash, the model and its weights and the panel's
own values (a layer, a class index, a method), and built on ``analyses``' forward passes or on
``models``' model and ``images``' decoded image.
"""

from __future__ import annotations

import streamlit as st

import hookviz
from hookviz.app.caches.analyses import forward_pass
from hookviz.app.caches.images import decoded_image
from hookviz.app.caches.kept import Kept
from hookviz.app.caches.models import model


@st.cache_resource(max_entries=8, show_spinner=False)
def gallery(digest: str, name: str, pretrained: bool, layer: str, method: str) -> list:
    return hookviz.gallery(forward_pass(digest, name, pretrained, layer), method)


@st.cache_resource(max_entries=8, show_spinner=False)
def against_and_contrast(
    digest: str, name: str, pretrained: bool, layer: str, first: int, second: int
) -> tuple[hookviz.GradCAM, hookviz.GradCAM]:
    kept = forward_pass(digest, name, pretrained, layer)
    return hookviz.evidence_against(kept, first), hookviz.contrast(kept, first, second)


@st.cache_resource(max_entries=8, show_spinner=False)
def rollout(digest: str, name: str, pretrained: bool, fusion: str, discard: float):
    return hookviz.attention_rollout(
        model(name, pretrained), decoded_image(digest), head_fusion=fusion, discard_ratio=discard
    )


@st.cache_resource(max_entries=8, show_spinner=False)
def concepts(digest: str, name: str, pretrained: bool, layer: str, k: int):
    return hookviz.concepts(model(name, pretrained), decoded_image(digest), layer=layer, k=k)


@st.cache_resource(max_entries=8, show_spinner=False)
def relevance(
    digest: str, name: str, pretrained: bool, layer: str, target: int, composite: str, shown: int
):
    """The relevance of ``target`` at ``layer``, and the conditional relevance of its
    ``shown`` most relevant channels one by one (one forward pass for those)."""
    loaded, image = model(name, pretrained), decoded_image(digest)
    whole = hookviz.relevance(loaded, image, target, layer=layer, composite=composite)
    groups = [[channel] for channel, _ in whole.top_channels(shown)]
    parts = hookviz.conditional_relevance(
        loaded, image, groups, target, layer=layer, composite=composite
    )
    return whole, parts


@st.cache_resource(max_entries=8, show_spinner=False)
def overview(digest: str, name: str, pretrained: bool, target: int, every: bool = False):
    layers = "all" if every else None
    loaded = model(name, pretrained)
    return hookviz.overview(loaded, decoded_image(digest), target=target, layers=layers)


@st.cache_resource(max_entries=8, show_spinner=False)
def layer_sweep(digest: str, name: str, pretrained: bool, target: int) -> list:
    return hookviz.layer_sweep(model(name, pretrained), decoded_image(digest), target=target)


@st.cache_resource(max_entries=8, show_spinner=False)
def steps(digest: str, name: str, pretrained: bool, layer: str, target: int):
    return hookviz.grad_cam_steps(forward_pass(digest, name, pretrained, layer), target)


@st.cache_resource(max_entries=8, show_spinner=False)
def teaching_layer(digest: str, name: str, pretrained: bool, target: int, before: str):
    loaded = model(name, pretrained)
    return hookviz.teaching_layer(loaded, decoded_image(digest), target, before=before)


@st.cache_resource(max_entries=8, show_spinner=False)
def trust(digest: str, name: str, pretrained: bool, layer: str, target: int, method: str):
    loaded = model(name, pretrained)
    kept = forward_pass(digest, name, pretrained, layer)
    # the curves work on the model's input grid: the heatmap there, not at the photo's size
    heatmap = kept.grad_cam(target, method).heatmap_at(kept.features.input_size)
    return hookviz.trust_curves(loaded, decoded_image(digest), heatmap, target)


@st.cache_resource(max_entries=8, show_spinner=False)
def layer_stats(digest: str, name: str, pretrained: bool) -> list[hookviz.LayerStats]:
    return hookviz.layer_stats(model(name, pretrained), decoded_image(digest))


@st.cache_resource(max_entries=8, show_spinner=False)
def gradient_flow(digest: str, name: str, pretrained: bool, target: int) -> list:
    return hookviz.gradient_flow(model(name, pretrained), decoded_image(digest), target)


@st.cache_resource(max_entries=16, show_spinner=False)
def intervention(
    digest: str,
    name: str,
    pretrained: bool,
    layer: str,
    channels: tuple[int, ...],
    scale: float,
    target: int,
) -> hookviz.Intervention:
    loaded = model(name, pretrained)
    return hookviz.intervene(
        loaded, decoded_image(digest), layer, channels, scale, cam_layer=layer, target=target
    )


# ---------------------------------------------------------------- what a channel looks for


@st.cache_resource(show_spinner=False)
def visualizations() -> Kept:
    """Made visualizations, shared by every session (a few hundred KB each): a lookup that
    never computes (the page shows a visualization only once it was asked for and made)."""
    return Kept(entries=48)


@st.cache_data(max_entries=32, show_spinner=False)
def seconds_per_step(
    name: str, pretrained: bool, layer: str | None, target: int | None, count: int
) -> float:
    """One optimisation step's time for a visualization (of channel 0 of ``layer``, or of
    class ``target`` when there is no layer), from three steps timed here."""
    channel = None if target is not None else 0
    loaded = model(name, pretrained)
    return hookviz.visualization_seconds(loaded, layer, channel, target, 1, count=count) / 2


@st.cache_resource(max_entries=16, show_spinner=False)
def channel_filter(
    digest: str,
    name: str,
    pretrained: bool,
    layer: str,
    channel: int,
    position: tuple[int, int] | None,
) -> hookviz.ChannelFilter:
    """The convolution behind a channel, on the image, at a position of its map."""
    return hookviz.channel_filter(
        model(name, pretrained), layer, channel, decoded_image(digest), position
    )
