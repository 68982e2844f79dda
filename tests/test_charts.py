"""The page's charts as the browser gets them (their Vega-Lite specifications): what makes a
chart draw nothing is visible there without a browser."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from hookviz.app import charts


def _layer(spec: dict) -> tuple[dict, list[dict]]:
    """The encoding and the data rows of a one-layer chart's specification."""
    rows = next(iter(spec["datasets"].values()))
    return spec["encoding"], rows


def test_the_activation_histogram_draws_every_non_empty_bin_on_its_log_axis():
    """Bars on a log axis that start at zero are not drawn at all (Vega: "Log scale domain
    includes zero"): each bar rises from a baseline above zero, spans its bin, and the axis
    starts at or below that baseline."""
    rng = np.random.default_rng(0)
    values = np.concatenate([np.zeros(5000), rng.exponential(1.0, 3000)])
    counts, edges = np.histogram(values, bins=64)
    spec = charts.histogram(edges, counts, "blocks.5").to_dict()
    encoding, rows = _layer(spec)
    y = encoding["y"]
    assert y["scale"]["type"] == "log"
    assert "y2" in encoding, "the bars must start somewhere a log axis has"
    baselines = {row[encoding["y2"]["field"]] for row in rows}
    assert len(baselines) == 1 and 0 < baselines.pop() < 1  # a count of 1 still shows
    assert y["scale"]["domainMin"] <= charts.HISTOGRAM_BASELINE
    assert [row["count"] for row in rows] == [int(c) for c in counts if c > 0]
    spans = [(row[encoding["x"]["field"]], row[encoding["x2"]["field"]]) for row in rows]
    kept = [
        (float(a), float(b)) for a, b, c in zip(edges[:-1], edges[1:], counts, strict=True) if c > 0
    ]
    assert spans == kept


def test_the_diagnose_charts_name_their_layers_and_mark_the_sidebars(lite0, sample):
    """On a projector nobody hovers: the execution-order axis is labelled with the whole
    blocks' names at their positions, and the sidebar's layer is drawn as a named rule."""
    import hookviz

    stats = hookviz.layer_stats(lite0, sample)
    frame = pd.DataFrame(
        {
            "depth": range(len(stats)),
            "layer": [s.name for s in stats],
            "mean": [s.mean for s in stats],
            "std": [s.std for s in stats],
        }
    )
    spec = charts.over_depth(frame, ["mean", "std"], "activation", marked="blocks.4").to_dict()
    lines, marked = spec["layer"][0], spec["layer"][1:]
    axis = lines["encoding"]["x"]["axis"]
    names = dict(zip(frame["depth"], frame["layer"], strict=True))
    labels = json.loads(axis["labelExpr"].split("[datum.value]")[0])
    assert 4 <= len(axis["values"]) <= 8
    assert [labels[str(v)] for v in axis["values"]] == [names[v] for v in axis["values"]]
    assert any(name.startswith("blocks.") for name in labels.values())  # whole blocks
    gaps = [b - a for a, b in zip(axis["values"], axis["values"][1:], strict=False)]
    assert min(gaps) >= len(frame) / 8  # spread over the axis: no names hidden by overlap
    assert all(name.count(".") == 0 or name.split(".")[1].isdigit() for name in labels.values())
    rows = [row for layer in marked for row in spec["datasets"][layer["data"]["name"]]]
    assert {row["layer"] for row in rows} == {"blocks.4"}
