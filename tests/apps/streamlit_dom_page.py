"""A small Streamlit page with one of each element whose DOM hookviz relies on
(``hookviz/app/browser/streamlit_dom.py``), for ``tests/test_streamlit_dom.py``. Its keys, labels
and values are what that test looks for."""

import time

import altair as alt
import numpy as np
import pandas as pd
import streamlit as st


def home() -> None:
    with st.sidebar:
        st.selectbox("Box", ["alpha", "beta  gamma", "delta"], key="a box/with:odd keys")
        st.radio("Radio", ["one", "two", "three"], index=1, key="radio")
        st.slider("Slider", 1, 10, 4, key="slider")
        st.toggle("Toggle", key="toggle")
        st.checkbox("Check", key="check")
    if st.button("Slow run", key="slow"):
        with st.spinner("Working slowly"):
            time.sleep(4)
    st.header("Heading")
    st.number_input("Number", value=3, key="number")
    with st.expander("Panel", expanded=True):
        st.caption("Inside the panel")
    st.progress(0.5, text="Half")
    st.metric("Metric", 3)
    st.segmented_control("Group", ["x", "y"], key="group")
    st.image(np.full((8, 8, 3), 200, np.uint8))
    chart = pd.DataFrame({"x": [1, 2, 3], "y": [3, 1, 2]})
    st.altair_chart(alt.Chart(chart).mark_bar().encode(x="x:O", y="y:Q"))
    st.dataframe(chart)
    st.file_uploader("Upload", key="upload")


def other() -> None:
    st.write("Another page")


st.navigation(
    [
        st.Page(home, title="Home", url_path="home", default=True),
        st.Page(other, title="Other", url_path="other"),
    ],
    position="top",
).run()
