"""The sidebar's class widgets: a box with every class (searchable), and this image's top-5 as
one-click choices. Both show the one target the view explains (``hookviz.app.view.target``); a
change in either redraws the other with the pictures the class changes."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import streamlit as st

import hookviz
from hookviz.app.view import class_change, fragments, state
from hookviz.app.view.literal import literal
from hookviz.app.view.target import TOP1, ViewTarget


def widget_keys(digest: str, model: str, pretrained: bool) -> tuple[str, str]:
    """The widget keys of the class box and of the top-5 radio (the pictures follow the radio in
    the browser, ``top_classes``). They follow the image and model, since their labels follow
    this image's predictions (the browser would keep the old label of an unchanged choice,
    "Top prediction: <the previous image's class>", under the same key)."""
    identity = f"{digest[:10]}:{model}:{pretrained}"
    return f"target@{identity}", f"target_top@{identity}"


def target_section(
    loaded: hookviz.LoadedModel,
    predictions: tuple[hookviz.Prediction, ...],
    keys: tuple[str, str],
    results_in_fragments: bool,
) -> ViewTarget:
    """The class: a box with every class, and this image's top-5 as one-click choices, under
    ``keys`` (``widget_keys``). Both show the one wish; a change in either redraws the other
    with the pictures the class changes, where the page draws them as fragments
    (``results_in_fragments``); else (another page, a Score-CAM run) the whole page reruns
    (``class_change.rerun_scope``)."""
    st.sidebar.header("4 · Target class")
    top = {p.index: p for p in predictions}
    rest = sorted((i for i in range(loaded.num_classes) if i not in top), key=loaded.class_name)
    label = _class_labeller(loaded, predictions)

    def scope(other: str) -> Callable[[], tuple[str, ...]]:
        # asked at the moment of the change (the grid's order and the open panels count)
        return partial(class_change.rerun_scope, results_in_fragments, other)

    options = [TOP1, *(ViewTarget.of_class(i) for i in (*top, *rest))]
    valid = state.options_valid(options)  # (both widgets resolve the wish alike)
    with st.sidebar:
        target = _class_box(options, valid, label, keys[0], scope(fragments.CLASS_TOP5))
        # Top-1 follows each image, so it is the automatic choice
        quick = [TOP1, *(ViewTarget.of_class(i) for i in list(top)[1:])]
        _class_top5(quick, valid, label, keys[1], scope(fragments.CLASS_BOX))
    return target


def _class_labeller(
    loaded: hookviz.LoadedModel, predictions: tuple[hookviz.Prediction, ...]
) -> Callable[[ViewTarget], str]:
    """The class widgets' label of each option for this image's predictions: "Top-1: <name>
    (p)", "#<rank> <name> (p)" for the rest of the top-5, the name for the others."""
    top = {p.index: p for p in predictions}
    ranks = {index: rank for rank, index in enumerate(top, start=1)}

    def label(target: ViewTarget) -> str:
        if target.is_top1:
            best = predictions[0]
            return f"Top-1: {best.name} ({best.probability:.1%})"
        index = target.index
        if index in top:
            return f"#{ranks[index]} {loaded.class_name(index)} ({top[index].probability:.1%})"
        return loaded.class_name(index)

    return label


@st.fragment(key=fragments.CLASS_BOX)
def _class_box(
    options: list[ViewTarget],
    valid: Callable[[ViewTarget], bool],
    label: Callable[[ViewTarget], str],
    key: str,
    scope: Callable[[], tuple[str, ...]],
) -> ViewTarget:
    """Every class, searchable; the choice shown is the wish (a class picked in the top-5
    reruns this)."""
    return state.widget(
        "target",
        st.selectbox,
        state.resolve("target", valid),
        "Explain the class",
        options,
        format_func=label,
        key=key,
        rerun=scope,
        help="By default the top prediction of each image; then the top-5; type to search all "
        "classes.",
    )


@st.fragment(key=fragments.CLASS_TOP5)
def _class_top5(
    quick: list[ViewTarget],
    valid: Callable[[ViewTarget], bool],
    label: Callable[[ViewTarget], str],
    key: str,
    scope: Callable[[], tuple[str, ...]],
) -> None:
    """This image's top-5 as radio buttons: one click (a box of 1,000 options takes 30-40 ms
    in the browser just to close and send), and the ranking in view. The wish is lit, or no
    button for another class (a class picked in the box reruns this)."""
    target = state.wish("target")
    target = target if valid(target) else TOP1  # as the box resolves it
    state.widget(
        "target",
        st.radio,
        target if target in quick else None,
        "This image's top 5",
        quick,
        # (a radio's options are markdown, a select box's are not: class names may come from
        # a user's file)
        format_func=lambda target: literal(label(target)),
        key=key,
        rerun=scope,
        second=True,
        help="One click explains one of the model's five most probable classes for this image.",
    )
