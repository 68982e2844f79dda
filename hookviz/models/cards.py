"""Model cards: a folder of fine-tuned models a classroom or a team shares, offered by name.

``HOOKVIZ_MODELS_DIR`` points at a folder; every ``NAME.json`` there is a card for the weights
beside it and loads as ``load_model("card:NAME")``, offline. A card::

    {
      "architecture": "resnet50",                 # torchvision name, or "timm:NAME"
      "weights": "NAME.safetensors",              # optional: this is the default
      "title": "Skin lesions (7 classes)",        # optional, shown in the model list
      "description": "HAM10000, fine-tuned ...",  # optional
      "class_names": ["akiec", "bcc", ...],       # or "classes.txt" (one per line, beside it)
      "preprocessing": {"size": 224, "mean": [0.485, 0.456, 0.406],
                        "std": [0.229, 0.224, 0.225], "interpolation": "bilinear"}
    }

A card that cannot be read is still listed, with its problem, so a typo shows up in the page
instead of a model silently missing.

``SOURCE`` registers the cards (prefix ``card:``) as models with their own weights: the card's
checkpoint loads on its architecture, taken from whichever source owns that name.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from ..core.preprocess import Preprocessing
from ..errors import ModelError
from . import registry
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
        architecture: the architecture the weights are for.
        weights: the weights file.
        class_names: the names, a text file's path, or None (then ``class 0``, ...).
        preprocessing: the card's own preprocessing, or None (the architecture's).
        description: free text.
        problem: why the card cannot be used, or "" when it can.
    """

    name: str
    title: str
    architecture: str
    weights: Path
    class_names: tuple[str, ...] | Path | None
    preprocessing: Preprocessing | None
    description: str = ""
    problem: str = ""


def models_dir() -> Path | None:
    """The models folder named by ``HOOKVIZ_MODELS_DIR``, or None when it is not set."""
    value = os.environ.get(MODELS_DIR_ENV, "").strip()
    return Path(value).expanduser() if value else None


def model_cards(directory: str | os.PathLike | None = None) -> list[ModelCard]:
    """The cards in ``directory`` (default ``HOOKVIZ_MODELS_DIR``), sorted by name; none when
    no folder is set or it does not exist."""
    folder = Path(directory) if directory is not None else models_dir()
    if folder is None or not folder.is_dir():
        return []
    return [_read_card(path) for path in sorted(folder.glob("*.json"))]


def find_card(name: str, directory: str | os.PathLike | None = None) -> ModelCard:
    """The card called ``name`` (``"card:NAME"``).

    Raises:
        ModelError: no such card, or the card cannot be used (the message says why).
    """
    cards = {card.name: card for card in model_cards(directory)}
    if name not in cards:
        folder = directory if directory is not None else models_dir()
        where = f"in {folder}" if folder else f"({MODELS_DIR_ENV} is not set)"
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
        architecture = raw.get("architecture")
        if not isinstance(architecture, str) or not architecture:
            raise ValueError('the card has no "architecture" (e.g. "resnet50")')
        weights = path.parent / str(raw.get("weights", weights.name))
        if not weights.is_file():
            raise ValueError(f"its weights file {weights.name} is not beside it")
        card = ModelCard(
            name=name,
            title=str(raw.get("title") or path.stem),
            architecture=architecture,
            weights=weights,
            class_names=_class_names(raw.get("class_names"), path.parent),
            preprocessing=_preprocessing(raw.get("preprocessing")),
            description=str(raw.get("description", "")),
        )
    except (OSError, ValueError, TypeError) as exc:  # JSONDecodeError is a ValueError
        return ModelCard(name, path.stem, "", weights, None, None, problem=str(exc))
    return card


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
    try:
        built = build_from_checkpoint(
            card.architecture, registry.architecture(card.architecture), card.weights, class_names
        )
    except ModelError as exc:
        raise type(exc)(f"the model card {name!r} cannot be used: {exc}") from exc
    return Built(
        built.module,
        card.preprocessing or built.preprocessing,
        built.categories,
        loaded_from=f"model card {card.title!r}: {built.loaded_from}",
    )


def _catalog() -> list[ModelInfo]:
    return [
        ModelInfo(card.name, "card", not card.problem, card.problem or card.title)
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
