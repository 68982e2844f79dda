"""hookviz: feature maps and Grad-CAM of real CNNs, captured with PyTorch forward hooks.

Quick start::

    import hookviz
    loaded = hookviz.load_model("efficientnet_lite0")       # bundled, works offline
    image = hookviz.load_image("photo.jpg")
    print(hookviz.predict(loaded, image))
    maps = hookviz.feature_maps(loaded, image, "blocks.5")  # .activations: (C, h, w)
    cam = hookviz.grad_cam(loaded, image)                   # .heatmap: (H, W) in [0, 1]

Layout: ``core`` (hooks, lean graph, layers, inputs, CAM maths and methods, the hooked forward
pass), ``attributions`` (pixel attributions: gradients and perturbations), ``models`` (a
registry that the model sources register into: the bundled offline models, the torchvision zoo,
timm, model cards), ``insight`` (evidence views, diagnostics), and at the top the images that go
in and the pictures and snippets that come out (``images``, ``samples``, ``render``,
``colour_layers``, ``snippet``). Every public name is importable from ``hookviz`` itself;
they are imported on first use (``_api``), so ``import hookviz`` is quick and imports no torch
until a name is used. The page (``hookviz.app``) is the one part that imports Streamlit, and
``import hookviz`` never imports it.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import TYPE_CHECKING, Any

# ruff: noqa: F401, F403, F405  (the names of ``__all__`` come from ``_api``, imported lazily)
if TYPE_CHECKING:  # (what type checkers and the API reference read; at run time, ``__getattr__``)
    from . import colour_layers, marks, render, snippet, targets
    from ._api import *

__all__ = [
    "BASELINES",
    "DEFAULT_MODEL",
    "FAITHFULNESS_METRICS",
    "FUSIONS",
    "METHODS",
    "RELEVANCE_COMPOSITES",
    "SLOW_METHODS",
    "Analysis",
    "Attribution",
    "AttributionError",
    "BatchGradCAM",
    "Batcher",
    "CancelledError",
    "ChannelFilter",
    "CheckpointError",
    "Circuit",
    "CircuitSummary",
    "Comparison",
    "ConceptError",
    "ConceptRegion",
    "Concepts",
    "ConceptsSummary",
    "Detection",
    "FeatureMaps",
    "FolderConcepts",
    "ForwardPass",
    "GradCAM",
    "GradCAMSteps",
    "GradientRecord",
    "HookvizError",
    "ImageError",
    "Intervention",
    "LayerError",
    "LayerInfo",
    "LayerStats",
    "LayerTable",
    "Link",
    "LoadedModel",
    "MethodError",
    "MetricError",
    "ModelCard",
    "ModelError",
    "ModelInfo",
    "ModelUnavailableError",
    "Overview",
    "PatchProduct",
    "Prediction",
    "Preprocessing",
    "Present",
    "Relevance",
    "RelevanceError",
    "Rollout",
    "Run",
    "SanityCheck",
    "Segmentation",
    "Stage",
    "TargetError",
    "TrustCurves",
    "Video",
    "VideoError",
    "Visualization",
    "analyze",
    "attention_rollout",
    "attribute",
    "attribution_methods",
    "capture_outputs",
    "channel_filter",
    "channel_order",
    "circuit",
    "compare",
    "concepts",
    "conditional_relevance",
    "contrast",
    "count_hooks",
    "default_device",
    "default_layer",
    "detect",
    "embed",
    "evidence_against",
    "faithfulness",
    "feature_maps",
    "forward_hooks",
    "forward_passes",
    "fuse_cams",
    "gallery",
    "grad_cam",
    "grad_cam_batch",
    "grad_cam_steps",
    "gradient_flow",
    "imagenet_categories",
    "intervene",
    "layer_stats",
    "layer_sweep",
    "layer_table",
    "list_layers",
    "load_image",
    "load_model",
    "load_video",
    "method_options",
    "model_cards",
    "model_catalog",
    "model_names",
    "observe_outputs",
    "open_circuit",
    "open_concepts",
    "open_run",
    "overview",
    "parse_preprocessing",
    "predict",
    "relevance",
    "replace_output",
    "run_circuit",
    "run_concepts",
    "sample_image",
    "sample_image_path",
    "sanity_check",
    "seed_gradients",
    "segment",
    "show",
    "stage_layers",
    "strongest_channels",
    "teaching_layer",
    "trust_curves",
    "visualization_seconds",
    "visualize",
    "visualize_diverse",
    "wrap_model",
    "zero_shot",
]

# Modules of the package that are part of the API as modules.
_MODULES = ("colour_layers", "marks", "render", "snippet", "targets")


def __getattr__(name: str) -> Any:
    """A public name, imported on first use (then kept here: later uses are plain lookups)."""
    if name in __all__:
        value = getattr(importlib.import_module("._api", __name__), name)
    elif name in _MODULES or importlib.util.find_spec(f"{__name__}.{name}") is not None:
        # a module of the package (``from hookviz import marks``, ``hookviz.core.devices``):
        # that module alone
        value = importlib.import_module(f".{name}", __name__)
    else:
        raise AttributeError(f"module 'hookviz' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__, *_MODULES})
