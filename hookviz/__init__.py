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
``colour_layers``, ``snippet``). Every public name is importable from ``hookviz`` itself.
This package never imports Streamlit.
"""

from .attributions import Attribution, AttributionError, attribute, attribution_methods
from .core.baseline_maps import BASELINES
from .core.batch import BatchGradCAM, grad_cam_batch
from .core.cam import GradCAM
from .core.devices import default_device
from .core.features import FeatureMaps, channel_order
from .core.fusion import FUSIONS, fuse_cams
from .core.hooks import capture_outputs, count_hooks, forward_hooks, observe_outputs, replace_output
from .core.layers import LayerInfo, LayerTable, default_layer, layer_table, list_layers
from .core.methods import METHODS, CancelledError, MethodError
from .core.methods import SLOW as SLOW_METHODS
from .core.pass_methods import method_options
from .core.pipeline import (
    Analysis,
    ForwardPass,
    Prediction,
    analyze,
    feature_maps,
    grad_cam,
    predict,
)
from .core.preprocess import Preprocessing
from .core.shared_passes import Batcher, forward_passes, seed_gradients
from .core.tasks import Detection, Present, Segmentation, detect, embed, segment
from .dataset import Run, open_run
from .errors import (
    CheckpointError,
    HookvizError,
    ImageError,
    LayerError,
    ModelError,
    ModelUnavailableError,
    TargetError,
)
from .images import load_image
from .insight.compare import Comparison, compare
from .insight.diagnostics import (
    GradientRecord,
    Intervention,
    LayerStats,
    gradient_flow,
    intervene,
    layer_stats,
    strongest_channels,
)
from .insight.evidence import (
    GradCAMSteps,
    TrustCurves,
    contrast,
    evidence_against,
    gallery,
    grad_cam_steps,
    layer_sweep,
    stage_layers,
    teaching_layer,
    trust_curves,
)
from .insight.faithfulness import METRICS as FAITHFULNESS_METRICS
from .insight.faithfulness import MetricError, faithfulness
from .insight.filters import ChannelFilter, PatchProduct, channel_filter
from .insight.rollout import Rollout, attention_rollout
from .insight.sanity import SanityCheck, sanity_check
from .insight.visualize import (
    Visualization,
    visualization_seconds,
    visualize,
    visualize_diverse,
)
from .models import (
    DEFAULT_MODEL,
    LoadedModel,
    ModelCard,
    ModelInfo,
    imagenet_categories,
    load_model,
    model_cards,
    model_catalog,
    model_names,
    wrap_model,
)
from .models.preprocessing_text import parse_preprocessing
from .models.zero_shot import with_labels as zero_shot
from .samples import sample_image, sample_image_path

__all__ = [
    "BASELINES",
    "DEFAULT_MODEL",
    "FAITHFULNESS_METRICS",
    "FUSIONS",
    "METHODS",
    "SLOW_METHODS",
    "Analysis",
    "Attribution",
    "AttributionError",
    "BatchGradCAM",
    "Batcher",
    "CancelledError",
    "ChannelFilter",
    "CheckpointError",
    "Comparison",
    "Detection",
    "FeatureMaps",
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
    "LoadedModel",
    "MethodError",
    "MetricError",
    "ModelCard",
    "ModelError",
    "ModelInfo",
    "ModelUnavailableError",
    "PatchProduct",
    "Prediction",
    "Preprocessing",
    "Present",
    "Rollout",
    "Run",
    "SanityCheck",
    "Segmentation",
    "TargetError",
    "TrustCurves",
    "Visualization",
    "analyze",
    "attention_rollout",
    "attribute",
    "attribution_methods",
    "capture_outputs",
    "channel_filter",
    "channel_order",
    "compare",
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
    "method_options",
    "model_cards",
    "model_catalog",
    "model_names",
    "observe_outputs",
    "open_run",
    "parse_preprocessing",
    "predict",
    "replace_output",
    "sample_image",
    "sample_image_path",
    "sanity_check",
    "seed_gradients",
    "segment",
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

# The picture and snippet modules and the targets are part of the API as modules
# (``from hookviz import render``, ``from hookviz.targets import Box``).
from . import colour_layers, marks, render, snippet, targets  # noqa: F401
