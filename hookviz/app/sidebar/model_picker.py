"""The sidebar's model section: the model list (the catalog and this session's own models),
the weights, a typed timm name, and loading the choice with its indicator and error.
"""

from __future__ import annotations

from dataclasses import dataclass

import streamlit as st

import hookviz
from hookviz.app import feedback, memory_budget, own_models
from hookviz.app.caches import models
from hookviz.app.view import link_notice, offered_models, state
from hookviz.app.view.target import TOP1

WEIGHTS = ("pretrained", "untrained")


def page_without_scene() -> None:
    """The sidebar of a page that needs no image or model (Your model)."""
    st.sidebar.caption(
        "Image, model, layer and class are chosen in this sidebar on the other pages; a model "
        "brought here joins their model list."
    )


@dataclass(frozen=True)
class ModelChoices:
    """The models a model box offers (the catalog and this session's uploads) and their
    labels, for one weights choice."""

    names: list[str]
    catalog: dict
    uploads: dict
    untrained: bool

    def label(self, name: str) -> str:
        if name in self.uploads:
            return self.uploads[name].label
        if models.LABELS in name:
            base, *labels = name.split(models.LABELS)
            return f"{self.label(base)} over {len(labels)} labels"
        if name.startswith(EMBEDDER):
            return f"{self.label(name.removeprefix(EMBEDDER))} as an embedder"
        if name not in self.catalog:
            return f"{name} ({'random weights' if self.untrained else 'typed'})"
        info = self.catalog[name]
        if info.source == "card":
            return f"card: {info.status}" if info.ready else f"{name} (cannot load)"
        if info.status == "bundled":
            return f"{name} (offline)"
        # random weights need no file: "download 45 MB" would mislead
        status = "random weights" if self.untrained else info.status
        task = _TASK_WORDS.get(info.task)
        return f"{name} ({task} · {status})" if task else f"{name} ({status})"

    def own_weights(self, name: str) -> bool:
        return _own_weights(name, self.catalog)

    def widget_key(self, field: str) -> str:
        """A model box's key: its labels change with the weights and the uploads."""
        return f"{field}@{'untrained' if self.untrained else 'pretrained'}:{len(self.uploads)}"


EMBEDDER = models.EMBEDDER  # "embed:NAME": the classifier NAME as an embedder (head removed)
ZERO_SHOT_PREFIX = "clip:"  # any open_clip architecture loads under it, listed or not
# What the list says of a model that is not a classifier.
_TASK_WORDS = {"detection": "detector", "segmentation": "segmenter"}
_TIMM_NAME = "timm_name"  # the key of the box a timm model is typed in
LABELS_BOX = "Labels, one per line"  # the box a zero-shot model's labels are typed in
# What CLIP scores until the user types labels (a first view that is not blank): everyday
# objects, ImageNet classes among them, two of which the sample photo holds.
DEFAULT_LABELS = (
    "a photo of a person",
    "a photo of a tie",
    "a photo of a dog",
    "a photo of a cat",
    "a photo of a car",
    "a photo of a coffee mug",
)
_WHERE_THE_SIDEBAR_IS = "on a phone it is closed: open it with the » arrow at the top left"


def model_choices(wished: str, weights: str) -> ModelChoices:
    """What a model box offers when ``wished`` is the wish and ``weights`` the weights wish."""
    # (a widget value of another type, sent by a hostile client, is no model's name)
    wished = wished if isinstance(wished, str) else ""
    catalog = {info.name: info for info in models.catalog()}
    uploads = {upload.name: upload for upload in own_models.session_models()}
    known = own_models.find(wished)
    if known is not None:  # (a link to a model brought in another session of this server)
        uploads[wished] = known
    untrained = weights == "untrained" and not _own_weights(wished, catalog)
    names = list(catalog) + list(uploads)
    if wished.startswith("timm:") and wished not in catalog:
        names.append(wished)  # typed by name (or from a link): offered like the listed ones
    base = wished.removeprefix(EMBEDDER)
    if wished.startswith(EMBEDDER) and _classifier(base, catalog):
        names.append(wished)  # a classifier as an embedder: offered like the listed ones
    base = wished.split(models.LABELS)[0]
    if base in catalog and _zero_shot(base, catalog):
        names[names.index(base)] = wished  # a zero-shot model with its labels, in its place
    elif base.startswith(ZERO_SHOT_PREFIX) and base not in catalog:
        names.append(wished)  # any open_clip architecture, typed (or from a link)
    offered = offered_models.offered_models()
    names = [
        name
        for name in names
        if offered.offers(models.base_name(name), _source(name, catalog, uploads))
    ]
    return ModelChoices(names, catalog, uploads, untrained)


