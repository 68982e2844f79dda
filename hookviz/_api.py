"""Every public name of ``hookviz``, imported: ``hookviz/__init__.py`` hands them out from
here on first use, so that ``import hookviz`` alone (the command line's help, the page's first
message) does not wait for torch."""

# ruff: noqa: F401  (every import here is a name handed out)

# The picture and snippet modules and the targets are part of the API as modules
# (``from hookviz import render``, ``from hookviz.targets import Box``).
from . import colour_layers, marks, render, snippet, targets
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
from .dataset import (
    CircuitSummary,
    ConceptRegion,
    ConceptsSummary,
    FolderConcepts,
    Run,
    open_circuit,
    open_concepts,
    open_run,
    run_circuit,
    run_concepts,
)
from .errors import (
    CheckpointError,
    HookvizError,
    ImageError,
    LayerError,
    ModelError,
    ModelUnavailableError,
    TargetError,
    VideoError,
)
from .images import load_image
from .insight.circuit import Circuit, Link, circuit
from .insight.compare import Comparison, compare
from .insight.concepts import ConceptError, Concepts, concepts
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
from .insight.overview import Overview, Stage, overview
from .insight.relevance import COMPOSITES as RELEVANCE_COMPOSITES
from .insight.relevance import Relevance, RelevanceError, conditional_relevance, relevance
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
from .notebook import show
from .samples import sample_image, sample_image_path
from .video import Video, load_video
