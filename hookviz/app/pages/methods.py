"""The "Methods side by side" page: every explanation method on the sidebar's image, layer and
class, each picture with its time; their faithfulness scores in a table sortable by any metric,
the baselines as rows and the best method per metric starred; the slow methods and the scores
computed on request (a progress bar, Cancel); below, the model-randomisation sanity check, on
request.

Everything is computed on the display-size image (at most ``images.DISPLAY_LONG_SIDE`` pixels:
the model input is resized from it as from the original) and kept on the server per image,
model, layer, class and method (bounded stores), so coming back to the page shows at once what
was computed."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import streamlit as st
from PIL import Image

import hookviz
from hookviz import render
from hookviz.app import feedback, panels
from hookviz.app.caches import images, models
from hookviz.app.caches.kept import Kept
from hookviz.app.method_texts import method_label
from hookviz.app.pages import method_estimates
from hookviz.app.pages.method_estimates import duration
from hookviz.app.sidebar.scene import Scene
from hookviz.app.view.literal import literal
from hookviz.app.view.slow_runs import ASK_OVER_SECONDS
from hookviz.insight.faithfulness import road_imputation_seconds

# the slow CAM methods, cheapest first (SS-CAM runs a forward per channel per sample)
_SLOW_CAMS = ("scorecam", "ablationcam", "iscam", "sscam")
_SLOW_PIXELS = ("integrated_gradients", "occlusion", "rise")
BASELINES = hookviz.BASELINES
_THUMB = 300  # long side of each picture, pixels
_COLUMNS = 4
# metric (hookviz.faithfulness's names) -> (column title, True when higher is better)
METRICS = {
    "deletion": ("deletion AUC ↓", False),
    "insertion": ("insertion AUC ↑", True),
    "average_drop": ("average drop ↓", False),
    "increase_in_confidence": ("increase in confidence ↑", True),
    "road_morf": ("ROAD MoRF ↓", False),
    "road_lerf": ("ROAD LeRF ↑", True),
}
ROAD_METRICS = ("road_morf", "road_lerf")
SCORES, ROAD = "scores", "road"  # the two requests: the quick metrics, then ROAD
_SANITY_STEPS = 6
_SANITY_DEFAULT = ("gradcam", "guided_backprop", "edges")
_ASKED = "methods.asked"  # session: (what was asked, its arguments) while a long job runs
_HELD = "methods.held"  # session: {(group, arguments)} cancelled, waiting for "Compute"


def groups() -> dict[str, tuple[str, ...]]:
    """The methods computed at once, by group: the CAM family, pixel attributions, baselines."""
    cams = tuple(m for m in hookviz.METHODS if m not in _SLOW_CAMS)
    skipped = (*_SLOW_PIXELS, *BASELINES)
    pixels = tuple(m for m in hookviz.attribution_methods() if m not in skipped)
    return {"CAM family": cams, "Pixel attributions": pixels, "Baselines": BASELINES}


def slow_methods() -> tuple[str, ...]:
    """The methods computed when asked: many forward passes each."""
    return (*_SLOW_CAMS, *_SLOW_PIXELS)


@dataclass(frozen=True)
class Picture:
    """One method's map on the page's image and how long it took."""

    method: str
    heat: np.ndarray  # (h, w) float32 in [0, 1] on the display image's grid
    seconds: float


@st.cache_resource(max_entries=1, show_spinner=False)
def _stores() -> dict[str, Kept]:
    """The server's results, most recent kept: pictures, scores, sanity checks."""
    return {"pictures": Kept(256), "scores": Kept(256), "sanity": Kept(48)}


def _kept(kind: str, key: tuple) -> Any:
    return _stores()[kind].get(key, None)


def _keep(kind: str, key: tuple, compute: Callable[[], Any]) -> Any:
    value = _kept(kind, key)
    if value is None:
        value = compute()
        _stores()[kind].put(value, key)
    return value


