"""The page's charts (Altair specs built from plain result values)."""

from __future__ import annotations

import json
from collections.abc import Sequence

import altair as alt
import numpy as np
import pandas as pd

import hookviz

BLUE, RED = "#005AB5", "#DC3220"  # a colour-blind-safe pair
WEIGHT_BAR_STEP = 14  # pixels per channel in the channel-weight chart
HISTOGRAM_BASELINE = 0.5  # where the histogram's bars start on its log axis (a count of 1 shows)


def channel_weights_height(count: int) -> int:
    """The channel-weight chart's height in pixels for ``count`` bars: the bars, the x axis and
    its title."""
    return WEIGHT_BAR_STEP * count + 90


def channel_weights(channels: Sequence[int], values: Sequence[float]) -> alt.Chart:
    """The CAM's channel weights alpha, largest magnitude on top, blue for / orange against."""
    frame = pd.DataFrame(
        {
            "channel": [str(c) for c in channels],
            "alpha": list(values),
            "sign": ["for the class" if v >= 0 else "against" for v in values],
        }
    )
    return (
        alt.Chart(frame, height=alt.Step(WEIGHT_BAR_STEP))
        .mark_bar()
        .encode(
            x=alt.X("alpha:Q", title="channel weight α"),
            # every bar named (a label that would touch its neighbour was left out)
            y=alt.Y(
                "channel:N",
                sort=[str(c) for c in channels],
                axis=alt.Axis(labelOverlap=False, labelFontSize=11),
            ),
            color=alt.Color(
                "sign:N", scale=alt.Scale(domain=["for the class", "against"], range=[BLUE, RED])
            ),
            tooltip=["channel", "alpha"],
        )
    )


def layer_axis(frame: pd.DataFrame, most: int = 8) -> alt.Axis:
    """An execution-order axis labelled with layer names (a projector's audience cannot hover):
    the whole blocks (``layer2``, ``blocks.3``, ``features.5``: a top-level name, or one with a
    block number after its one dot) at their positions, at most ``most`` of them, spread
    evenly over the axis (so their names do not overlap and get hidden)."""
    blocks = [(int(d), str(n)) for d, n in zip(frame["depth"], frame["layer"], strict=True)]
    blocks = [(depth, name) for depth, name in blocks if _whole_block(name)]
    gap = (int(frame["depth"].max()) + 1) / most
    ticks: list[tuple[int, str]] = []
    for depth, name in blocks:
        if not ticks or depth - ticks[-1][0] >= gap:
            ticks.append((depth, name))
    names = json.dumps({str(depth): name for depth, name in ticks})
    return alt.Axis(
        values=[depth for depth, _ in ticks],
        labelExpr=f"{names}[datum.value] || ''",
        labelAngle=-40,
        title="layer (execution order)",
    )


def _whole_block(name: str) -> bool:
    parts = name.split(".")
    return len(parts) == 1 or (len(parts) == 2 and parts[1].isdigit())


def over_depth(
    frame: pd.DataFrame, columns: list[str], title: str, marked: str | None = None
) -> alt.Chart:
    """Statistics of every layer against its position in the forward pass, the positions
    labelled with layer names and ``marked`` (the sidebar's layer) drawn as a rule."""
    long = frame.melt(id_vars=["depth", "layer"], value_vars=columns, var_name="statistic")
    lines = (
        alt.Chart(long)
        .mark_line(point=True)
        .encode(
            x=alt.X("depth:Q", axis=layer_axis(frame)),
            y=alt.Y("value:Q", title=title),
            color="statistic:N",
            tooltip=["layer", "statistic", "value"],
        )
    )
    return lines + _marked_layer(frame, marked) if marked in set(frame["layer"]) else lines


def _marked_layer(frame: pd.DataFrame, layer: str) -> alt.Chart:
    """A rule at ``layer``'s position, with its name."""
    at = frame[frame["layer"] == layer][["depth", "layer"]].head(1)
    rule = alt.Chart(at).mark_rule(strokeDash=[4, 3], color="gray").encode(x="depth:Q")
    text = (
        alt.Chart(at)
        .mark_text(align="left", dx=4, dy=-4, baseline="top", color="gray")
        .encode(x="depth:Q", y=alt.value(0), text="layer:N")
    )
    return rule + text


def histogram(edges: np.ndarray, counts: np.ndarray, layer: str) -> alt.Chart:
    """Activation histogram with a log count axis: the zeros of a ReLU layer are one tall bar
    that would otherwise flatten every other bin. Each bar spans its bin and rises from a
    baseline below 1 (a bar from 0 has no place on a log axis: nothing would be drawn); empty
    bins are left out."""
    keep = counts > 0
    frame = pd.DataFrame(
        {
            "from": edges[:-1][keep],
            "to": edges[1:][keep],
            "count": counts[keep],
            "baseline": HISTOGRAM_BASELINE,
        }
    )
    return (
        alt.Chart(frame, height=160)
        .mark_bar()
        .encode(
            x=alt.X("from:Q", title=f"activation of {layer}"),
            x2="to:Q",
            y=alt.Y(
                "count:Q",
                scale=alt.Scale(type="log", domainMin=HISTOGRAM_BASELINE),
                title="count (log scale)",
            ),
            y2="baseline:Q",
            tooltip=["from", "to", "count"],
        )
    )


