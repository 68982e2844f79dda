"""Whole folders of images: the inputs of a run (``sources``), decoding them (``decode``,
in worker processes), the model's side (``batches`` for classifiers, ``tasks`` for detectors,
segmenters and embedders), what a run settles before its first chunk (``plan``), the run in
resumable chunks (``run``), its folder on disk (``store``) and reading it back (``reader``);
how faithful each explanation method is over a folder (``evaluate``, a run of the same kind);
a class's circuit between two layers (``circuit_run``, on two runs); a layer's concepts over a
folder (``concept_run``, on a features run, and ``concept_reader``).
The command line is ``hookviz.cli``."""

from .circuit_run import CircuitSummary, open_circuit, run_circuit
from .concept_reader import ConceptRegion, FolderConcepts, open_concepts
from .concept_run import ConceptsSummary, run_concepts
from .evaluate import EvaluationSummary, run_evaluate
from .reader import Run, open_run
from .run import RunError, run_cam, run_features
from .sources import expand_inputs

__all__ = [
    "CircuitSummary",
    "ConceptRegion",
    "ConceptsSummary",
    "EvaluationSummary",
    "FolderConcepts",
    "Run",
    "RunError",
    "expand_inputs",
    "open_circuit",
    "open_concepts",
    "open_run",
    "run_cam",
    "run_circuit",
    "run_concepts",
    "run_evaluate",
    "run_features",
]
