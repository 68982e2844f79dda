"""hookviz, the Streamlit app: what each run of the page does (page set-up, the shared sidebar,
the pages), called by the entry script Streamlit runs: ``app.py`` in a clone
(``streamlit run app.py``), ``entry/main_script.py`` in an installed package (``hookviz app``).

The pages live in this package; all tensor work in the ``hookviz`` library (the page never
imports torch).
"""

from __future__ import annotations

import streamlit as st

from hookviz.app import feedback  # light: the modules that import torch come later, under a message
from hookviz.app.pages import addresses


# What st.Page runs for each page: the page's module, imported only when the page is opened (the
# channel and dataset pages import pandas), draws the page on the scene the shared sidebar
# resolved in the same run (the last two need none, ``WITHOUT_SCENE``).
def _explore() -> None:
    from hookviz.app.pages.explore import page as explore
    from hookviz.app.sidebar import scene

    explore.page(scene.current())


def _beyond() -> None:
    from hookviz.app.pages import beyond
    from hookviz.app.sidebar import scene

    beyond.page(scene.current())


def _methods() -> None:
    from hookviz.app.pages import methods
    from hookviz.app.sidebar import scene

    methods.page(scene.current())


def _channel() -> None:
    from hookviz.app.pages.channel import page as channel
    from hookviz.app.sidebar import scene

    channel.page(scene.current())


def _diagnose() -> None:
    from hookviz.app.pages import diagnose
    from hookviz.app.sidebar import scene

    diagnose.page(scene.current())


def _compare() -> None:
    from hookviz.app.pages import compare
    from hookviz.app.sidebar import scene

    compare.page(scene.current())


def _present() -> None:
    from hookviz.app.pages import present
    from hookviz.app.sidebar import scene

    present.page(scene.current())


def _live_camera() -> None:
    from hookviz.app.pages import live_camera
    from hookviz.app.sidebar import scene

    live_camera.page(scene.current())


def _your_model() -> None:
    from hookviz.app.pages import your_model

    your_model.page()


def _dataset() -> None:
    from hookviz.app.pages.dataset import page as dataset

    dataset.page()


# Each page: its url path (``hookviz.app.pages.addresses``), its title and icon in the top
# navigation, and what draws it.
PAGES = (
    (addresses.EXPLORE, "Explore", ":material/image_search:", _explore),
    (addresses.BEYOND, "Beyond one heatmap", ":material/layers:", _beyond),
    (addresses.METHODS, "Methods side by side", ":material/view_module:", _methods),
    (addresses.CHANNEL, "What a channel looks for", ":material/visibility:", _channel),
    (addresses.DIAGNOSE, "Diagnose the network", ":material/monitor_heart:", _diagnose),
    (addresses.COMPARE, "Compare", ":material/compare:", _compare),
    (addresses.PRESENT, "Present", ":material/slideshow:", _present),
    (addresses.LIVE_CAMERA, "Live camera", ":material/videocam:", _live_camera),
    (addresses.YOUR_MODEL, "Your model", ":material/upload_file:", _your_model),
    (addresses.DATASET, "Dataset run", ":material/dataset:", _dataset),
)
# Pages that work without the shared sidebar's scene (bringing a model must work even while the
# model picked in the sidebar cannot load).
WITHOUT_SCENE = (addresses.YOUR_MODEL, addresses.DATASET)


def main() -> None:
    st.set_page_config(page_title="hookviz", page_icon="🔍", layout="wide")
    # Navigation first: it knows the page from the address (before anything can stop the run),
    # and Present, a projector's one picture, goes without the app's title and caption.
    navigation = st.navigation(
        [
            st.Page(draw, title=title, icon=icon, url_path=path, default=path == addresses.EXPLORE)
            for path, title, icon, draw in PAGES
        ],
        position="top",
    )
    if navigation.url_path != addresses.PRESENT:
        st.markdown("## hookviz")
        st.caption(
            "Look inside a CNN or a vision transformer: a layer's feature maps and a Grad-CAM "
            "heatmap, both captured with PyTorch forward hooks from one forward pass. Image, "
            "model, layer and class are in the sidebar; the pages share them."
        )
    # Imported here, under a visible message: the first run of a fresh server imports torch
    # (seconds), and the page should say so rather than stay blank.
    with st.spinner("Starting hookviz: loading PyTorch…", show_time=True):
        from hookviz.app import memory_budget
        from hookviz.app.browser import tab
        from hookviz.app.sidebar import model_picker, scene
        from hookviz.app.view import state

    memory_budget.start_trimming()  # (once per server: what ended sessions freed goes back)

    state.start(navigation.url_path or addresses.EXPLORE)
    with st.sidebar:
        tab.once_per_tab()
    feedback.create_slot()
    try:
        # (the pages read the scene the sidebar resolves just before they run)
        if navigation.url_path in WITHOUT_SCENE:
            model_picker.page_without_scene()
            navigation.run()
        else:
            # Explore draws what the class changes in fragments that a class change reruns alone
            explore = navigation.url_path in ("", addresses.EXPLORE)
            shown = scene.shared_sidebar(results_fragment=explore)
            navigation.run()
            scene.remember_shown(shown)
        state.completed()  # (a control change may now rerun fragments alone)
    finally:
        # Also after a bug's exception (an expected error publishes before it stops the run).
        state.publish()


def run_page() -> None:
    """The app behind the one boundary that catches everything.

    Expected problems (bad files, unavailable weights, bad layers) are shown as messages where
    they happen. Anything else is a bug: its traceback goes to the server log with an id, and
    the page shows only that id, never the traceback. (Streamlit's st.stop and reruns are
    BaseExceptions and pass through.)
    """
    try:
        main()
    except Exception:
        feedback.report_unexpected()
