"""The Live camera's frame callback: each camera frame explained with the library (top-5 and a
CAM overlay) on the worker thread streamlit-webrtc runs it on, and what the page reads back
while the stream plays (the last explained frame, the frames per second reached).

Nothing here draws the page: the page sets the model, layer and method (``LiveSettings``) on
each run and reads ``latest`` and ``frames_per_second`` from its own thread, so everything the
two threads share sits behind one lock. The model's own lock is the library's
(``hookviz.analyze`` holds it from registering its hooks to removing them): a camera shares the
model with every other session, and only the overlay is drawn outside it.

When analysis is slower than the camera, the frames that arrived meanwhile are dropped and the
newest is explained (``explain_newest``): a queue would show a picture further and further
behind the room.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import av
import numpy as np
from PIL import Image

import hookviz
from hookviz import render

# How long the frame rate is measured over: long enough to count several frames at 5/s,
# short enough to follow a change of model or layer within a second or two.
RATE_WINDOW_S = 2.0


@dataclass(frozen=True)
class LiveSettings:
    """What each frame is explained with: the sidebar's model, layer and method.

    Attributes:
        loaded: the model (shared by every session; the library takes its lock).
        layer: the hooked layer.
        method: a CAM method that runs in one forward and backward pass (not one of
            ``hookviz.SLOW_METHODS``).
        alpha: the heatmap's opacity over the frame, in [0, 1].
        cmap: the heatmap's matplotlib colormap.
    """

    loaded: hookviz.LoadedModel
    layer: str
    method: str = "gradcam"
    alpha: float = 0.5
    cmap: str = "inferno"


@dataclass(frozen=True)
class ExplainedFrame:
    """One explained camera frame.

    Attributes:
        frame: the camera's frame as it came, (H, W, 3) uint8 RGB (a snapshot opens it).
        overlay: the CAM over the frame at the size the model was fed (its native short side).
        predictions: the top-5 classes, most probable first.
        explained: the class the CAM explains (the top-1).
        layer: the layer it was explained at.
        method: the CAM method.
    """

    frame: np.ndarray
    overlay: Image.Image
    predictions: tuple[hookviz.Prediction, ...]
    explained: str
    layer: str
    method: str


class FrameRate:
    """Frames per second over the last ``window`` seconds, from the times frames were done."""

    def __init__(self, window: float = RATE_WINDOW_S, clock: Callable[[], float] = time.monotonic):
        self._window = window
        self._clock = clock
        self._done: deque[float] = deque()

    def tick(self) -> None:
        """One frame done now."""
        now = self._clock()
        self._done.append(now)
        self._forget_before(now - self._window)

    def rate(self) -> float:
        """Frames done per second: those done in the window that ends now, over its length
        (a stream that stops falls to 0 within the window; one that starts climbs to its rate
        within it)."""
        self._forget_before(self._clock() - self._window)
        return len(self._done) / self._window

    def _forget_before(self, start: float) -> None:
        while self._done and self._done[0] < start:
            self._done.popleft()


class LiveExplainer:
    """Explains camera frames for one browser session, and keeps what the page shows."""

    def __init__(self, settings: LiveSettings, rate: FrameRate | None = None):
        self._lock = threading.Lock()
        self._settings = settings
        self._rate = rate if rate is not None else FrameRate()
        self._latest: ExplainedFrame | None = None
        self._paused = False
        self._problem: str | None = None
        self.dropped = 0  # frames that arrived while another was explained, never explained

    @property
    def settings(self) -> LiveSettings:
        with self._lock:
            return self._settings

    @settings.setter
    def settings(self, settings: LiveSettings) -> None:
        with self._lock:
            self._settings = settings

    @property
    def paused(self) -> bool:
        with self._lock:
            return self._paused

    @paused.setter
    def paused(self, paused: bool) -> None:
        with self._lock:
            self._paused = paused

    def latest(self) -> ExplainedFrame | None:
        """The last explained frame (while paused: the one the picture froze on)."""
        with self._lock:
            return self._latest

    def problem(self) -> str | None:
        """Why the last frame could not be explained (the settings' layer or method does not
        apply to the model), or None."""
        with self._lock:
            return self._problem

    def frames_per_second(self) -> float:
        """Frames explained per second, lately (0.0 while paused)."""
        with self._lock:
            return 0.0 if self._paused else self._rate.rate()

    async def explain_newest(self, frames: Sequence[av.VideoFrame]) -> list[av.VideoFrame]:
        """streamlit-webrtc's queued-frames callback: the frames that arrived since the last
        call, oldest first. Explains the newest only and returns its overlay (the component
        repeats it until the next one); while paused, returns the frozen overlay."""
        with self._lock:
            self.dropped += len(frames) - 1
            frozen = self._latest if self._paused else None
        if frozen is None:
            try:
                explained = self.explain(frames[-1].to_ndarray(format="rgb24"))
            except hookviz.HookvizError as exc:  # (said on the page; the stream goes on)
                with self._lock:
                    self._problem = str(exc)
                return [frames[-1]]
            if explained is None:  # paused meanwhile, before a first frame was explained
                return [frames[-1]]
            frozen = explained
        return [av.VideoFrame.from_ndarray(np.asarray(frozen.overlay), format="rgb24")]

    def explain(self, frame: np.ndarray) -> ExplainedFrame | None:
        """Explain one (H, W, 3) uint8 RGB frame with the current settings: one forward and
        one backward pass on the frame resized to the model's own size (the camera's 640x480
        would cost 6x the pixels and show nothing more at the page's size). None if the page
        paused meanwhile (the frozen frame stays)."""
        settings = self.settings
        picture = _at_model_size(Image.fromarray(frame), settings.loaded)
        analysis = hookviz.analyze(
            settings.loaded, picture, settings.layer, k=5, method=settings.method
        )
        overlay = render.overlay(
            picture, analysis.cam.heatmap, alpha=settings.alpha, cmap=settings.cmap
        )
        explained = ExplainedFrame(
            frame,
            overlay,
            analysis.predictions,
            analysis.cam.class_name,
            settings.layer,
            settings.method,
        )
        with self._lock:
            if self._paused:
                return None
            self._latest = explained
            self._problem = None
            self._rate.tick()
        return explained


def _at_model_size(picture: Image.Image, loaded: hookviz.LoadedModel) -> Image.Image:
    """``picture`` resized to what the model is fed (its short side at the native size), so
    the library's own resize has nothing left to do and the overlay is drawn on that grid."""
    height, width = loaded.preprocessing.input_size(picture.width, picture.height)
    if (width, height) == picture.size:
        return picture
    # (bicubic, as the library resizes: a snapshot opened in Explore then gives the same top-5)
    return picture.resize((width, height), Image.Resampling.BICUBIC)