TRUST_SERIES = {  # TrustCurves' field: its label, colour and dash
    "deletion": ("deletion, heatmap order", RED, []),
    "deletion_random": ("deletion, random order", RED, [5, 4]),
    "insertion": ("insertion, heatmap order", BLUE, []),
    "insertion_random": ("insertion, random order", BLUE, [5, 4]),
}


def trust(curves: hookviz.TrustCurves, class_name: str) -> alt.Chart:
    """Deletion and insertion curves, heatmap order (solid) and random order (dashed), each of
    the four named in one legend with its own colour and dash, so they can be told apart."""
    rows = [
        {"curve": label, "fraction": float(f), "probability": float(v)}
        for field, (label, _, _) in TRUST_SERIES.items()
        for f, v in zip(curves.fractions, getattr(curves, field), strict=True)
    ]
    labels = [s[0] for s in TRUST_SERIES.values()]
    legend = alt.Legend(title="curve", orient="bottom", columns=2, symbolType="stroke")
    return (
        alt.Chart(pd.DataFrame(rows))
        .mark_line(point=True)
        .encode(
            x=alt.X("fraction:Q", title="share of pixels removed / revealed"),
            y=alt.Y("probability:Q", title=f"p({class_name})"),
            # colour and dash on the same field with the same legend: Vega-Lite draws one
            # legend whose symbols carry both
            color=alt.Color(
                "curve:N",
                scale=alt.Scale(domain=labels, range=[s[1] for s in TRUST_SERIES.values()]),
                legend=legend,
            ),
            strokeDash=alt.StrokeDash(
                "curve:N",
                scale=alt.Scale(domain=labels, range=[s[2] for s in TRUST_SERIES.values()]),
                legend=legend,
            ),
            tooltip=["curve", "fraction", "probability"],
        )
    )


def gradient_flow(frame: pd.DataFrame) -> alt.Chart:
    """Gradient size at every layer on a log axis (vanishing gradients stand out)."""
    return (
        alt.Chart(frame)
        .mark_line(point=True)
        .encode(
            x=alt.X("depth:Q", axis=layer_axis(frame)),
            y=alt.Y("gradient RMS:Q", scale=alt.Scale(type="log")),
            tooltip=["layer", "gradient RMS", "gradient norm"],
        )
    )


def circuit_links(found: hookviz.Circuit, lowers: Sequence[int]) -> alt.Chart:
    """A circuit's links as a grid: its upper channels (rows, most relevant on top) by the
    ``lowers`` channels (columns), each cell the share of the upper channel's relevance that
    reaches the lower one. Channel numbers alone on the axes, the layers in their titles and
    the legend below, so that eight columns still fit a phone's width."""
    cells = []
    for upper in found.upper_channels:
        for lower in lowers:
            link = found.link(upper, lower)
            cells.append({
                "upper": str(upper),
                "lower": str(lower),
                "share": link.share,
                "relevance": link.relevance,
            })  # fmt: skip
    frame = pd.DataFrame(cells)
    # white figures on the darkest cells (either end of the diverging scale)
    frame["dark"] = frame["share"].abs() >= 0.6 * frame["share"].abs().max()
    base = alt.Chart(frame).encode(
        x=alt.X(
            "lower:N",
            sort=[str(c) for c in lowers],
            title=f"{found.lower} channel (most relevant first)",
            axis=alt.Axis(labelAngle=0),
        ),
        y=alt.Y(
            "upper:N",
            sort=[str(c) for c in found.upper_channels],
            title=f"{found.upper} channel",
        ),
    )
    grid = base.mark_rect().encode(
        color=alt.Color(
            "share:Q",
            title="share of the row's relevance",
            scale=alt.Scale(scheme="redblue", reverse=True, domainMid=0),
            legend=alt.Legend(format=".1%", orient="bottom"),
        ),
        tooltip=[
            alt.Tooltip("upper:N", title=found.upper),
            alt.Tooltip("lower:N", title=found.lower),
            alt.Tooltip("share:Q", format=".1%"),
            "relevance",
        ],
    )
    labels = base.mark_text(fontSize=10).encode(
        text=alt.Text("share:Q", format=".1%"),
        color=alt.condition(alt.datum.dark, alt.value("white"), alt.value("black")),
    )
    return (grid + labels).properties(height=alt.Step(26))