def page(scene: Scene) -> None:
    if not panels.header("Methods side by side", scene):
        return
    if not panels.explains_classes(scene, "Methods side by side"):
        return
    view, cam = scene.view, scene.analysis.cam
    args = (view.digest, view.model, view.pretrained, view.layer, cam.class_index)
    st.caption(
        f"Every method explaining **{literal(cam.class_name)}**; the CAM family at layer "
        f"`{view.layer}`, the pixel attributions through the whole network. The baselines "
        "explain nothing: a method worth trusting here beats them."
    )
    pictures: list[Picture] = []
    for group, names in groups().items():
        st.markdown(f"**{group}**")
        found = _group(scene, args, group, names)
        if group == "CAM family":
            st.caption(_shared_pass_text(args))
        # (the notes are written here, under the group: inside the indicator's block they would
        # land in its slot at the top of the page)
        drawn = [p for p in found if isinstance(p, Picture)]
        _draw(scene, drawn)
        for note in (p for p in found if isinstance(p, str)):
            st.caption(note)
        pictures += drawn
    pictures += _slow(scene, args)
    _scores(args, pictures)
    _sanity(args, pictures)


def _group(scene: Scene, args: tuple, group: str, names: tuple[str, ...]) -> list[Picture | str]:
    """A group's pictures (or the note saying why a method has none here). A group estimated
    over ``ASK_OVER_SECONDS`` says its estimate first, runs with progress and Cancel, and says
    its real time after; cancelled, it waits for "Compute" with what it has drawn."""
    missing = tuple(m for m in names if _kept("pictures", (*args, m)) is None)
    lock = scene.loaded.lock
    estimate = 0.0
    if missing:
        # (no hooked pass at this layer: nothing to estimate, and each method's note says why)
        with (
            feedback.working("Timing the image's forward pass for the estimate…", queue=lock),
            contextlib.suppress(hookviz.HookvizError),
        ):
            estimate = method_estimates.methods_seconds(_forward_pass(*args[:4]), missing)
    if not missing or estimate <= ASK_OVER_SECONDS:
        with feedback.working(f"Computing the {_in_a_sentence(group)}…", queue=lock):
            return [_picture_or_note(args, m) for m in names]
    left = f"{len(missing)} of {len(names)}" if len(missing) < len(names) else f"{len(names)}"
    held = (group, args)
    if held in st.session_state.get(_HELD, ()):
        st.caption(
            f"Cancelled: {left} methods of the {_in_a_sentence(group)} left to compute, about "
            f"{duration(estimate)} here."
        )
        st.button(f"Compute the {_in_a_sentence(group)}", key=f"methods_resume_{group}",
                  on_click=_release, args=(held,))  # fmt: skip
        return [p for p in (_kept("pictures", (*args, m)) for m in names) if p is not None]
    line = st.empty()
    line.caption(f"Computing {left} methods: about {duration(estimate)} here.")
    started = time.perf_counter()
    holder, report = _progress_bar(f"group_{group}", missing, cancel=(_hold, (held,)))
    found = {}
    with feedback.working(f"Computing the {_in_a_sentence(group)}…", queue=lock):
        for position, method in enumerate(missing):
            report(position, 0, 1)
            found[method] = _picture_or_note(
                args, method, lambda d, t, position=position: report(position, d, t)
            )
    holder.empty()
    line.caption(
        f"{left} methods computed in {duration(time.perf_counter() - started)} here "
        f"(estimated about {duration(estimate)})."
    )
    return [found[m] if m in found else _kept("pictures", (*args, m)) for m in names]


def _in_a_sentence(group: str) -> str:
    """A group's name inside a sentence: "the CAM family", "the pixel attributions"."""
    first, _, rest = group.partition(" ")
    return group if first.isupper() else f"{first.lower()} {rest}".strip()


def _hold(held: tuple) -> None:
    """Cancel's callback for a group: it waits for "Compute" from now on."""
    st.session_state[_HELD] = {*st.session_state.get(_HELD, ()), held}


def _release(held: tuple) -> None:
    st.session_state[_HELD] = st.session_state.get(_HELD, set()) - {held}


def _shared_forward_seconds(args: tuple) -> float:
    """The time of the one hooked forward pass every CAM method here runs on."""
    digest, model, pretrained, layer, _ = args
    return _forward_pass(digest, model, pretrained, layer).forward_seconds


