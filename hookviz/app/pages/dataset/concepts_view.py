"""A ``hookviz concepts`` folder on the Dataset run page: each concept the layer found over the
folder, with its share, its names (where the layer feeds a pooled head) and the image regions
where it is strongest."""

from __future__ import annotations

from pathlib import Path

import streamlit as st

import hookviz
from hookviz.app.caches import runs
from hookviz.app.pages.dataset import run_folder
from hookviz.app.view.literal import literal

REGIONS_SHOWN = 6  # region pictures per concept


def is_concepts(folder: Path) -> bool:
    """Whether ``folder`` holds a ``hookviz concepts`` run (its features run is there)."""
    return (folder / "features" / "manifest.json").is_file() and not (
        folder / "manifest.json"
    ).is_file()


def concepts_stamp(folder: str) -> str:
    """Changes whenever the concepts or their features run do (or go)."""
    return run_folder.files_stamp(folder, "concepts.json", "features/manifest.json")


def show(folder: str) -> None:
    """The concepts in ``folder`` (an unfinished run: how to finish it)."""
    try:
        found = runs.dataset_concepts(folder, concepts_stamp(folder))
    except hookviz.HookvizError as exc:
        st.info(literal(exc))
        return
    job = found.run.manifest["job"]
    st.markdown(
        f"concepts of **{found.model}** ({job['weights']}) at `{found.layer}` · {found.k} "
        f"concepts over {found.images} images · {found.error:.0%} of the activations left "
        "unexplained"
    )
    st.caption(
        "Deep Feature Factorization of every image's maps at once: each concept is a mix of "
        "the layer's channels, found wherever it is strong in the folder. Its share is its part "
        "of the factorised activations. "
        + ("Names: the classes each concept scores highest through the model's head."
           if found.labels is not None else f"No names: {found.labels_reason}")
    )  # fmt: skip
    for concept in range(found.k):
        st.markdown(f"**Concept {concept + 1}** · {found.shares[concept]:.0%} · "
                    f"{_names(found, concept)}")  # fmt: skip
        pictures, captions = [], []
        for rank, region in enumerate(found.regions[concept][:REGIONS_SHOWN]):
            if region.picture is None:
                continue
            pictures.append(str(found.region_picture(concept, rank)))
            captions.append(f"{Path(region.path).name} · {region.peak:.3g}")
        if pictures:
            st.image(pictures, caption=captions, width=140)
        else:
            st.caption("Its images could not be read again to draw its regions.")


def _names(found: hookviz.FolderConcepts, concept: int) -> str:
    if found.labels is None or found.label_probabilities is None:
        return "no names"
    named = zip(found.labels[concept], found.label_probabilities[concept], strict=False)
    return ", ".join(f"{literal(name)} {probability:.0%}" for name, probability in named)
