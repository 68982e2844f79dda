"""The caches of the image itself: the uploads on disk by content hash, the image decoded at
its working size, the display-size image every picture is drawn on, the sample's bytes.

Bounds: everything here is keyed by the image's content hash (``digest``) and nothing here
knows of a model; encoded pictures of the image are ``hookviz.app.caches.encoded``'s.
"""

from __future__ import annotations

from pathlib import Path

import streamlit as st
from PIL import Image

import hookviz
from hookviz import render
from hookviz.app import memory_budget, upload_folder
from hookviz.app.upload_folder import UploadFolder

DISPLAY_LONG_SIDE = 1024  # pictures are shown (not analysed) at most this large
# A photo is analysed at most this large (short side at least WORKING_SHORT_SIDE where it has
# it): nearly twice what the largest classifier is fed (518 px), more than a detector's 800.
WORKING_SHORT_SIDE = 960
WORKING_LONG_SIDE = 2048


def image_store() -> UploadFolder:
    """The images by content hash, on disk (``hookviz.app.upload_folder``: shared by the replicas
    that see the same folder); the folder is read from the environment on each call."""
    return _image_store(str(upload_folder.default_folder()), upload_folder.default_limit())


@st.cache_resource(max_entries=2, show_spinner=False)
def _image_store(folder: str, limit_bytes: int) -> UploadFolder:
    return UploadFolder(Path(folder), limit_bytes)


@st.cache_resource(max_entries=8, show_spinner=False)
def decoded_image(digest: str) -> Image.Image:
    """The image the page analyses (raises hookviz.ImageError for a bad file): RGB, at most
    ``WORKING_LONG_SIDE`` on its long side. A larger photo is decoded at a reduced scale (a
    JPEG by libjpeg's DCT scaling, never fully in memory) and then stands for its file
    (``info["full_size"]``): results and coordinates are on the file's pixel grid, as the
    library gives them for the full decode. A 30-megapixel photo so costs about 5 MB here
    instead of 90 MB; the full resolution is decoded only for a download (``full_image``)."""
    memory_budget.check("a new photo")
    image = hookviz.load_image(image_store().get(digest), shrink_to=WORKING_SHORT_SIDE)
    full = image.info.get("full_size", image.size)
    if max(image.size) > WORKING_LONG_SIDE:  # (not a JPEG, or a very elongated one)
        image = render.fit_within(image, WORKING_LONG_SIDE)
    if tuple(image.size) != tuple(full):
        image.info["full_size"] = tuple(full)
    return image


def full_image(digest: str) -> Image.Image:
    """The image at its file's full resolution, for a download only (not kept)."""
    return hookviz.load_image(image_store().get(digest))


def image_size(digest: str) -> tuple[int, int]:
    """The (width, height) of the image's file, upright."""
    image = decoded_image(digest)
    return tuple(image.info.get("full_size", image.size))


@st.cache_resource(max_entries=16, show_spinner=False)
def display_image(digest: str) -> Image.Image:
    """The image at display size: every picture on the page is drawn on this grid. It is a
    picture of its own (no ``full_size``): what is computed on it is on its grid."""
    picture = render.fit_within(decoded_image(digest), DISPLAY_LONG_SIDE)
    if "full_size" in picture.info:
        picture = picture.copy()
        picture.info.pop("full_size")
    return picture


@st.cache_data(max_entries=1, show_spinner=False)
def sample_bytes() -> bytes:
    return hookviz.sample_image_path().read_bytes()