def _source(name: str, catalog: dict, uploads: dict) -> str | None:
    base = models.base_name(name)
    if base in uploads:
        return "upload"
    return catalog[base].source if base in catalog else None


def model_section() -> tuple[str, bool]:
    st.sidebar.header("2 · Model")
    choices = model_choices(state.wish("model"), state.wish("weights"))
    if not choices.names:
        st.error(
            f"This server offers {offered_models.offered_models().described()}, and none of "
            "them is here: whoever started it can list others (hookviz app --models)."
        )
        state.stop()
    default = hookviz.DEFAULT_MODEL if hookviz.DEFAULT_MODEL in choices.names else None
    name = state.widget(
        "model",
        st.sidebar.selectbox,
        state.resolve("model", state.options_valid(choices.names), default or choices.names[0]),
        "Network",
        choices.names,
        format_func=choices.label,
        # the labels change with the weights: a fresh widget then (a kept one shows old labels)
        key=choices.widget_key("model"),
        help="Bundled models work offline. torchvision and timm models download their weights "
        "once; untrained ones need no download. Bring your own on the Your model page.",
    )
    _say_an_unknown_linked_model(state.wish("model"), choices, name)
    if offered_models.offered_models().typing_allowed:
        _timm_box()
    _embedder_toggle(name, choices.catalog)
    name = _zero_shot_labels(name, choices.catalog)
    if choices.own_weights(name):
        st.sidebar.caption("Its own trained weights (from the checkpoint).")
        return name, True
    weights = state.widget(
        "weights",
        st.sidebar.radio,
        state.resolve("weights", state.options_valid(WEIGHTS)),
        "Weights",
        WEIGHTS,
        horizontal=True,
        help="Untrained = random weights, the same on every load of an architecture: a sanity "
        "check (a good explanation should change) that needs no download.",
    )
    if weights == "untrained":
        st.sidebar.caption("⚠️ Untrained: random weights, predictions and heatmaps are noise.")
    return name, weights == "pretrained"


def _timm_box() -> None:
    """Any timm model by name (only on a server that lists no models: a name typed here is
    downloaded)."""
    # In a form: a bare text box in the sidebar keeps the class box below from opening after
    # a rerun (seen in Chromium with Streamlit 1.67); a form sends only on its button.
    with st.sidebar.form("timm_form", border=False, enter_to_submit=True):
        st.text_input(
            "Or any timm model",
            key=_TIMM_NAME,
            placeholder="e.g. resnet34d, deit_small_patch16_224",
            help="Any name from timm.list_models() (a pretrained tag such as .a1_in1k "
            "allowed): pretrained weights from the local Hugging Face cache, or random weights.",
        )
        st.form_submit_button("Use this timm model", on_click=_typed_timm, key="timm_use")


def _say_an_unknown_linked_model(wished: str, choices: ModelChoices, shown: str) -> None:
    """A link (or an old bookmark) naming a model this server does not offer: say which, and
    what is shown instead, until the user picks a model (the wish stays till then)."""
    if wished in choices.names or wished == hookviz.DEFAULT_MODEL:
        return  # (the default, not offered by this server: nobody asked for it)
    named = link_notice.escaped(wished)  # (a link is anyone's text: shown as typed, cut if long)
    st.info(
        f"This link names the model **{named}**, which this server does not offer (not in its "
        f"list, not a timm or open_clip name, or a model brought in a session that has ended), "
        f"so this is **{choices.label(shown)}**. Pick a network in the sidebar."
    )


