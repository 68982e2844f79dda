"""Your own model code as a model: ``load_model("package.module:function")``.

The function is imported from the caller's environment with the current folder importable (as
``python -m`` makes it), called with no arguments, and returns an ``nn.Module`` (or a
``LoadedModel`` it already wrapped). The module is then used as ``wrap_model`` uses one, with
what ``load_model`` was given: a checkpoint read as data (``checkpoints``), class names, a task
and a preprocessing. One forward pass of a blank image learns what the output is, so that a
model whose output does not fit the task asked is refused at load, in the user's terms (which
task fits), rather than at the first explanation with a shape error from deep inside.

The code is the caller's own, run in the caller's process: a command line or a server started
by its owner. Nothing here imports code a page visitor sends (weights are data, code is not).
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import os
import re
import sys
import traceback
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..core.inputs import extract_logits
from ..core.loaded import LoadedModel, Task
from ..core.outputs import detections_of, embeddings_of, segmentation_scores
from ..core.preprocess import Preprocessing
from ..errors import HookvizError, ModelError
from . import checkpoints
from .base import Built, ModelRequest, ModelSource
from .checkpoints import CheckpointSource, ClassNames
from .preprocessing_text import IMAGENET_PREPROCESSING

__all__ = [
    "SOURCE",
    "TASKS",
    "build_function",
    "import_function",
    "is_function_name",
]

# The tasks your own code can be: a zero-shot model needs a text tower hookviz knows.
TASKS: tuple[Task, ...] = ("classification", "detection", "segmentation", "embedding")

_IDENTIFIER = r"[A-Za-z_][A-Za-z0-9_]*"
_NAME = re.compile(rf"{_IDENTIFIER}(\.{_IDENTIFIER})*:{_IDENTIFIER}(\.{_IDENTIFIER})*")


def is_function_name(name: str) -> bool:
    """Whether ``name`` has the form of a function in your code: ``"package.module:function"``
    or ``"module:function"`` (the function may be a class's attribute: ``"mod:Net.build"``).
    A known prefix (``timm:``, ``card:``, ``hf:``, ``clip:``) keeps its meaning: the registry
    asks this only of names no prefix claims."""
    return _NAME.fullmatch(name) is not None


# ---------------------------------------------------------------- building


def build_function(
    name: str,
    *,
    function: str | None = None,
    pretrained: bool = True,
    checkpoint: CheckpointSource | None = None,
    class_names: ClassNames | None = None,
    task: Task | None = None,
    preprocessing: Preprocessing | None = None,
    folders: Sequence[Path] = (),
) -> Built:
    """The model your function builds, checked and given its weights, classes and task.

    Args:
        name: the model's name (for messages and its seed).
        function: ``"package.module:function"`` (default: ``name``).
        pretrained: False reads no weights file (``checkpoint`` still wins when given): the
            function's own initialisation.
        checkpoint: weights for the module the function builds (its own keys and shapes).
        class_names: names of its classes (default: a ``LoadedModel``'s own, then the
            checkpoint's metadata, else ``class 0``, ...).
        task: what its output is; None: guessed from one forward pass.
        preprocessing: how images become its input (default: a ``LoadedModel``'s own, else
            ImageNet's mean and std at 224 pixels).
        folders: importable besides the current folder (a model card's folder).

    Raises:
        ModelError: the module or function cannot be found, the function raised or returned
            no module, the output fits no task asked, the class names do not fit.
        CheckpointError: the checkpoint cannot be read or does not fit the module.
    """
    spec = function or name
    if task is not None and task not in TASKS:
        raise ModelError(
            f"{spec!r} is your own code: it loads as one of {', '.join(TASKS)}, not {task!r}"
        )
    builder = import_function(spec, folders)
    made = _call(spec, name, builder, folders)
    wrapped = made if isinstance(made, LoadedModel) else None
    module = wrapped.model if wrapped is not None else made
    loaded_from = f"your code {spec}"
    read = None
    if checkpoint is not None:
        read = checkpoints.read_checkpoint(checkpoint)
        loaded_from = _load_weights(spec, module, read)
    prep = preprocessing or (wrapped.preprocessing if wrapped else IMAGENET_PREPROCESSING)
    output, prep = _probe(spec, module, prep)
    task = task or (wrapped.task if wrapped and wrapped.task in TASKS else None)
    task = _task_of(spec, output, task, class_names is not None)
    names = None
    if class_names is not None:
        names, origin = checkpoints.read_class_names(class_names), _origin(class_names)
    elif read is not None and read.class_names is not None:
        names, origin = read.class_names, f" (in the metadata of {read.label})"
    elif wrapped is not None and wrapped.categories:
        names, origin = wrapped.categories, f" (of the LoadedModel {spec} returns)"
    categories = _categories(spec, output, task, names, origin if names else "")
    return Built(
        module,
        prep,
        categories,
        loaded_from=loaded_from,
        task=task,
        pretrained=read is not None or pretrained,
    )


def import_function(spec: str, folders: Sequence[Path] = ()) -> Callable[[], Any]:
    """The function ``spec`` names, imported with the current folder (and ``folders``)
    importable.

    Raises:
        ModelError: no such module, its import failed, or it has no such attribute (the
            message lists what it has that builds a model).
    """
    module_name, _, attribute = spec.partition(":")
    here = Path.cwd()
    _importable([here, *folders])
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if missing == module_name or module_name.startswith(missing + "."):
            raise ModelError(_no_module(spec, module_name, missing, [here, *folders])) from exc
        raise ModelError(
            f"importing {module_name} (for {spec}) failed: it imports {missing!r}, which is not "
            "installed in this environment"
        ) from exc
    except Exception as exc:  # the user's module may raise anything while it is imported
        raise ModelError(
            f"importing {module_name} (for {spec}) raised {_exception_line(exc, folders)}"
        ) from exc
    found: Any = module
    for part in attribute.split("."):
        if not hasattr(found, part):
            raise ModelError(_no_function(spec, module, attribute))
        found = getattr(found, part)
    if not callable(found):
        raise ModelError(
            f"{spec} is a {type(found).__name__}, not a function: hookviz calls it to build the "
            "model"
        )
    required = _required_parameters(found)
    if required:
        raise ModelError(
            f"{spec} needs arguments ({', '.join(required)}); hookviz calls it with none: give a "
            f"function that builds the model alone, e.g. def build(): return Net(...)"
        )
    return found


def _importable(folders: Sequence[Path]) -> None:
    """Put each folder on ``sys.path`` (after the current folder's entry) unless it is there:
    kept, as ``python -m`` keeps it, since the user's module may import more later."""
    present = {os.path.abspath(entry or os.curdir) for entry in sys.path}
    for folder in folders:
        path = os.path.abspath(folder)
        if path not in present:
            sys.path.insert(0, path)
            present.add(path)


def _no_module(spec: str, module_name: str, missing: str, folders: Sequence[Path]) -> str:
    top = module_name.split(".")[0]
    where = ", ".join(str(folder) for folder in folders)
    if missing == top:
        return (
            f"no module {top!r} for {spec}: it is looked for in the current folder ({where}) "
            f"and in this environment's packages. Run from the folder that holds {top}/ (or "
            f"{top}.py), or install your package into this environment (pip install -e .)"
        )
    parent, _, child = missing.rpartition(".")
    try:
        places = list(getattr(importlib.import_module(parent), "__path__", []))
    except Exception:  # (it imported a moment ago; a second import failing says nothing new)
        places = []
    inside = f" ({', '.join(places)})" if places else ""
    return f"no module {missing!r} for {spec}: {parent}{inside} has no {child}.py or {child}/"


def _no_function(spec: str, module: Any, attribute: str) -> str:
    where = getattr(module, "__file__", None) or module.__name__
    builders = _builders(module)
    if builders:
        offer = "; builders it has (callable with no arguments): " + ", ".join(
            f"{module.__name__}:{builder}" for builder in builders
        )
    else:
        offer = "; it defines no function or nn.Module class callable with no arguments"
    return f"{module.__name__} ({where}) has no {attribute!r}{offer}"


def _builders(module: Any) -> list[str]:
    """What ``module`` defines that could build a model: its public functions and
    ``nn.Module`` classes that need no argument."""
    found = []
    for attribute, value in vars(module).items():
        if attribute.startswith("_") or getattr(value, "__module__", None) != module.__name__:
            continue
        is_model_class = inspect.isclass(value) and issubclass(value, nn.Module)
        if (inspect.isfunction(value) or is_model_class) and not _required_parameters(value):
            found.append(attribute)
    return found


def _required_parameters(function: Callable) -> list[str]:
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):  # a builtin without a signature: let the call tell
        return []
    return [
        parameter.name
        for parameter in signature.parameters.values()
        if parameter.default is inspect.Parameter.empty
        and parameter.kind
        in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    ] + [
        parameter.name
        for parameter in signature.parameters.values()
        if parameter.default is inspect.Parameter.empty
        and parameter.kind is inspect.Parameter.KEYWORD_ONLY
    ]


def _call(spec: str, name: str, builder: Callable[[], Any], folders: Sequence[Path]) -> Any:
    """Call the builder under the name's seed (random initialisation gives the same weights
    in every process, as ``load_model(..., pretrained=False)`` does for the zoo), the caller's
    random state left as it was; what it returns is a module or a LoadedModel."""
    from .registry import untrained_seed  # (the registry imports this module)

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(untrained_seed(name))
        try:
            made = builder()
        except HookvizError:  # (it called hookviz itself, which said what went wrong)
            raise
        except Exception as exc:  # the user's function may raise anything
            raise ModelError(f"{spec} raised {_exception_line(exc, folders)}") from exc
    if isinstance(made, (nn.Module, LoadedModel)):
        return made
    if inspect.isclass(made) and issubclass(made, nn.Module):
        what = f"the class {made.__name__}, not a model: return {made.__name__}() instead"
    elif made is None:
        what = "None: it must return the model (return model)"
    elif isinstance(made, (tuple, list, Mapping)) and any(
        isinstance(item, nn.Module)
        for item in (made.values() if isinstance(made, Mapping) else made)
    ):
        what = f"a {type(made).__name__} holding a model: return the model alone"
    else:
        what = f"a {type(made).__module__}.{type(made).__qualname__}".replace("builtins.", "")
    raise ModelError(f"{spec} returned {what}; it must return a torch.nn.Module")


def _exception_line(exc: BaseException, folders: Sequence[Path]) -> str:
    """``TypeError: its message's first line (net.py, line 12)``: the user's own innermost
    line, where it is in the current folder (or ``folders``)."""
    lines = str(exc).strip().splitlines()
    text = f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__
    roots = [os.path.abspath(folder) + os.sep for folder in (Path.cwd(), *folders)]
    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        path = os.path.abspath(frame.filename)
        root = next((root for root in roots if path.startswith(root)), None)
        if root is not None:
            return f"{text} ({os.path.relpath(path, root)}, line {frame.lineno})"
    return text


def _load_weights(spec: str, module: nn.Module, read: checkpoints.Checkpoint) -> str:
    """Load ``read`` into ``module`` strictly; what was read, in words."""
    expected = module.state_dict()
    state, fitted = checkpoints.fit_keys(read.state, expected)
    mismatch = checkpoints.key_mismatch(state, expected)
    if mismatch is not None:
        raise checkpoints.CheckpointMismatchError(
            f"the checkpoint {read.label} does not fit the model {spec} builds: its keys or "
            f"shapes differ (state dict keys: {len(state)}, the model's: {len(expected)}).\n"
            f"{mismatch.text()}\nhookviz never loads part of a checkpoint.",
            mismatch,
        )
    module.load_state_dict(state, strict=True)
    return f"{checkpoints.describe(read, fitted)} into your code {spec}"


# ---------------------------------------------------------------- what the output is


def _probe(spec: str, module: nn.Module, prep: Preprocessing) -> tuple[Any, Preprocessing]:
    """The module's output for one blank image of the native square, and the preprocessing,
    made ``fixed`` when the module fails on a non-square input (a Linear after a flatten)."""
    module.eval()  # (a train-mode forward would update BatchNorm statistics)
    param = next(module.parameters(), None)
    device = param.device if param is not None else torch.device("cpu")
    dtype = param.dtype if param is not None and param.is_floating_point() else torch.float32
    size = max(prep.size, prep.min_side)
    square = torch.zeros(1, 3, size, size, device=device, dtype=dtype)
    try:
        with torch.no_grad():
            output = module(square)
    except Exception as exc:  # the user's forward may raise anything
        raise ModelError(
            f"the model {spec} builds failed on one {size}x{size} image (a (1, 3, {size}, "
            f"{size}) batch): {_exception_line(exc, ())}. If it takes another size, give the "
            "preprocessing (size=...)"
        ) from exc
    if prep.fixed or prep.own_size:
        return output, prep
    wide = size + max(prep.multiple, size // 4)
    wide -= wide % prep.multiple
    try:
        with torch.no_grad():
            module(torch.zeros(1, 3, size, wide, device=device, dtype=dtype))
    except Exception:  # it takes only its square: fed so, every image whole
        return output, dataclasses.replace(prep, fixed=True)
    return output, prep


_NOUNS = {
    "classification": "a classifier's (N, classes) scores",
    "detection": "a detector's list of dicts of 'boxes', 'labels' and 'scores', one per image",
    "segmentation": "a segmenter's (N, categories, H, W) scores",
    "embedding": "an embedder's (N, D) vectors",
}


def _fits(output: Any) -> list[Task]:
    """The tasks whose reader takes ``output``, in the order a guess prefers them."""
    readers: tuple[tuple[Task, Callable[[Any], Any]], ...] = (
        ("detection", detections_of),
        ("segmentation", segmentation_scores),
        ("classification", extract_logits),
        ("embedding", embeddings_of),
    )
    fits = []
    for task, reader in readers:
        try:
            read = reader(output)
        except (ModelError, TypeError, AttributeError):
            continue
        if task == "segmentation" and read.shape[2:] == (1, 1):
            continue  # a pooled vector, not a map of pixels
        fits.append(task)
    return fits


def _task_of(spec: str, output: Any, task: Task | None, named: bool) -> Task:
    """``task`` if the output fits it, else the guess (a detector's or segmenter's output is
    told by its form; anything else classifier-shaped is a classifier, as ``wrap_model``'s
    default); a ModelError saying which task fits when none asked does."""
    fits = _fits(output)
    if task is None and fits:
        return fits[0]
    if task is not None and task in fits:
        return task
    described = _describe(output)
    hint = _shape_hint(output)
    if not fits:
        raise ModelError(
            f"the model {spec} builds returns {described}, which hookviz cannot read as "
            f"{_NOUNS[task or 'classification']}{hint}"
        )
    options = []
    for fitting in fits:
        if fitting == "classification":
            count = int(extract_logits(output).shape[1])
            options.append(f'a classifier of {count} classes (task "classification")')
        elif fitting == "embedding" and "classification" not in fits:
            options.append('an embedder (task "embedding")')
        elif fitting == "embedding":
            size = int(embeddings_of(output).shape[1])
            options.append(f'an embedder of {size}-dimensional vectors (task "embedding")')
        elif fitting == "segmentation":
            count = int(segmentation_scores(output).shape[1])
            options.append(f'a segmenter of {count} categories (task "segmentation")')
        else:
            options.append('a detector (task "detection")')
    if not named and fits[:2] == ["classification", "embedding"]:
        options.reverse()  # with no class names, a vector output most likely embeds
    looks = " or ".join(options)
    raise ModelError(
        f'the model {spec} builds returns {described}, not {_NOUNS[task]} (task "{task}"): '
        f"it looks like {looks}{hint}"
    )


def _shape_hint(output: Any) -> str:
    tensor = _first_tensor(output)
    if tensor is None:
        return ""
    if tensor.dim() in (0, 1):
        return (
            "; the batch dimension is missing (for one image it must be (1, ...)): "
            "x.squeeze() drops it, x.flatten(1) keeps it"
        )
    if tensor.dim() == 3:
        return (
            "; (N, tokens, D) is a transformer's tokens: return the head's scores or the "
            "pooled (N, D) vector"
        )
    if tensor.dim() == 4 and tensor.shape[2:] == (1, 1):
        return "; a pooled (N, C, 1, 1) map becomes (N, C) scores with x.flatten(1)"
    return ""


def _first_tensor(output: Any) -> torch.Tensor | None:
    if isinstance(output, torch.Tensor):
        return output
    if isinstance(output, Mapping):
        return next((v for v in output.values() if isinstance(v, torch.Tensor)), None)
    if isinstance(output, (tuple, list)) and output:
        return _first_tensor(output[0])
    logits = getattr(output, "logits", None)
    return logits if isinstance(logits, torch.Tensor) else None


def _describe(output: Any, depth: int = 0) -> str:
    """``output`` in words: ``a (1, 10) tensor``, ``a dict of 'out' (1, 8, 14, 14)``."""
    if isinstance(output, torch.Tensor):
        return f"a {tuple(output.shape)} tensor"
    if isinstance(output, Mapping):
        keys = list(output)[:4]
        parts = [
            f"{key!r} {tuple(output[key].shape)}"
            if isinstance(output[key], torch.Tensor)
            else repr(key)
            for key in keys
        ]
        more = ", ..." if len(output) > len(keys) else ""
        return f"a dict of {', '.join(parts)}{more}"
    if isinstance(output, (tuple, list)):
        if depth or not output:
            return f"a {type(output).__name__} of {len(output)}"
        return (
            f"a {type(output).__name__} of {len(output)}, the first "
            f"{_describe(output[0], depth + 1)[2:]}"
        )
    if output is None:
        return "None"
    return f"a {type(output).__name__}"


def _origin(class_names: ClassNames) -> str:
    if isinstance(class_names, (str, os.PathLike)):
        return f" in {Path(class_names).name}"
    return ""


def _categories(
    spec: str, output: Any, task: Task, names: tuple[str, ...] | None, origin: str
) -> tuple[str, ...]:
    """The class names for ``task``, their count checked against the output."""
    if task == "embedding":
        if names:
            raise ModelError(
                f"class names{origin} given for {spec}, an embedder: its output is vectors, "
                "not class scores; leave them out, or load it as a classifier"
            )
        return ()
    if task == "detection":
        if not names:
            raise ModelError(
                f"{spec} is a detector: give its class names (a file, one name per line, index-"
                "aligned with its labels); its output does not say how many categories it has"
            )
        labels = [d["labels"] for d in detections_of(output) if len(d["labels"])]
        top = max((int(label.max()) for label in labels), default=-1)
        if top >= len(names):
            raise ModelError(
                f"{len(names)} class names{origin} for {spec}, a detector that answered label "
                f"{top}: give a name for every label, in the order of its labels"
            )
        return names
    scores = extract_logits(output) if task == "classification" else segmentation_scores(output)
    count = int(scores.shape[1])
    if names is None:
        return tuple(f"class {index}" for index in range(count))
    if len(names) != count:
        kind = "classes" if task == "classification" else "categories"
        raise ModelError(
            f"{len(names)} class names{origin} for {spec}, whose output has {count} {kind} "
            f"({_describe(output)}): give exactly {count} names, one per line, in the order of "
            "its outputs"
        )
    return names


def _build(request: ModelRequest) -> Built:
    return build_function(
        request.name,
        pretrained=request.pretrained,
        checkpoint=request.checkpoint,
        class_names=request.class_names,
        task=request.task,
        preprocessing=request.preprocessing,
    )


SOURCE = ModelSource(
    kind="custom",
    names=lambda: (),
    catalog=lambda: (),
    build=_build,
    own_weights=True,
    identity="user code",
    claims=is_function_name,
)
