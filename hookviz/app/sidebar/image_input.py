"""The sidebar's image section: the uploader, a photo from the camera (taken as an upload), the
sample, the image a dataset run or the Live camera's snapshot opened and the image a link names.

Each image is known by its content hash (``digest``) in ``images.image_store``, a folder on
disk that replicas can share. The address names an uploaded image by that digest: a reloaded
page, a link or a student sent to another replica gets the same image while the folder keeps
it. A refused file keeps the last image that worked on screen (the sample if there was none),
with the reason.
"""

from __future__ import annotations

import hashlib
import time

import streamlit as st

import hookviz
from hookviz.app import feedback, memory_budget, upload_folder, upload_release
from hookviz.app.caches import images
from hookviz.app.upload_folder import UploadFolder
from hookviz.app.view import link_notice, state
from hookviz.app.view.literal import literal
from hookviz.app.view.target import ViewTarget

IMAGE_TYPES = ["png", "jpg", "jpeg", "jfif", "webp", "bmp", "gif", "tif", "tiff"]
MAX_UPLOAD_MB = hookviz.images.MAX_BYTES // (1024 * 1024)
# The uploader accepts more than hookviz does, so that a too-large file reaches the page and is
# reported where the user looks (the browser's own refusal is a line under the uploader).
UPLOADER_LIMIT_MB = 4 * MAX_UPLOAD_MB
REPLACEMENT_WAIT_S = 1.0
_UPLOAD = "hookviz.upload"  # (file_id, digest or None, name, error or None) of the last upload
_IMAGE = "hookviz.image"  # (digest, name) of the image shown last
# (digest, name, the class explained before, where it came from) of an image opened from a
# dataset run or a camera snapshot
_OPENED = "hookviz.opened"
FROM_A_DATASET_RUN = "a dataset run"  # (``open_image``'s default ``where``)


def image_section() -> tuple[str, str | None]:
    st.sidebar.header("1 · Image")
    upload = st.sidebar.file_uploader(
        "Upload an image",
        type=IMAGE_TYPES,
        key="upload",
        max_upload_size=UPLOADER_LIMIT_MB,
        help=f"PNG, JPEG, WebP, BMP, GIF (first frame) or TIFF, up to {MAX_UPLOAD_MB} MB and "
        f"{hookviz.images.MAX_PIXELS // 1_000_000} megapixels. Without one, the sample is used.",
    )
    photo = _camera_photo()
    if photo is not None:  # (a photo is an upload: the same checks, store and address)
        upload = photo
    store = images.image_store()
    if upload is None:
        # _IMAGE stays: if a new file is refused, the last image that worked comes back.
        if st.session_state.pop(_UPLOAD, None) is not None:
            state.choose("image", None)  # the file was removed: the sample, not the link's
            _wait_for_a_replacement()
        opened = st.session_state.get(_OPENED)
        if opened is not None and store.has(opened[0]):
            return _show_opened(opened, "the sample photo")
        linked = state.wish("image")
        if upload_folder.is_digest(linked) and store.has(linked):
            name = store.name(linked) or "the uploaded photo"
            st.sidebar.caption(f"**{literal(name)}**, the photo this address names.")
            st.sidebar.button(
                "Back to the sample photo", key="close_linked", on_click=state.choose,
                args=("image", None),
            )  # fmt: skip
            return linked, name
        return _sample(store), None
    seen = st.session_state.get(_UPLOAD)
    if seen is not None and seen[0] == upload.file_id:
        opened = st.session_state.get(_OPENED)  # (opened after this upload: a new one drops it)
        if opened is not None and store.has(opened[0]):
            return _show_opened(opened, upload.name)
        digest = seen[1]
        if digest is None:  # this file was refused: keep saying why until another comes
            feedback.error(seen[3])
            return _fallback(store)
        if not store.has(digest):  # removed from the folder (its size limit, or by hand)
            data = upload.getvalue()  # (empty once released: see below)
            if not data:
                feedback.error(
                    f"**{literal(upload.name)}** is no longer kept on the server (its upload "
                    "folder made room for newer photos): upload it again."
                )
                return _fallback(store)
            store.put(data, upload.name, digest)
        return digest, upload.name
    data = upload.getvalue()
    if len(data) > hookviz.images.MAX_BYTES:
        return _refuse(
            upload,
            f"Could not use **{literal(upload.name)}**: it is {len(data) / 2**20:.0f} MB and the "
            f"limit is {MAX_UPLOAD_MB} MB. Upload a smaller copy (any photo is analysed at the "
            "model's size anyway).",
            store,
        )
    digest = store.put(data, upload.name)
    try:
        with feedback.working(f"Reading {literal(upload.name)} ({len(data) / 2**20:.1f} MB)…"):
            images.decoded_image(digest)
    except memory_budget.ServerBusy as exc:  # (not refused: the next run tries it again)
        feedback.error(str(exc))
        return _fallback(store)
    except hookviz.ImageError as exc:
        return _refuse(upload, f"Could not use **{literal(upload.name)}**: {exc}", store)
    st.session_state[_UPLOAD] = (upload.file_id, digest, upload.name, None)
    st.session_state[_IMAGE] = (digest, upload.name)
    # kept on disk now: the copy in Streamlit's memory is not needed any more
    upload_release.release(upload)
    st.session_state.pop(_OPENED, None)  # a new upload replaces an image opened from a run
    return digest, upload.name