def _shared_pass_text(args: tuple) -> str:
    return (
        f"Shared forward pass at `{args[3]}`: {_shared_forward_seconds(args) * 1000:.0f} ms, "
        "paid once for every CAM method; each picture's time is the method's own."
    )


def _picture_or_note(args: tuple, method: str, progress=None) -> Picture | str:
    """The method's picture, or a note saying why it has none here."""
    try:
        return _keep("pictures", (*args, method), lambda: _compute(args, method, progress))
    except hookviz.CancelledError:
        raise
    except hookviz.HookvizError as exc:
        return f"{method_label(method)}: {exc}"


def _compute(args: tuple, method: str, progress) -> Picture:
    digest, model, pretrained, layer, target = args
    loaded = models.model(model, pretrained)
    image = images.display_image(digest)
    if method in hookviz.METHODS:
        # the shared forward pass first, outside the method's own time (``_shared_pass_text``)
        kept = _forward_pass(digest, model, pretrained, layer)
        started = time.perf_counter()
        heat = kept.grad_cam(target, method, progress=progress).heatmap
    else:
        started = time.perf_counter()
        heat = hookviz.attribute(loaded, image, method, target, progress=progress).map
    return Picture(method, heat.astype(np.float32), time.perf_counter() - started)


@st.cache_resource(max_entries=4, show_spinner=False)
def _forward_pass(digest: str, model: str, pretrained: bool, layer: str) -> hookviz.ForwardPass:
    """One hooked forward pass of the display image for every CAM method at ``layer`` (each
    method then costs its backward only)."""
    return hookviz.ForwardPass(models.model(model, pretrained), images.display_image(digest), layer)


def _draw(scene: Scene, pictures: list[Picture]) -> None:
    photo = render.fit_within(scene.image, _THUMB)
    columns = st.columns(_COLUMNS)
    for position, picture in enumerate(pictures):
        heat = Image.fromarray(picture.heat).resize(photo.size, Image.Resampling.BILINEAR)
        overlay = render.overlay(photo, np.clip(np.asarray(heat), 0, 1), alpha=0.5)
        with columns[position % _COLUMNS]:
            st.image(render.jpeg_bytes(overlay))
            st.caption(f"{method_label(picture.method)} · {picture.seconds * 1000:.0f} ms")


def _asked(what: str, args: tuple) -> bool:
    return st.session_state.get(_ASKED) == (what, args)


def _ask_button(label: str, what: str, args: tuple) -> None:
    if st.button(label, key=f"methods_{what}"):
        st.session_state[_ASKED] = (what, args)
        st.rerun()


def _progress_bar(what: str, names: tuple[str, ...], cancel: tuple | None = None):
    """A Cancel button and a progress bar, in a holder emptied when the job ends; the returned
    function reports (method's position, passes done, passes in all). Streamlit stops the
    script at the next report after Cancel (or any other control), releasing the model on the
    way out. Cancel forgets the request; ``cancel``: (callback, its arguments) instead."""
    callback, arguments = cancel or (st.session_state.pop, (_ASKED, None))
    holder = st.empty()
    with holder.container():
        st.button("Cancel", key=f"methods_cancel_{what}", on_click=callback, args=arguments)
        bar = st.progress(0.0, text="Starting…")

    def report(position: int, done: int, total: int) -> None:
        share = (position + done / max(total, 1)) / len(names)
        bar.progress(min(share, 1.0), text=f"{method_label(names[position])}: {done} of {total}")

    return holder, report


def _slow(scene: Scene, args: tuple) -> list[Picture]:
    """The slow methods: computed when asked, each with its progress; kept afterwards."""
    st.markdown("**Slow methods**")
    names = slow_methods()
    done = [p for p in (_kept("pictures", (*args, m)) for m in names) if p is not None]
    if len(done) < len(names) and not _asked("slow", args):
        with feedback.working("Timing one batch of the input for the estimate…"):
            each = _slow_estimates(args, names)
        st.caption(
            f"{', '.join(method_label(m) for m in names)} run many forward passes each (one per "
            "channel, path step, window or mask): computed when you ask. About "
            f"{duration(sum(each.values()))} in all here ("
            + ", ".join(f"{method_label(m)} {duration(s)}" for m, s in each.items())
            + ")."
        )
        _ask_button("Compute the slow methods", "slow", args)
    elif len(done) < len(names):
        started = time.perf_counter()
        holder, report = _progress_bar("slow", names)
        done = []
        for position, method in enumerate(names):
            picture = _picture_or_note(
                args, method, lambda d, t, position=position: report(position, d, t)
            )
            if isinstance(picture, str):
                st.caption(picture)
            else:
                done.append(picture)
        holder.empty()
        st.session_state.pop(_ASKED, None)
        st.caption(f"The slow methods took {duration(time.perf_counter() - started)} in all.")
    _draw(scene, done)
    return done


