"""The pictures of a hookviz page as a browser test sees them: Streamlit's images (``<img>``)
and the heatmap pictures the page draws itself (``hookviz/app/browser/js``: canvases), in page
order, with what tells that one changed and that it is on screen. Shared by the browser tests
and the page benchmark.

Each constant is JavaScript: a selector, or a function of one picture element.
"""

from __future__ import annotations

PICTURES = "[data-testid='stImage'] img, [data-testid='hvPicture'] canvas"

# A picture's version: an image's source, or a drawn picture's name and draw count (it changes
# with every redraw).
VERSION = "(e) => e.tagName === 'IMG' ? e.src : e.id + ':' + (e.dataset.drawn || '')"

# Decoded (an image) or drawn at least once (a canvas), with a size.
READY = (
    "(e) => e.tagName === 'IMG' ? e.complete && e.naturalWidth > 0"
    " : !!e.dataset.drawn && e.width > 0"
)

# The picture's own pixel size (not its size on screen).
SIZE = "(e) => e.tagName === 'IMG' ? [e.naturalWidth, e.naturalHeight] : [e.width, e.height]"

# Its pixels as a PNG data URL (a drawn picture's exact pixels; for an image, its source).
PIXELS = "(e) => e.tagName === 'IMG' ? e.src : e.toDataURL('image/png')"


def helpers() -> str:
    """The functions above as JavaScript declarations, to start a function body with."""
    return (
        f"const pictures = () => [...document.querySelectorAll({PICTURES!r})];"
        f"const version = {VERSION}; const ready = {READY}; const size = {SIZE};"
        f"const pixels = {PIXELS};"
    )