def say_what_the_address_holds(digest: str, name: str | None) -> None:
    """Name the image in the address by its digest (the sample: nothing), and where a link
    names one that this server's folder does not hold, say that the sample is shown in its
    place."""
    linked = state.wish("image")
    never_had_one = st.session_state.get(_IMAGE) is None and st.session_state.get(_OPENED) is None
    from_a_link = name is None and linked is not None and never_had_one
    if from_a_link and upload_folder.is_digest(linked):
        st.info(
            "This link names an uploaded photo that this server does not keep (any more): "
            "this is the sample photo with the link's model, layer, class and options. Upload "
            "the photo to see the view that was shared."
        )
    elif from_a_link:  # an address that named the file, not its digest
        named = link_notice.escaped(linked)  # (anyone's text: shown as typed, cut if long)
        st.info(
            f"This link was made on **{named}**, an uploaded photo this server does not "
            "have, so this is the sample photo with the link's model, layer, class and "
            f"options. Upload {named} to see the view that was shared."
        )
    # (a link's image is said until an image comes)
    state.choose("image", linked if from_a_link else (None if name is None else digest))
    state.shown("image", None if name is None else digest)


def open_image(data: bytes, name: str, target: ViewTarget, where: str = FROM_A_DATASET_RUN) -> None:
    """Show ``data`` (an image of a dataset run, a camera snapshot: ``where`` it came from) on
    the pages, explaining ``target`` (its row's class), until an upload replaces it or the user
    goes back to the image before."""
    digest = images.image_store().put(data, name)
    before = st.session_state.get(_OPENED, (None, None, state.wish("target")))[2]
    st.session_state[_OPENED] = (digest, name, before, where)
    state.choose("target", target)


def _show_opened(opened: tuple, back_to: str) -> tuple[str, str]:
    """Name the opened image in the sidebar, with a button back to ``back_to``."""
    st.sidebar.caption(f"**{literal(opened[1])}**, opened from {opened[3]}.")
    st.sidebar.button(f"Back to {back_to}", key="close_opened", on_click=_close)
    return opened[:2]


def _camera_photo():  # -> UploadedFile | None
    """A photo from the device's camera, where the user asked for one (the browser asks for
    the camera only then)."""
    if not st.sidebar.toggle(
        "Take a photo",
        key="take_photo",
        help="A photo from this device's camera instead of a file (the browser asks for the "
        "camera first; it works on a page served from localhost or over HTTPS).",
    ):
        return None
    return st.sidebar.camera_input("Take a photo", key="photo", label_visibility="collapsed")


def _close() -> None:
    """Back to the sample, in one press: the row's class goes with its image (the class
    explained before the row was opened comes back), and the address names neither the image
    (else the next run would show it again, as the photo the address names) nor, for an image
    of a dataset run, the run's folder."""
    opened = st.session_state.pop(_OPENED, None)
    if opened is None:
        return
    state.choose("target", opened[2])
    state.choose("image", None)
    if opened[3] == FROM_A_DATASET_RUN:
        state.choose("run_dir", None)


def _wait_for_a_replacement() -> None:
    """The uploader was just emptied: the file was removed, or this is the first half of a
    replacement (the browser drops the old file, reruns the page, then sends the new one). Wait
    a moment before drawing the sample: a replacement's run arrives meanwhile and takes over at
    the next page update, so the sample never flashes between two photos."""
    with feedback.working("Waiting for the upload…"):
        time.sleep(REPLACEMENT_WAIT_S)
    st.empty()  # a page update: Streamlit stops this run here if the new file's run is waiting


def _refuse(upload, message: str, store: UploadFolder) -> tuple[str, str | None]:
    st.session_state[_UPLOAD] = (upload.file_id, None, upload.name, message)
    upload_release.release(upload)  # (a refused file's bytes are never read again)
    feedback.error(message)
    return _fallback(store)


def _fallback(store: UploadFolder) -> tuple[str, str | None]:
    """After a refused upload: the last upload that worked (nothing the user did is lost), else
    the sample."""
    last = st.session_state.get(_IMAGE)
    if last is not None and store.has(last[0]):
        feedback.error_hint(f"Still showing **{last[1]}**. Upload another file to try again.")
        return last
    feedback.error_hint("Showing the sample image instead. Upload another file to try again.")
    return _sample(store), None


def _sample(store: UploadFolder) -> str:
    data = images.sample_bytes()
    digest = _sample_digest(data)
    if not store.has(digest):
        store.put(data, digest=digest)
    return digest


@st.cache_data(max_entries=1, show_spinner=False)
def _sample_digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
