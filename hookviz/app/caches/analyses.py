"""The caches of what a model makes of an image: the hooked forward pass per (image, model,
layer), each analysis (a target and a method on it), a detector's detections, a segmenter's
categories, a reference image's embedding.

Bounds: keyed by ``SeenKey`` / ``AnalysisKey`` (``hookviz.app.view.keys``) or by their plain values;
the pictures drawn from these are ``hookviz.app.caches.encoded``'s and the browser's
(``hookviz.app.browser.cached_payloads``).
"""

from __future__ import annotations

import dataclasses

import streamlit as st

import hookviz
from hookviz.app import memory_budget
from hookviz.app.caches.images import decoded_image, display_image, image_size
from hookviz.app.caches.models import batcher, model
from hookviz.app.view import target
from hookviz.app.view.keys import AnalysisKey, SeenKey


# A live resource tied to a model (it holds an autograd graph), bounded: each keeps the graph
# from the layer to the scores for fast class switches (tens to a few hundred MB on the CPU).
@st.cache_resource(max_entries=4, show_spinner=False)
def forward_pass(digest: str, name: str, pretrained: bool, layer: str) -> hookviz.ForwardPass:
    """One hooked forward per (image, model, layer); every class is then a backward pass. On a
    GPU, the forward passes other sessions ask for at the same moment run with it as one batch
    (``batcher``), each with its top-1 class's gradient."""
    memory_budget.check("a new analysis")
    return batcher(name, pretrained).forward_pass(decoded_image(digest), layer)


# (bounds: a forward pass's top-5 are computed ahead, ``top_classes``: five per layer seen)
@st.cache_resource(max_entries=64, show_spinner=False)
def analysis(key: AnalysisKey) -> hookviz.Analysis:
    """Predictions, feature maps and a CAM; a seen view costs nothing, a new class on a kept
    forward pass a backward pass only."""
    return forward_pass(*key.seen).analysis(library_target(key), key.method)


def library_target(key: AnalysisKey) -> object:
    """The library's target for the view's (``hookviz.app.view.target.library_target``), with the
    image's size and the reference's embedding taken from these caches."""
    return target.library_target(
        key.target,
        lambda: image_size(key.digest),
        lambda reference: reference_embedding(key.model, key.pretrained, reference),
    )


@st.cache_resource(max_entries=8, show_spinner=False)
def reference_embedding(name: str, pretrained: bool, digest: str) -> object:
    """An image's embedding by the model (a reference is embedded once, not at every run)."""
    return hookviz.embed(model(name, pretrained), decoded_image(digest))


@st.cache_resource(max_entries=8, show_spinner=False)
def detections(seen: SeenKey) -> tuple[hookviz.Detection, ...]:
    """A detector's detections in the kept forward pass, most confident first, in the image's
    pixels (all of them: the page picks which to list)."""
    return tuple(hookviz.core.tasks.detections(forward_pass(*seen).context, 0.0))


@st.cache_resource(max_entries=8, show_spinner=False)
def segmentation(seen: SeenKey) -> hookviz.Segmentation:
    """A segmenter's categories per pixel in the kept forward pass, on the display-size
    image's grid (what the page draws them on; at a 24-megapixel photo's own size the mask
    alone would be 190 MB)."""
    context = forward_pass(*seen).context
    picture = display_image(seen.digest)
    shown = dataclasses.replace(context, image_size=(picture.height, picture.width))
    return hookviz.core.tasks.segmentation(shown)