def _slow_estimates(args: tuple, names: tuple[str, ...]) -> dict[str, float]:
    """About how long each slow method not computed yet takes here (``method_estimates``)."""
    digest, model, pretrained, layer, _ = args
    kept = _forward_pass(digest, model, pretrained, layer)
    each = {}
    for method in names:
        if _kept("pictures", (*args, method)) is None:
            try:
                each[method] = method_estimates.slow_seconds(kept, method)
            except hookviz.HookvizError:
                each[method] = 0.0  # (it will say why it has no picture here)
    return each


def _scores(args: tuple, pictures: list[Picture]) -> None:
    """Each picture's faithfulness, computed when asked (ROAD, slower, on a second request),
    in a table sortable by any column."""
    st.markdown("**Faithfulness** (click a column to sort)")
    st.caption(
        "Deletion: the class probability as the pixels the map ranks highest are removed first "
        "(a faithful map makes it fall fast: a lower area is better); insertion: as they are "
        "added back to a blurred image (higher is better). Average drop: how much the "
        "probability falls when the image is multiplied by the map (lower is better); increase "
        "in confidence: whether it rises. ROAD: the change in probability when the most (MoRF) "
        "or least (LeRF) relevant pixels are removed and filled in from their neighbours, "
        "averaged over 10-90% removed."
    )
    for sets, label in ((SCORES, "Score every method"), (ROAD, "Add ROAD (slower)")):
        missing = [p for p in pictures if _kept("scores", (*args, p.method, sets)) is None]
        if missing and _asked(sets, args):
            names = tuple(p.method for p in missing)
            started = time.perf_counter()
            holder, report = _progress_bar(sets, names)
            for position, picture in enumerate(missing):
                report(position, 0, 1)
                key = (*args, picture.method, sets)
                _keep("scores", key, lambda p=picture, m=sets: _score(args, p, m))
            holder.empty()
            st.session_state.pop(_ASKED, None)
            took = duration(time.perf_counter() - started)
            st.caption(f"Scored {len(missing)} methods in {took}.")
        elif missing:
            what = "are not scored yet" if sets == SCORES else "have no ROAD scores yet"
            with feedback.working("Timing the input's passes for the estimate…"):
                each = _scoring_seconds(args, sets)
            estimate = f": about {duration(len(missing) * each)} in all here"
            st.caption(f"{len(missing)} of {len(pictures)} methods {what}{estimate}.")
            _ask_button(label, sets, args)
            break  # ROAD is offered once the others are there
    _table(args, pictures)


def _scoring_seconds(args: tuple, sets: str) -> float:
    """About how long one map's scores of ``sets`` take here (``method_estimates``)."""
    kept = _forward_pass(*args[:4])
    if sets == SCORES:
        return method_estimates.scores_seconds(kept)
    return method_estimates.road_seconds(kept, _road_imputation_seconds(*args[:3]))


@st.cache_data(max_entries=16, show_spinner=False)
def _road_imputation_seconds(digest: str, model: str, pretrained: bool) -> float:
    """One of ROAD's imputations on the image's model input, timed once per input."""
    loaded = models.model(model, pretrained)
    return road_imputation_seconds(loaded, images.display_image(digest))


def _score(args: tuple, picture: Picture, metrics: str) -> dict[str, float]:
    digest, model, pretrained, _, target = args
    loaded = models.model(model, pretrained)
    image = images.display_image(digest)
    names = [m for m in METRICS if (m in ROAD_METRICS) == (metrics == ROAD)]
    return hookviz.faithfulness(loaded, image, picture.heat, target, names)