def _embedder_toggle(name: str, catalog: dict) -> None:
    """A classifier can also be an embedder (its head removed): it then compares the photo
    with a reference image (``hookviz.load_model(..., task="embedding")``)."""
    base = name.removeprefix(EMBEDDER)
    if not _classifier(base, catalog):
        return
    st.sidebar.toggle(
        "Compare two images (as an embedder)",
        value=name.startswith(EMBEDDER),
        key=f"embedder@{base}",
        on_change=_embed,
        args=(base, not name.startswith(EMBEDDER)),
        help="Removes the classification head: the model then outputs the features the head "
        "read, and the CAM shows what makes the photo like a reference image you upload.",
    )


def _zero_shot_labels(name: str, catalog: dict) -> str:
    """A zero-shot model (CLIP) scores the labels the user types: they are part of its name
    (``models.LABELS``), so of every key and of the address."""
    base, *labels = name.split(models.LABELS)
    if not _zero_shot(base, catalog):
        return name
    typed = st.sidebar.text_area(
        LABELS_BOX,
        value="\n".join(labels or DEFAULT_LABELS),
        key=f"labels@{base}",
        placeholder="a photo of a dog\na photo of a cat",
        help="CLIP scores the image against each label's text: their softmax is its zero-shot "
        "prediction, and each label can be explained like a class.",
    )
    wanted = [line.strip() for line in typed.splitlines() if line.strip()]
    if len(wanted) < 2:
        st.sidebar.info("Type two labels or more (one per line) for CLIP to choose between.")
        st.info(
            f"CLIP chooses between two labels or more that you type, one per line, in "
            f"**{LABELS_BOX}** in the sidebar ({_WHERE_THE_SIDEBAR_IS})."
        )
        state.stop()
    if tuple(wanted) == DEFAULT_LABELS:
        st.sidebar.info(
            "Type two labels or more (one per line) for CLIP to choose between: until then it "
            "scores these everyday objects."
        )
        st.info(
            f"CLIP scores the image against labels you type: these are {len(wanted)} everyday "
            f"objects to start with. Type your own, one per line, in **{LABELS_BOX}** in the "
            f"sidebar ({_WHERE_THE_SIDEBAR_IS}); they replace these."
        )
    if any(models.LABELS in label for label in wanted):
        feedback.error(f"A label cannot hold “{models.LABELS}”.")
        state.stop()
    chosen = models.LABELS.join([base, *wanted])
    if chosen != name:
        state.choose("target", TOP1)  # (the labels are the classes: a new set, a new top-1)
        # kept in the wish: the next full run sees the same labels and keeps the class picked
        state.choose("model", chosen)
    return state.shown("model", chosen)


def _zero_shot(name: str, catalog: dict) -> bool:
    if name in catalog:
        return catalog[name].task == "zero-shot"
    return name.startswith(ZERO_SHOT_PREFIX)


def _embed(base: str, embedder: bool) -> None:
    state.choose("model", EMBEDDER + base if embedder else base)
    state.choose("layer", None)
    state.choose("target", TOP1)


def _classifier(name: str, catalog: dict) -> bool:
    """Whether ``name`` is a listed classifier (one that can lose its head)."""
    return (
        name in catalog
        and catalog[name].task == "classification"
        and (catalog[name].source != "card")
    )


def _typed_timm() -> None:
    typed = str(st.session_state.get(_TIMM_NAME, "")).strip()
    if typed:
        # a new architecture: its own default layer and top-1 class
        state.choose("model", "timm:" + typed.removeprefix("timm:"))
        state.choose("layer", None)
        state.choose("target", TOP1)
        st.session_state[_TIMM_NAME] = ""


def _own_weights(name: str, catalog: dict) -> bool:
    """Whether ``name`` brings its own weights (an upload, a model card): no weights choice."""
    return own_models.is_upload(name) or (name in catalog and catalog[name].source == "card")


def load(name: str, pretrained: bool) -> hookviz.LoadedModel:
    weights = "pretrained" if pretrained else "untrained"
    upload = own_models.find(name)
    shown = upload.label if upload is not None else f"{name} ({weights})"
    try:
        with feedback.working(f"Loading {shown}…"):
            return models.model(name, pretrained)
    except memory_budget.ServerBusy as exc:
        feedback.error(str(exc))
        state.stop()
    except hookviz.HookvizError as exc:
        feedback.error(f"Cannot load **{shown}**: {exc}")
        state.stop()
