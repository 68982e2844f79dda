"""Whole folders of images: the inputs of a run (``sources``), the run itself in resumable
chunks (``run``) and reading it back (``reader``). The command line is ``hookviz.cli``."""

from .reader import Run, open_run
from .run import RunError, run_cam, run_features
from .sources import expand_inputs

__all__ = ["Run", "RunError", "expand_inputs", "open_run", "run_cam", "run_features"]
