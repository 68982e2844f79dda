"""The command line: ``python -m hookviz cam INPUTS... --model NAME --out DIR`` (and
``features``, ``evaluate``, ``layers``). Every command takes the same model options
(``_model_options``): a name of the zoo or your own code as ``package.module:function``, its
weights, class names, task and preprocessing.

A run writes its results in chunks under ``--out`` and can be continued after any
interruption by giving the same command again; ``hookviz.open_run(DIR)`` reads it back.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence

from .insight.metric_names import METRICS

# The runs' defaults, for the help (hookviz.dataset.run's and .evaluate's, which this module
# does not import: they import torch, and --help and ``hookviz app`` would take seconds;
# tests/test_cli.py checks they agree).
MIN_SCORE = 0.5
MAX_BOXES = 20
EVALUATE_CHUNK_SIZE = 8

EPILOG = """\
examples:
  python -m hookviz cam photos/ --model efficientnet_lite0 --out runs/photos
  python -m hookviz cam val/ --model resnet50 --target folder --out runs/val
      (each image's folder names its class: find the images the model gets wrong)
  python -m hookviz cam list.txt --model timm:convnext_tiny --layer stages.2 --out runs/x
  python -m hookviz cam street/ --model fasterrcnn_resnet50_fpn --min-score 0.7 --out runs/boxes
      (a detector: one row per box, with the CAM of that box)
  python -m hookviz cam scans/ --model deeplabv3_resnet50 --out runs/regions
      (a segmenter: one row per category present, with the CAM of its pixels)
  python -m hookviz cam shop/ --model resnet50 --task embedding --reference query.jpg --out runs/sim
      (an embedder: each image's similarity to query.jpg, with the CAM of that similarity)
  python -m hookviz cam photos/ --model mynets.net:build --weights net.safetensors \
      --classes classes.txt --preprocessing size=224,mean=0.5,std=0.5 --out runs/mine
      (your own code: mynets/net.py's build() returns the nn.Module, run from its folder)

Interrupted (Ctrl-C, a crash, kill -9)? Run the same command again: it continues with the
first unfinished chunk and ends with the same outputs as an uninterrupted run. Read a run
in Python with hookviz.open_run(DIR): .table (its rows), .heatmap(i) (row i's CAM).
"""

CAM_DESCRIPTION = """\
The CAM of every image (whole, never centre-cropped), written in resumable chunks under --out.
What a row of the run's table is depends on the model's task:
  a classifier  one row per image: its top-1, the explained class (--target) and its score
  a detector    one row per box scored at least --min-score (at most --max-boxes per image,
                the most confident first): the box (x0, y0, x1, y1 in the image's pixels),
                its label, name and score, and the CAM of that box; an image with no such
                box has one row of status "empty"
  a segmenter   one row per category present, largest first: its index, name, share of the
                image's pixels and mean probability, and the CAM of its predicted pixels
  an embedder   (--task embedding: a classifier without its head) one row per image: its
                cosine similarity to --reference, and the CAM of that similarity
  CLIP          (--model clip:ARCH --labels 'a dog,a cat') one row per image, as a
                classifier's over the labels given
An image that cannot be read gets one row of status "error" with the reason."""

EVALUATE_DESCRIPTION = """\
How faithful each method's explanation is to the model, over every image: for each image and
each method, the method's map of the image's class (--target; by default the class the model
predicts) is scored by hookviz.faithfulness, and the explanation is timed.
  average_drop, increase_in_confidence
                the softmax probability of the class on the image multiplied by the map
                (TorchCAM's ClassificationMetric, the Grad-CAM++ paper's figures)
  deletion, insertion
                the areas under the curves as the most salient pixels are removed, or
                revealed on a blurred copy (hookviz.trust_curves)
  road_morf, road_lerf
                the change in the probability as the most (least) relevant pixels are removed
                and filled by noisy linear imputation (ROAD; the slowest: --metrics picks)
Methods: CAM methods and the baselines random, centre and edges (hookviz.grad_cam, at
--layer) and pixel attributions such as saliency (hookviz.attribute).
Written under --out, in resumable chunks: table.csv, one row per image and method (its
metrics and ms, the explanation's time), and summary.csv, one row per method (the means over
the images; Average Drop and Increase in Confidence in percent), also printed."""

EVALUATE_EPILOG = """\
examples:
  python -m hookviz evaluate photos/ --model efficientnet_lite0 \\
      --methods gradcam,gradcam++,layercam,saliency,centre --out runs/faithful
  python -m hookviz evaluate val/ --model resnet50 --methods gradcam,scorecam \\
      --metrics average_drop,increase_in_confidence --crop center --out runs/torchcam
      (TorchCAM's README protocol: the top-1 class, its softmax, the map as the mask, on the
      model's centre crop)

Interrupted? Run the same command again: the chunks done are kept. Read it in Python with
hookviz.open_run(DIR): .table (one row per image and method), .summary (one per method).
"""


def main(argv: Sequence[str] | None = None) -> int:
    given = list(sys.argv[1:] if argv is None else argv)
    if given[:1] == ["app"]:
        # (the page's command: its options pass on to Streamlit, so it parses its own)
        from .app import launch

        return launch.main(given[1:])
    parser = _parser()
    args = parser.parse_args(given)
    return _go(args)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hookviz",
        description="Grad-CAM and feature maps of whole folders of images, resumable.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser(
        "app",
        help='serve the page (pip install "hookviz[app]"): hookviz app [--port N] [--host H] '
        "[--model pkg.module:function ...]; hookviz app --help says more",
    )
    cam = commands.add_parser(
        "cam",
        help="the CAM of every image: its class, each detected box, each segmented category, "
        "or its similarity to a reference",
        description=CAM_DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    cam.add_argument(
        "inputs",
        nargs="+",
        help="files, folders (recursive), globs, or a .txt file listing one path per line",
    )
    _common(
        cam,
        task_help="what --model's output is (default: its own task; your own code's is guessed "
        "from its output); embedding: a classifier without its head (or your embedder), with "
        "--reference",
    )
    _batching(cam)
    cam.add_argument(
        "--layer",
        help="the layer (default: the model's default layer; hookviz layers --model NAME "
        "lists them)",
    )
    cam.add_argument(
        "--method",
        default="gradcam",
        help="gradcam (default), gradcam++, xgradcam, layercam, hirescam, gradcamelementwise, "
        "eigengradcam, shapleycam, finercam, smoothgradcam++, fullgrad, legrad (torchvision "
        "ViTs), cam (a linear head on the global average pool of the layer); one forward pass "
        "per channel or sample: scorecam, sscam, iscam, ablationcam; without a class: "
        "eigencam, kpcacam, fem; randomcam and the baselines random, centre, edges",
    )
    cam.add_argument(
        "--target",
        default="top1",
        help="a classifier's: top1 (default), a class index, a class name, or folder (each "
        "image's parent folder names its class)",
    )
    cam.add_argument(
        "--labels",
        help="a zero-shot model's labels (CLIP, --model clip:ARCH), comma-separated: "
        "'a dog,a cat,a red car'; each image's row is then a classifier's over them",
    )
    cam.add_argument(
        "--min-score",
        type=float,
        help=f"a detector's: its boxes scored at least this (default {MIN_SCORE})",
    )
    cam.add_argument(
        "--max-boxes",
        type=_positive,
        help=f"a detector's: at most this many boxes per image, the most confident (default "
        f"{MAX_BOXES})",
    )
    cam.add_argument(
        "--reference",
        help="an embedder's (--task embedding): the image each image's similarity is to",
    )
    cam.add_argument(
        "--overlays",
        choices=("none", "jpeg", "png"),
        default="none",
        help="also write each image's overlay picture (a detector's or segmenter's: one per "
        "row, its box or category outlined; at dataset scale the pictures cost more than the "
        "CAM; JPEG is about 100x cheaper than PNG)",
    )
    features = commands.add_parser(
        "features",
        help="a layer's features for every image (pooled per channel by default), and the "
        "images that excite each channel most",
        description="A layer's features for every image, written in resumable chunks under "
        "--out: one value per channel (--pool avg or max; each image fed whole) or the whole "
        "maps (--pool none; each image resized whole to the model's square).",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    features.add_argument("inputs", nargs="+", help="files, folders, globs or .txt lists")
    features.add_argument(
        "--layer", required=True, help="the layer (hookviz layers --model NAME lists them)"
    )
    features.add_argument("--pool", choices=("avg", "max", "none"), default="avg")
    features.add_argument(
        "--top-k",
        type=int,
        default=0,
        help="also find the K images that "
        "excite each channel most (hookviz.open_run(DIR).top_examples(c)); with --by "
        "relevance, where the channel carries most of the class's relevance",
    )
    features.add_argument(
        "--by",
        choices=("activation", "relevance"),
        default="activation",
        help="activation (default): each row is the layer's features; relevance: each row is "
        "the relevance of --target reaching each channel (LRP, hookviz.relevance): what the "
        "channel is used for, beside what excites it",
    )
    features.add_argument(
        "--target",
        help="with --by relevance: top1 (default: each image's top class), a class index or a "
        "class name",
    )
    features.add_argument(
        "--composite",
        default="epsilon_plus_flat",
        help="with --by relevance: the LRP rules, as zennit names them (epsilon, epsilon_plus, "
        "epsilon_plus_flat (default), epsilon_alpha2_beta1, epsilon_alpha2_beta1_flat)",
    )
    _common(
        features,
        task_help="what --model's output is (default: its own task; your own code's is guessed "
        "from its output); embedding: a classifier without its head",
    )
    _batching(features)
    _evaluate_parser(commands)
    _concepts_parser(commands)
    _circuit_parser(commands)
    layers = commands.add_parser(
        "layers",
        help="the layers of a model that --layer can name, with their output shapes",
        description="Every layer of --model that can be hooked (its output is a feature map "
        "and it runs once per forward), in the order they run, one per line: its name, its "
        "output shape (channels x height x width at the model's own input size) and its type. "
        "The default layer of hookviz cam is marked. No weights are downloaded (the layers do "
        "not depend on them); a checkpoint given is read.",
    )
    _model_options(
        layers,
        task_help="what --model's output is (default: its own task); embedding: a classifier "
        "without its head",
    )
    return parser


CIRCUIT_TOP = 8  # (hookviz.insight.circuit.DEFAULT_TOP, named here without importing torch)


def _circuit_parser(commands) -> None:
    """``hookviz circuit``: a class's most relevant channels at two layers and the links
    between them, over every image."""
    circuit = commands.add_parser(
        "circuit",
        help="a class's circuit: the most relevant channels of two layers and the strongest "
        "links between them, over every image (LRP)",
        description="For one class, over every image: the relevance of the class (LRP, as "
        "hookviz.relevance) reaching each channel of two layers, and how much of each of the "
        "upper layer's most relevant channels' relevance reaches each lower channel. Written "
        "under --out as circuit.json, channels.csv and links.csv (two resumable runs: the "
        "same command continues an interrupted one); hookviz.open_circuit(OUT) reads it back "
        "and the page's Dataset run page shows it.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    circuit.add_argument("inputs", nargs="+", help="files, folders, globs or .txt lists")
    circuit.add_argument(
        "--class",
        dest="target",
        required=True,
        metavar="CLASS",
        help="the class explained in every image: a class name or index",
    )
    circuit.add_argument(
        "--layers",
        required=True,
        metavar="LOWER,UPPER",
        help="two layers, comma-separated, e.g. layer3,layer4 (in either order: the one that "
        "runs first is the lower one; hookviz layers --model NAME lists them)",
    )
    circuit.add_argument(
        "--top",
        type=_positive,
        default=CIRCUIT_TOP,
        help="how many of the upper layer's most relevant channels to follow links from "
        f"(default {CIRCUIT_TOP}; each costs a backward pass between the two layers)",
    )
    circuit.add_argument(
        "--composite",
        default="epsilon_plus_flat",
        help="the LRP rules, as zennit names them (epsilon, epsilon_plus, epsilon_plus_flat "
        "(default), epsilon_alpha2_beta1, epsilon_alpha2_beta1_flat)",
    )
    _common(circuit)
    _batching(circuit)


def _evaluate_parser(commands) -> None:
    """``hookviz evaluate``: the faithfulness metrics of each method over every image."""
    evaluate = commands.add_parser(
        "evaluate",
        help="how faithful each method's explanations are over every image: Average Drop, "
        "Increase in Confidence, deletion, insertion, ROAD; a table per image and per method",
        description=EVALUATE_DESCRIPTION,
        epilog=EVALUATE_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    evaluate.add_argument(
        "inputs", nargs="+", help="files, folders (recursive), globs, or .txt lists"
    )
    evaluate.add_argument(
        "--methods",
        default="gradcam",
        help="comma-separated (default gradcam): CAM methods (as hookviz cam --method), the "
        "baselines random, centre, edges, and pixel attributions: saliency, input_x_gradient, "
        "guided_backprop, deconvolution, guided_gradcam, integrated_gradients, smoothgrad, "
        "occlusion, rise",
    )
    evaluate.add_argument(
        "--metrics",
        default=",".join(METRICS),
        help=f"comma-separated, from {', '.join(METRICS)} (default: all; the ROAD metrics "
        "cost most)",
    )
    _common(evaluate, chunk_size=EVALUATE_CHUNK_SIZE)
    evaluate.add_argument(
        "--layer",
        help="the CAM methods' layer (default: the model's default layer)",
    )
    evaluate.add_argument(
        "--target",
        default="top1",
        help="top1 (default: the class the model predicts), a class index, a class name, or "
        "folder (each image's parent folder names its class)",
    )
    evaluate.add_argument(
        "--labels",
        help="a zero-shot model's labels (CLIP, --model clip:ARCH), comma-separated",
    )
    evaluate.add_argument(
        "--crop",
        choices=("none", "center"),
        default="none",
        help="none (default): each image whole; center: its centre crop, the model's standard "
        "evaluation transform (TorchCAM's evaluation's)",
    )


def _concepts_parser(commands) -> None:
    """``hookviz concepts``: a layer's concepts over every image at once (run_concepts)."""
    concepts = commands.add_parser(
        "concepts",
        help="a layer's K concepts over every image at once (Deep Feature Factorization), each "
        "with its labels and the image regions where it is strongest",
        description="A layer's concepts over a whole folder: the layer's maps of every image "
        "(each resized whole to the model's square), side by side, each channel minus its "
        "minimum, factorised into K non-negative concepts (NMF). Written under --out: "
        "features/ (the maps, in resumable chunks: the long part), concepts.json and "
        "concepts.npz (each concept's channel vector, its map on every image, its labels "
        "where the layer feeds a pooled linear head, its share), and regions/concept-J-R.jpg "
        "(concept J's R-th strongest region: the part of the image around the concept's "
        "peak, with its heatmap over it).",
        epilog="example:\n  python -m hookviz concepts photos/ --model resnet50 --layer "
        "layer4 --k 8 --out runs/concepts\n\nInterrupted? Run the same command again: the "
        "maps done are kept. The same inputs with another --k reuse the maps. Read it in "
        "Python with hookviz.open_concepts(DIR).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    concepts.add_argument("inputs", nargs="+", help="files, folders, globs or .txt lists")
    concepts.add_argument(
        "--layer",
        help="the layer (default: the model's default layer; hookviz layers --model NAME "
        "lists them)",
    )
    concepts.add_argument(
        "--k",
        type=_positive,
        default=8,
        help="how many concepts (default 8; at most the layer's channels)",
    )
    concepts.add_argument(
        "--regions",
        type=_positive,
        default=6,
        help="how many images to show per concept, those where it is strongest (default 6)",
    )
    _common(concepts)
    _batching(concepts)


WEIGHTS = ("pretrained", "untrained")
TASKS = ("classification", "detection", "segmentation", "embedding")


def _model_options(parser: argparse.ArgumentParser, task_help: str | None = None) -> None:
    """The options that say which model and how to load it, the same in every command
    (``task_help``: the help of ``--task``; None: the command has no ``--task``)."""
    parser.add_argument(
        "--model",
        required=True,
        help="a name from hookviz.model_names(), timm:NAME, card:NAME, or your own code as "
        "package.module:function (called with no arguments, it returns the nn.Module; the "
        "current folder is importable)",
    )
    parser.add_argument(
        "--weights",
        default="pretrained",
        metavar="{pretrained,untrained,FILE}",
        help="pretrained (default: the model's trained weights; your own code's own "
        "initialisation), untrained (random, the same every time), or a checkpoint FILE "
        "(.safetensors or a torch.save state dict; the same as --checkpoint FILE)",
    )
    parser.add_argument("--checkpoint", metavar="FILE", help="your weights for --model")
    parser.add_argument(
        "--class-names",
        "--classes",
        metavar="FILE",
        help="a text file of class names, one per line, in the order of the outputs",
    )
    if task_help is not None:
        parser.add_argument("--task", choices=TASKS, help=task_help)
    parser.add_argument(
        "--preprocessing",
        metavar="SPEC",
        help="how images become --model's input, instead of its own: comma-separated "
        "size=PIXELS, mean=R/G/B, std=R/G/B (one number is all three), "
        "interpolation=bilinear|bicubic|nearest, fixed=yes (only the size x size square); "
        "e.g. size=224,mean=0.485/0.456/0.406,std=0.229/0.224/0.225 (your own code's default)",
    )


def _common(
    parser: argparse.ArgumentParser, chunk_size: int = 64, task_help: str | None = None
) -> None:
    """The options every run command shares (``chunk_size``: the default of
    ``--chunk-size``; ``task_help``: as for ``_model_options``)."""
    _model_options(parser, task_help)
    parser.add_argument("--out", required=True, help="the run's folder")
    parser.add_argument("--device", default="auto", help="auto (default), cpu or cuda")
    parser.add_argument(
        "--chunk-size",
        type=_positive,
        default=chunk_size,
        help=f"images per chunk, the unit of resuming (default {chunk_size})",
    )
    parser.add_argument("--limit", type=int, help="only the first N inputs")
    parser.add_argument("--overwrite", action="store_true", help="replace another run")
    parser.add_argument(
        "--strict", action="store_true", help="exit with 1 if any image could not be read"
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.add_argument(
        "--channels-last",
        action="store_true",
        help="the channels-last memory format (faster convolutions on recent GPUs; the same "
        "results)",
    )


def _batching(parser: argparse.ArgumentParser) -> None:
    """The options of the commands that feed images through the model in batches (cam,
    features)."""
    parser.add_argument(
        "--batch-size",
        type=_positive,
        default=32,
        help="images per forward pass (default 32; raise it on a GPU). Only images fed at the "
        "same size share a batch, so each result is that image's alone",
    )
    parser.add_argument(
        "--workers",
        type=_non_negative,
        # (the rule, not this machine's number: this help is also the docs' reference page)
        help="processes that read and decode the next images while the model runs (default: "
        "0, in the main process, on a CPU, whose cores the model already uses; with a GPU, one "
        "less than the number of CPU cores, at most 8)",
    )
    parser.add_argument(
        "--size-step",
        type=_positive,
        default=1,
        help="round each input's long side to a multiple of this many pixels (default 1: "
        "each image at its own aspect ratio), so photos of nearly the same shape share batches "
        "(e.g. 32 on a GPU over photos of many sizes); the aspect ratio changes by at most "
        "half a step over the long side, which moves the heatmaps a little",
    )
    parser.add_argument(
        "--bf16",
        action="store_true",
        help="run the network in bfloat16 (autocast; faster on recent GPUs and on CPUs with "
        "bf16 units; the CAM maths stay in float32, results differ slightly)",
    )
    parser.add_argument(
        "--crop",
        choices=("none", "center"),
        default="none",
        help="none (default): each image whole, never cropped; center: the model's standard "
        "evaluation transform (resize, centre crop); the heatmap is 0 outside the crop",
    )


# Decoding in background processes keeps a GPU fed (one process decodes a few hundred small
# JPEGs a second, a GPU explains thousands); on a CPU they only take the model's cores
# (measured on 2 cores: 1 worker was slower than none).
def gpu_workers(cpu_count: int | None) -> int:
    """Decoding processes beside a GPU: one less than the CPU cores (one is the model's), at
    most 8, at least 1; ``cpu_count`` None (unknown) counts as 2."""
    return max(1, min(8, (cpu_count or 2) - 1))


GPU_WORKERS = gpu_workers(os.cpu_count())


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def _non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, not {value}")
    return value


class _Refused(Exception):
    """Options that cannot go together, said before anything loads."""


def _load_options(args: argparse.Namespace) -> dict:
    """``load_model``'s arguments from the model options (``_model_options``).

    Raises:
        _Refused: ``--weights`` neither a keyword nor a file, or it and ``--checkpoint``
            asking two things.
    """
    weights, checkpoint = args.weights, args.checkpoint
    if weights not in WEIGHTS:
        if not os.path.isfile(weights):
            raise _Refused(
                f"--weights {weights}: no such file; give pretrained, untrained or a checkpoint "
                "file"
            )
        if checkpoint and os.path.abspath(checkpoint) != os.path.abspath(weights):
            raise _Refused(
                f"--weights {weights} and --checkpoint {checkpoint} name two checkpoints: give one"
            )
        weights, checkpoint = "pretrained", weights
    elif weights == "untrained" and checkpoint:
        raise _Refused(
            "--weights untrained reads no weights: leave out --checkpoint, or give the file "
            "as --weights FILE"
        )
    return {
        "pretrained": weights == "pretrained",
        "checkpoint": checkpoint,
        "class_names": args.class_names,
        "task": getattr(args, "task", None),
        "preprocessing": args.preprocessing,
        # what a run records: a checkpoint is trained weights (hookviz.dataset's "weights")
        "weights": weights,
    }


def _go(args: argparse.Namespace) -> int:
    try:
        options = _load_options(args)
    except _Refused as exc:
        print(f"hookviz: {exc}", file=sys.stderr)
        return 2
    if args.command == "layers":
        return _layers(args.model, options)
    if refusal := _options_refusal(args):  # before the model loads: a typo costs nothing
        print(f"hookviz: {refusal}", file=sys.stderr)
        return 2
    weights = options.pop("weights")
    import hookviz
    from hookviz.dataset import distributed, run_cam, run_evaluate, run_features

    device = distributed.local_device() if args.device == "auto" else args.device
    rank, _ = distributed.world()
    quiet = args.quiet or rank != 0  # one progress bar and one summary, on rank 0
    try:
        if args.command == "evaluate":  # a misspelt method or metric costs no model load
            from hookviz.dataset.evaluate import method_kinds, metric_names

            method_kinds(args.methods.split(","))
            metric_names(args.metrics.split(","))
        loaded = hookviz.load_model(
            args.model, device=device, channels_last=args.channels_last, **options
        )
        loaded = _with_labels(hookviz, loaded, getattr(args, "labels", None))
        for layer in _named_layers(args):
            if refusal := _layer_refusal(loaded, layer):
                print(refusal, file=sys.stderr)
                return 2
        common = {
            "weights": weights,
            "chunk_size": args.chunk_size,
            "limit": args.limit,
            "overwrite": args.overwrite,
            "progress": None if quiet else _Progress(),
            "crop": args.crop,
        }
        if args.command == "evaluate":
            summary = run_evaluate(
                loaded,
                args.inputs,
                args.out,
                methods=args.methods.split(","),
                metrics=args.metrics.split(","),
                layer=args.layer,
                target=args.target,
                **common,
            )
        elif args.command == "cam":
            summary = run_cam(
                loaded,
                args.inputs,
                args.out,
                layer=args.layer,
                method=args.method,
                target=args.target,
                overlays=args.overlays,
                min_score=args.min_score,
                max_boxes=args.max_boxes,
                reference=args.reference,
                **common,
                **_batching_options(args, loaded),
            )
        elif args.command == "circuit":
            from hookviz.dataset import run_circuit

            summary = run_circuit(
                loaded,
                args.inputs,
                args.out,
                target=args.target,
                layers=_named_layers(args),
                top=args.top,
                composite=args.composite,
                **common,
                **_batching_options(args, loaded),
            )
        elif args.command == "concepts":
            from hookviz.dataset import run_concepts

            summary = run_concepts(
                loaded,
                args.inputs,
                args.out,
                layer=args.layer,
                k=args.k,
                regions=args.regions,
                **common,
                **_batching_options(args, loaded),
            )
        else:
            summary = run_features(
                loaded,
                args.inputs,
                args.out,
                layer=args.layer,
                pool=args.pool,
                top_k=args.top_k,
                by=args.by,
                target=args.target,
                composite=args.composite,
                **common,
                **_batching_options(args, loaded),
            )
    except (hookviz.HookvizError, FileNotFoundError) as exc:
        print(f"hookviz: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("\nhookviz: interrupted; run the same command again to continue", file=sys.stderr)
        return 130
    finally:
        distributed.leave()
    return _finish(args, loaded, summary, quiet, rank)


def _named_layers(args: argparse.Namespace) -> list[str]:
    """The layers the command's options name (``--layer``, or ``--layers A,B``)."""
    if getattr(args, "layers", None):
        return [name.strip() for name in args.layers.split(",")]
    return [args.layer] if getattr(args, "layer", None) else []


def _batching_options(args: argparse.Namespace, loaded) -> dict:
    """The run options of ``_batching``'s flags (cam and features)."""
    workers = args.workers
    if workers is None:
        workers = GPU_WORKERS if loaded.device.type == "cuda" else 0
    return {
        "batch_size": args.batch_size,
        "workers": workers,
        "bf16": args.bf16,
        "size_step": args.size_step,
    }


def _finish(args: argparse.Namespace, loaded, summary, quiet: bool, rank: int) -> int:
    """What a finished run prints (on rank 0), and the exit status."""
    if rank != 0:
        return 0
    if not quiet:
        print(file=sys.stderr)
    resumed = (
        f" ({summary.chunks_done_before} chunks were already done)"
        if (summary.chunks_done_before)
        else ""
    )
    failed = summary.rows - summary.ok
    rows = ""
    if args.command == "cam" and (kind := _ROWS.get(loaded.task)):
        rows = f", {summary.table_rows} rows ({kind})"
    if args.command == "evaluate":
        rows = f", {summary.table_rows} rows (one per image and method)"
    print(
        f"{summary.rows} images, {summary.ok} done, {failed} failed{rows}, in "
        f"{summary.seconds:.1f} s{resumed}: {summary.out}"
    )
    errors = list(dict.fromkeys(summary.errors))  # (an image that failed: once, not per method)
    for path, reason in errors[:20]:
        print(f"  failed: {path}: {reason}")
    if len(errors) > 20:
        print(f"  ... and {len(errors) - 20} more (see table.csv)")
    if args.command == "evaluate":
        from hookviz.dataset.evaluate import format_summary

        print()
        print(format_summary(summary.methods))
    if args.command == "concepts":
        from hookviz.dataset.concept_run import format_concepts

        print(format_concepts(summary))
    if args.command == "circuit" and summary.circuit is not None:
        from hookviz.dataset.circuit_run import format_circuit

        print(format_circuit(summary.circuit, summary.out))
    return 1 if args.strict and summary.errors else 0


# What a row is, in the summary line of the runs with several rows per image.
_ROWS = {
    "detection": "one per box; one for an image with none",
    "segmentation": "one per category present",
}


def _with_labels(hookviz, loaded, labels: str | None):
    """A zero-shot model over the ``--labels`` given (a RunError without them, or with them
    for another model)."""
    from hookviz.dataset.run import RunError

    if loaded.task != "zero-shot":
        if labels:
            raise RunError(
                f"--labels is for a zero-shot model (clip:ARCH); {loaded.name!r} "
                f"is a {loaded.task} model"
            )
        return loaded
    wanted = [label.strip() for label in (labels or "").split(",") if label.strip()]
    if len(wanted) < 2:
        raise RunError(
            f"{loaded.name!r} is a zero-shot model: give two labels or more, --labels 'a dog,a cat'"
        )
    return hookviz.zero_shot(loaded, wanted)


def _options_refusal(args: argparse.Namespace) -> str | None:
    """Why the options given cannot go together, where that is known before the model loads
    (the rest, which depends on the model's task, is checked by the run)."""
    if args.command != "cam":
        return None
    if args.task == "embedding" and not args.reference:
        return (
            "--task embedding needs --reference IMAGE: each row is an image's similarity to "
            "it, and its CAM explains that similarity"
        )
    if args.reference and args.task not in (None, "embedding"):
        return f"--reference is for an embedding run (--task embedding), not --task {args.task}"
    if args.reference and not os.path.isfile(args.reference):
        return f"no such file: --reference {args.reference}"
    return None


SHOWN_LAYERS = 20  # layers an unknown --layer's message lists (hookviz layers lists all)


def _layer_refusal(loaded, name: str) -> str | None:
    """None when ``name`` can be hooked in ``loaded``; else why not, with the layers that can
    (the first ones, the default, and how to see them all)."""
    import difflib

    from hookviz import LayerError, layer_table

    table = layer_table(loaded)
    try:
        table.get(name)
        return None
    except LayerError as exc:
        known = next((layer for layer in table.layers if layer.name == name), None)
        reason = str(exc) if known is not None else f"unknown layer {name!r} in {loaded.name}"
    close = difflib.get_close_matches(name, [layer.name for layer in table.hookable], n=3)
    if close and known is None:
        reason += f" (did you mean {', '.join(close)}?)"
    # one name per feature map here (no Identity, no container repeating its last child)
    distinct = table.distinct
    lines = [f"hookviz: {reason}", f"Layers of {loaded.name} that --layer can name:"]
    lines += [f"  {_layer_line(layer, table.default)}" for layer in distinct[:SHOWN_LAYERS]]
    if len(distinct) > SHOWN_LAYERS:
        lines.append(
            f"  ... and {len(distinct) - SHOWN_LAYERS} more (the default: {table.default})"
        )
    lines.append(
        f"All {len(table.hookable)} names, with their shapes: hookviz layers --model {loaded.name}"
    )
    return "\n".join(lines)


def _layer_line(layer, default: str) -> str:
    channels, height, width = layer.shape
    mark = "  (default)" if layer.name == default else ""
    return f"{layer.name}  {channels}x{height}x{width}  {layer.type_name}{mark}"


def _layers(model: str, options: dict) -> int:
    """``hookviz layers --model NAME``: every hookable layer, one per line."""
    import hookviz

    options = {**options, "pretrained": False}  # the layers do not depend on the weights
    options.pop("weights")
    try:  # (a checkpoint given is still read: it may size the head)
        loaded = hookviz.load_model(model, device="cpu", **options)
    except (hookviz.HookvizError, FileNotFoundError) as exc:
        print(f"hookviz: {exc}", file=sys.stderr)
        return 2
    table = hookviz.layer_table(loaded)
    try:
        for layer in table.hookable:
            print(_layer_line(layer, table.default))
        sys.stdout.flush()
    except BrokenPipeError:  # (piped into head: the rest is not wanted)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


class _Progress:
    """A one-line progress bar on stderr: done / all, images per second, time left."""

    def __init__(self) -> None:
        self.started = time.perf_counter()
        self.shown = 0.0

    def __call__(self, done: int, total: int) -> None:
        now = time.perf_counter()
        if now - self.shown < 0.2 and done < total:
            return
        self.shown = now
        rate = done / max(now - self.started, 1e-9)
        left = (total - done) / rate if rate > 0 else 0.0
        width = 30
        filled = int(width * done / max(total, 1))
        bar = "#" * filled + "." * (width - filled)
        sys.stderr.write(f"\r[{bar}] {done}/{total} · {rate:.1f} img/s · {left:.0f} s left ")
        sys.stderr.flush()
