"""hookviz, the Streamlit app: the entry point only (page set-up, the shared sidebar, the pages).

Run with:  streamlit run app.py
The pages live in ``ui/``; all tensor work in the ``hookviz`` library (this app never imports
torch).
"""

from __future__ import annotations

import streamlit as st

from ui import feedback  # light: the modules that import torch come later, under a message

PAGES = (
    ("explore", "Explore", ":material/image_search:"),
    ("beyond", "Beyond one heatmap", ":material/layers:"),
    ("methods", "Methods side by side", ":material/view_module:"),
    ("channel", "What a channel looks for", ":material/visibility:"),
    ("diagnose", "Diagnose the network", ":material/monitor_heart:"),
    ("compare", "Compare", ":material/compare:"),
    ("present", "Present", ":material/slideshow:"),
    ("your_model", "Your model", ":material/upload_file:"),
    ("dataset", "Dataset run", ":material/dataset:"),
)
# Pages that work without the shared sidebar's scene (bringing a model must work even while the
# model picked in the sidebar cannot load).
WITHOUT_SCENE = ("your_model", "dataset")


def main() -> None:
    st.set_page_config(page_title="hookviz", page_icon="🔍", layout="wide")
    st.markdown("## hookviz")
    st.caption(
        "Look inside a CNN or a vision transformer: a layer's feature maps and a Grad-CAM "
        "heatmap, both captured with PyTorch forward hooks from one forward pass. Image, model, "
        "layer and class are in the sidebar; the pages share them."
    )
    # Imported here, under a visible message: the first run of a fresh server imports torch
    # (seconds), and the page should say so rather than stay blank.
    with st.spinner("Starting hookviz: loading PyTorch…", show_time=True):
        from ui import memory_budget
        from ui.browser import pictures
        from ui.sidebar import model_picker, scene
        from ui.view import state

    memory_budget.start_trimming()  # (once per server: what ended sessions freed goes back)

    state.start()
    with st.sidebar:
        pictures.once_per_tab()
    feedback.create_slot()
    try:
        # Navigation first (it knows the page from the address even if the sidebar then stops
        # on an error); the pages read the scene the sidebar resolves just after.
        navigation = st.navigation(
            [
                st.Page(
                    f"ui/entries/{path}.py",
                    title=title,
                    icon=icon,
                    url_path=path.replace("_", "-"),
                    default=path == "explore",
                )
                for path, title, icon in PAGES
            ],
            position="top",
        )
        if navigation.url_path.replace("-", "_") in WITHOUT_SCENE:
            model_picker.page_without_scene()
            navigation.run()
        else:
            # Explore draws what the class changes in fragments that a class change reruns alone
            shown = scene.shared_sidebar(results_fragment=navigation.url_path in ("", "explore"))
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


run_page()
