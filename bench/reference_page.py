"""The yardstick for the page's speed: the smallest Streamlit page that does what a display
control does (one slider, one 600x512 PNG that changes with it). ``bench/page_speed.py``
measures a slider step here and hookviz's controls in the same browser run, and reports ratios.

Run alone with:  streamlit run bench/reference_page.py
"""

import io

import numpy as np
import streamlit as st
from PIL import Image

level = st.slider("Brightness", 0, 100, 50)
pixels = np.zeros((600, 512, 3), np.uint8)
pixels[..., 0] = np.linspace(0, 255, 512, dtype=np.uint8)[None, :]
pixels[..., 1] = int(level * 2.55)
pixels[200:400, 150:350] = (20, 200, 40)
buffer = io.BytesIO()
Image.fromarray(pixels).save(buffer, format="PNG", compress_level=1)
st.image(buffer.getvalue())
