"""Model cards: a folder of fine-tuned models a classroom or a team shares, offered by name.

``HOOKVIZ_MODELS_DIR`` points at a folder (or several, separated by ``os.pathsep``); every
``NAME.json`` there is a card for the weights beside it and loads as
``load_model("card:NAME")``, offline. A card::

    {
      "architecture": "resnet50",                 # torchvision name, or "timm:NAME"
      "weights": "NAME.safetensors",              # optional: this is the default
      "title": "Skin lesions (7 classes)",        # optional, shown in the model list
      "description": "HAM10000, fine-tuned ...",  # optional
      "class_names": ["akiec", "bcc", ...],       # or "classes.txt" (one per line, beside it)
      "preprocessing": {"size": 224, "mean": [0.485, 0.456, 0.406],
                        "std": [0.229, 0.224, 0.225], "interpolation": "bilinear"}
    }

A card may name a function of the server owner's own code instead of an architecture::

    {
      "function": "mynets.net:build",             # "package.module:function", no arguments
      "weights": "NAME.safetensors",              # optional: without it (and no NAME.safetensors
                                                  # beside the card) the function's own weights
      "task": "segmentation",                     # optional: guessed from the output otherwise
      "class_names": "classes.txt", "preprocessing": {...}   # as above
    }

The function is imported with the current folder and the card's folder importable and loaded
as ``load_model("package.module:function")`` loads it (``user_code``): the owner's code, trusted
as the owner's, run by the owner's server. A visitor of the page can only pick the card.

A card that cannot be read is still listed, with its problem, so a typo shows up in the page
instead of a model silently missing.

``SOURCE`` registers the cards (prefix ``card:``) as models with their own weights: the card's
checkpoint loads on its architecture, taken from whichever source owns that name.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from pathlib import Path

from ..core.loaded import Task
from ..core.preprocess import Preprocessing
from ..errors import ModelError
from . import registry, user_code
from .base import Built, ModelInfo, ModelRequest, ModelSource
from .checkpoint_model import build_from_checkpoint

MODELS_DIR_ENV = "HOOKVIZ_MODELS_DIR"
PREFIX = "card:"


@dataclass(frozen=True)
class ModelCard:
    """One card of the models folder.

    Attributes:
        name: what ``load_model`` takes: ``"card:"`` and the file's stem.
        title: a label for lists (the name when the card has none).
        architecture: the architecture the weights are for ("" for a card naming a function).
        weights: the weights file (None: a function's own weights).
        class_names: the names, a text file's path, or None (then ``class 0``, ...).
        preprocessing: the card's own preprocessing, or None (the architecture's).
        description: free text.
        problem: why the card cannot be used, or "" when it can.
        function: the owner's function that builds the model (``"package.module:function"``),
            instead of an architecture; "" for an architecture's card.
        task: what a function's model outputs (None: guessed from its output).
        folder: the folder the card was read from.
    """

    name: str
    title: str
    architecture: str
    weights: Path | None
    class_names: tuple[str, ...] | Path | None
    preprocessing: Preprocessing | None
    description: str = ""
    problem: str = ""
    function: str = ""
    task: Task | None = None
    folder: Path | None = None


def models_dirs() -> list[Path]:
    """The models folders named by ``HOOKVIZ_MODELS_DIR``: one, or several separated by
    ``os.pathsep`` (``hookviz app --model`` puts its own first); none when it is not set."""
    value = os.environ.get(MODELS_DIR_ENV, "")
    return [Path(part.strip()).expanduser() for part in value.split(os.pathsep) if part.strip()]


def models_dir() -> Path | None:
    """The first models folder named by ``HOOKVIZ_MODELS_DIR``, or None when it is not set."""
    folders = models_dirs()
    return folders[0] if folders else None


def model_cards(directory: str | os.PathLike | None = None) -> list[ModelCard]:
    """The cards in ``directory`` (default: the folders of ``HOOKVIZ_MODELS_DIR``, where a name
    in two folders is the first folder's card), sorted by name; none when no folder is set or
    none exists."""
    folders = [Path(directory)] if directory is not None else models_dirs()
    cards: dict[str, ModelCard] = {}
    for folder in folders:
        if folder.is_dir():
            for path in sorted(folder.glob("*.json")):
                card = _read_card(path)
                cards.setdefault(card.name, card)
    return [cards[name] for name in sorted(cards)]


def find_card(name: str, directory: str | os.PathLike | None = None) -> ModelCard:
    """The card called ``name`` (``"card:NAME"``).

    Raises:
        ModelError: no such card, or the card cannot be used (the message says why).
    """
    cards = {card.name: card for card in model_cards(directory)}
    if name not in cards:
        folders = [directory] if directory is not None else models_dirs()
        shown = ", ".join(str(folder) for folder in folders)
        where = f"in {shown}" if folders else f"({MODELS_DIR_ENV} is not set)"
        known = ", ".join(sorted(cards)) or "none"
        raise ModelError(f"no model card {name!r} {where}; cards there: {known}")
    card = cards[name]
    if card.problem:
        raise ModelError(f"the model card {name!r} cannot be used: {card.problem}")
    return card


def _read_card(path: Path) -> ModelCard:
    name = PREFIX + path.stem
    weights = path.with_suffix(".safetensors")
    try:
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path.name} is not valid JSON ({exc})") from exc
        if not isinstance(raw, dict):
            raise ValueError("the card is not a JSON object")
        function, task = _function(raw)
        architecture = raw.get("architecture", "")
        if not function and (not isinstance(architecture, str) or not architecture):
            raise ValueError(
                'the card has no "architecture" (e.g. "resnet50") and no "function" '
                '(e.g. "mynets.net:build")'
            )
        if function and architecture:
            raise ValueError('the card names both an "architecture" and a "function": give one')
        weights = path.parent / str(raw.get("weights", weights.name))
        if function and "weights" not in raw and not weights.is_file():
            weights = None  # the function's own weights
        elif not weights.is_file():
            raise ValueError(f"its weights file {weights.name} is not beside it")
        card = ModelCard(
            name=name,
            title=str(raw.get("title") or path.stem),
            architecture=architecture,
            weights=weights,
            class_names=_class_names(raw.get("class_names"), path.parent),
            preprocessing=_preprocessing(raw.get("preprocessing")),
            description=str(raw.get("description", "")),
            function=function,
            task=task,
            folder=path.parent,
        )
    except (OSError, ValueError, TypeError) as exc:  # JSONDecodeError is a ValueError
        return ModelCard(
            name, path.stem, "", weights, None, None, problem=str(exc), folder=path.parent
        )
    return card


def _function(raw: dict) -> tuple[str, Task | None]:
    """A card's ``"function"`` and ``"task"`` ("" and None for an architecture's card)."""
    function = raw.get("function", "")
    if not isinstance(function, str) or (function and not user_code.is_function_name(function)):
        raise ValueError(f'"function" must name one as "package.module:function", not {function!r}')
    task = raw.get("task")
    if task is not None and (not function or task not in user_code.TASKS):
        if not function:
            raise ValueError('"task" is for a card naming a "function"')
        raise ValueError(f'"task" must be one of {", ".join(user_code.TASKS)}, not {task!r}')
    return function, task


def _class_names(value: object, folder: Path) -> tuple[str, ...] | Path | None:
    if value is None:
        return None
    if isinstance(value, str):
        names = folder / value
        if not names.is_file():
            raise ValueError(f"its class-names file {value} is not beside it")
        return names
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        return tuple(value)
    raise ValueError('"class_names" must be a list of names or the name of a text file')


def _preprocessing(value: object) -> Preprocessing | None:
    if value is None:
        return None
    if not isinstance(value, dict) or "size" not in value:
        raise ValueError('"preprocessing" must be an object with at least "size"')
    mean = tuple(float(v) for v in value.get("mean", (0.485, 0.456, 0.406)))
    std = tuple(float(v) for v in value.get("std", (0.229, 0.224, 0.225)))
    if len(mean) != 3 or len(std) != 3:
        raise ValueError('"mean" and "std" need three numbers each (R, G, B)')
    return Preprocessing(
        size=int(value["size"]),
        mean=mean,  # type: ignore[arg-type]
        std=std,  # type: ignore[arg-type]
        interpolation=str(value.get("interpolation", "bilinear")),
    )


def _build(request: ModelRequest) -> Built:
    """The card's weights on its architecture, with its class names and preprocessing."""
    name = request.name
    if request.checkpoint is not None:
        raise ModelError(f"{name!r} is a model card: it brings its own weights")
    card = find_card(name)
    class_names = request.class_names if request.class_names is not None else card.class_names
    if card.function:
        return _function_build(card, request, class_names)
    try:
        built = build_from_checkpoint(
            card.architecture, registry.architecture(card.architecture), card.weights, class_names
        )
    except ModelError as exc:
        raise type(exc)(f"the model card {name!r} cannot be used: {exc}") from exc
    return Built(
        built.module,
        request.preprocessing or card.preprocessing or built.preprocessing,
        built.categories,
        loaded_from=f"model card {card.title!r}: {built.loaded_from}",
    )