def _table(args: tuple, pictures: list[Picture]) -> None:
    forward = _shared_forward_seconds(args)
    rows = []
    for picture in pictures:
        row: dict[str, Any] = {
            "method": method_label(picture.method),
            "own ms": round(picture.seconds * 1000),
            # the CAM methods' shared pass, paid once (a pixel attribution runs its own)
            "shared forward pass ms": round(forward * 1000)
            if picture.method in hookviz.METHODS
            else None,
        }
        for sets in (SCORES, ROAD):
            scores = _kept("scores", (*args, picture.method, sets)) or {}
            row.update({METRICS[m][0]: v for m, v in scores.items()})
        rows.append(row)
    frame = pd.DataFrame(rows)
    shown = [(title, higher) for title, higher in METRICS.values() if title in frame]
    frame["best at"] = [
        ", ".join(
            "★ " + title
            for title, higher in shown
            if frame[title].notna().any()
            and row[title] == (frame[title].max() if higher else frame[title].min())
        )
        for _, row in frame.iterrows()
    ]
    # (a method left out of a cancelled scoring reads "not scored", not "None"; the columns
    # stay numbers, so sorting by a metric sorts numbers)
    formats = {title: st.column_config.NumberColumn(format="%.3f") for title, _ in shown}
    st.dataframe(
        frame, hide_index=True, width="stretch", column_config=formats, placeholder="not scored"
    )


def _sanity(args: tuple, pictures: list[Picture]) -> None:
    st.markdown("**Sanity check**: the model's weights destroyed from the head down")
    own = {p.method: p.seconds for p in pictures}
    methods = list(own)
    chosen = st.multiselect(
        "Methods to check",
        methods,
        default=[m for m in _SANITY_DEFAULT if m in methods],
        format_func=method_label,
        key="methods_sanity_choice",
        help="Each method's picture after each step of re-initialising the network's layers "
        "from the top (Adebayo et al. 2018). A picture that stays the same does not depend on "
        "what the model learned.",
    )
    left = [m for m in chosen if _kept("sanity", (*args, m)) is None]
    if left:
        forward = _shared_forward_seconds(args)
        estimate = sum(
            method_estimates.sanity_seconds(forward, own[m], _SANITY_STEPS) for m in left
        )
        st.caption(
            f"{len(left)} method{'s' if len(left) > 1 else ''} to check, each on the trained "
            f"model and {_SANITY_STEPS} randomised ones: about {duration(estimate)} in all here."
        )
    if left and not st.button("Run the sanity check", key="methods_sanity"):
        return
    digest, model, pretrained, layer, target = args
    started = time.perf_counter()
    # (Cancel, like any control, stops the check after the method under way)
    holder, report = _progress_bar("sanity", tuple(left)) if left else (None, None)
    for method in chosen:
        if report is not None and method in left:
            report(left.index(method), 0, 1)
        try:
            with feedback.working(f"Randomising the network for {method_label(method)}…"):
                check = _keep("sanity", (*args, method), lambda m=method: hookviz.sanity_check(
                    models.model(model, pretrained), images.display_image(digest), m, layer,
                    target, steps=_SANITY_STEPS,
                ))  # fmt: skip
        except hookviz.HookvizError as exc:
            feedback.error(f"The sanity check of {method_label(method)} failed: {exc}")
            continue
        verdict = (
            "⚠ survives the randomisation: it does not depend on the model"
            if check.flagged
            else "changes with the weights"
        )
        st.markdown(f"*{method_label(method)}*: {verdict}")
        columns = st.columns(len(check.maps) + 1)
        columns[0].image(_strip(check.original))
        columns[0].caption("trained")
        for column, name, picture, rank in zip(
            columns[1:], check.steps, check.maps, check.rank_correlation, strict=True
        ):
            column.image(_strip(picture))
            column.caption(f"to {name} · ρ {rank:.2f}")
    if holder is not None:
        holder.empty()
        st.caption(f"Checked in {duration(time.perf_counter() - started)}.")


def _strip(heat: np.ndarray) -> bytes:
    return render.jpeg_bytes(render.heatmap_image(heat, "inferno"))
