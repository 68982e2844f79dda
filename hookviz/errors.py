"""Exception hierarchy: every error hookviz raises on purpose is a ``HookvizError``.

Callers (the Streamlit page above all) catch ``HookvizError`` to show a message and keep going;
anything else is a bug and is allowed to surface.
"""

from __future__ import annotations


class HookvizError(Exception):
    """Base class of all errors raised deliberately by hookviz."""


class ImageError(HookvizError, ValueError):
    """The input is not a readable, supported image (or is too large to decode safely)."""


class VideoError(HookvizError, ValueError):
    """The input is not a readable video, is damaged, or is over a limit (see ``load_video``)."""


class ModelError(HookvizError, ValueError):
    """Unknown model name, or a model hookviz cannot work with."""


class CheckpointError(ModelError):
    """A checkpoint that cannot be read safely, does not fit its architecture, or whose class
    names do not match its classes."""


class ModelUnavailableError(ModelError):
    """The architecture is known but its weights cannot be loaded right now (e.g. offline)."""


class LayerError(HookvizError, ValueError):
    """The requested layer does not exist or cannot be hooked (e.g. it runs twice per forward)."""


class TargetError(HookvizError, ValueError):
    """The requested target class is out of range or not differentiable."""