def _function_build(
    card: ModelCard, request: ModelRequest, class_names: tuple[str, ...] | Path | None
) -> Built:
    """The card's function's model, with the card's weights unless ``pretrained`` is False."""
    weights = card.weights if request.pretrained else None
    try:
        built = user_code.build_function(
            card.name,
            function=card.function,
            pretrained=request.pretrained,
            checkpoint=weights,
            class_names=class_names,
            task=request.task or card.task,
            preprocessing=request.preprocessing or card.preprocessing,
            folders=[_card_folder(card)],
        )
    except ModelError as exc:
        raise type(exc)(f"the model card {card.name!r} cannot be used: {exc}") from exc
    return dataclasses.replace(built, loaded_from=f"model card {card.title!r}: {built.loaded_from}")


def _card_folder(card: ModelCard) -> Path:
    """The folder the card was read from."""
    return card.folder if card.folder is not None else models_dir() or Path.cwd()


def _catalog() -> list[ModelInfo]:
    return [
        ModelInfo(
            card.name,
            "card",
            not card.problem,
            card.problem or card.title,
            task=card.task or "classification",
        )
        for card in model_cards()
    ]


SOURCE = ModelSource(
    kind="card",
    names=lambda: [card.name for card in model_cards()],
    catalog=_catalog,
    build=_build,
    prefix=PREFIX,
    own_weights=True,
)
