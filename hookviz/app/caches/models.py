"""The caches of the models: the catalog, each loaded model (shared by every session, frozen),
its layers' shapes at an input size, its batcher, and the store of uploaded checkpoints.

Bounds: keyed by model name and weights (and an input size); nothing here knows of an image.
"""

from __future__ import annotations

import os

import streamlit as st

import hookviz
from hookviz.app import memory_budget, own_models
from hookviz.app.caches.kept import Kept
from hookviz.app.view import offered_models

EMBEDDER = "embed:"  # a model name so prefixed: that classifier as an embedder (head removed)
# A zero-shot model's labels travel in its name (so in every key and the address):
# "clip:ViT-B-32|a dog|a cat" is that CLIP scoring those labels.
LABELS = "|"


def catalog() -> list[hookviz.ModelInfo]:
    """The models and whether each can load now (the hub caches and the model-cards folder can
    change: re-checked every 10 seconds, not on every rerun; at once for another folder)."""
    return _catalog(os.environ.get(hookviz.models.MODELS_DIR_ENV, ""))


@st.cache_data(ttl=10, max_entries=2, show_spinner=False)
def _catalog(models_dir: str) -> list[hookviz.ModelInfo]:
    return hookviz.model_catalog()


@st.cache_resource(max_entries=1, show_spinner=False)
def checkpoint_store() -> Kept:
    """Uploaded checkpoints and class-name files by digest (a ViT-B is 330 MB: a few only)."""
    return Kept(entries=8, total=1200 * 2**20)


@st.cache_resource(max_entries=4, show_spinner=False)
def model(name: str, pretrained: bool) -> hookviz.LoadedModel:
    """One shared, frozen model per (name, weights), traced once here. An uploaded model
    (``upload:...``) is built from the checkpoint store. A model this server does not offer
    (``offered_models``) is refused, whatever asked for it."""
    offered = offered_models.offered_models()
    if not offered.offers(base_name(name), source_of(name)):
        raise hookviz.ModelError(f"this server offers {offered.described()} only")
    memory_budget.check("another model")
    if LABELS in name:
        base, *labels = name.split(LABELS)
        labelled = hookviz.zero_shot(model(base, pretrained), labels)
        hookviz.layer_table(labelled)
        return labelled
    if own_models.is_upload(name):
        loaded = own_models.load(name, checkpoint_store())
    elif name.startswith(EMBEDDER):  # a classifier without its head (model_picker.EMBEDDER)
        base = name.removeprefix(EMBEDDER)
        loaded = hookviz.load_model(base, pretrained=pretrained, task="embedding")
    else:
        loaded = hookviz.load_model(name, pretrained=pretrained)
    if loaded.task != "zero-shot":  # (without its labels it scores nothing: traced with them)
        hookviz.layer_table(loaded)
    return loaded


def base_name(name: str) -> str:
    """The network ``name`` loads: without an embedder's prefix or a zero-shot model's labels."""
    return name.split(LABELS)[0].removeprefix(EMBEDDER)


def source_of(name: str) -> str | None:
    """Where the network ``name`` comes from (a catalog source, ``upload`` for one brought on
    the Your model page), None for a name the catalog does not hold."""
    base = base_name(name)
    if own_models.is_upload(base):
        return "upload"
    found = {info.name: info.source for info in catalog()}
    return found.get(base)


@st.cache_resource(max_entries=16, show_spinner=False)
def layer_shapes(name: str, pretrained: bool, height: int, width: int) -> dict:
    """Each layer's (C, h, w) at this input size (the picker shows the image's own shapes)."""
    return hookviz.core.layers.layer_shapes(model(name, pretrained), height, width)


@st.cache_resource(max_entries=4, show_spinner=False)
def batcher(name: str, pretrained: bool) -> hookviz.Batcher:
    """The model's ``Batcher``: requests within ``HOOKVIZ_BATCH_MS`` milliseconds of each other
    (default 5 on a GPU, 0, each alone, on the CPU, where a batch saves nothing) share a batch
    of at most ``HOOKVIZ_BATCH_SIZE`` (default 8)."""
    loaded = model(name, pretrained)
    default_ms = 5.0 if loaded.device.type == "cuda" else 0.0
    window_ms = float(os.environ.get("HOOKVIZ_BATCH_MS", "") or default_ms)
    size = int(os.environ.get("HOOKVIZ_BATCH_SIZE", "") or 8)
    return hookviz.Batcher(loaded, window_s=window_ms / 1000, max_batch=size)
