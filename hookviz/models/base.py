"""What a model source and the registry exchange: the source's registration (``ModelSource``),
a request to build one of its models (``ModelRequest``), the module it builds (``Built``), how it
builds an architecture for a user's checkpoint (``Architecture``) and its catalog rows
(``ModelInfo``). Plain types only, so sources, the registry and the checkpoint loader all import
them without importing each other.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from torch import nn

from ..core.loaded import Source, Task
from ..core.preprocess import Preprocessing
from .checkpoints import CheckpointSource, ClassNames


@dataclass(frozen=True)
class ModelInfo:
    """A catalog row: a model and whether it can load with trained weights right now.

    Attributes:
        name: the name ``load_model`` takes.
        source: ``"bundled"``, ``"torchvision"``, ``"timm"`` or ``"card"``.
        ready: True when pretrained weights load with no network (bundled, or already cached).
        status: a short human label: ``"bundled"``, ``"cached"``, ``"download 98 MB"`` (or,
            where that cannot happen now, ``"cannot load now: no network (98 MB download)"``,
            ``"not cached, downloads off"``), ``"package not installed"``;
            a card's title, or its problem when it cannot load.
        task: what the model does (``LoadedModel.task``): ``"classification"``,
            ``"detection"``, ``"segmentation"``, ...
    """

    name: str
    source: Source
    ready: bool
    status: str
    task: Task = "classification"


@dataclass(frozen=True)
class ModelRequest:
    """What ``load_model`` was asked, as a source's ``build`` sees it.

    Attributes:
        name: the model's name.
        pretrained: trained weights (True) or random ones.
        download: whether missing weights may be downloaded (None: unless ``HOOKVIZ_OFFLINE``
            is ``"1"``).
        checkpoint: the caller's weights; given only to a source with ``own_weights``, which
            uses or refuses it (for the others the registry loads it on their architecture).
        class_names: the caller's class names. A source with ``own_weights`` uses them, and a
            zero-shot source takes them as its labels; for the others the registry renames the
            built model's classes.
        task: the task the caller asked (None: the model's own). A source with ``own_weights``
            builds the model as that task or refuses; for the others the registry takes a
            classifier's head off for ``"embedding"``.
        preprocessing: the caller's preprocessing (None: the model's own). A source with
            ``own_weights`` uses it; for the others the registry puts it on the built model.
    """

    name: str
    pretrained: bool = True
    download: bool | None = None
    checkpoint: CheckpointSource | None = None
    class_names: ClassNames | None = None
    task: Task | None = None
    preprocessing: Preprocessing | None = None


@dataclass(frozen=True)
class Built:
    """A module with its weights, before the registry readies it (eval mode, frozen, device).

    Attributes:
        module: the model.
        preprocessing: how images become its input.
        categories: class names, index-aligned with its outputs.
        loaded_from: where the weights came from, in words; empty for a source's own weights.
        task: what its output is (``LoadedModel.task``).
        pretrained: whether it holds trained weights (``LoadedModel.pretrained``); a source
            with ``own_weights`` says so (the others are told by the registry).
    """

    module: nn.Module
    preprocessing: Preprocessing
    categories: tuple[str, ...]
    loaded_from: str = ""
    task: Task = "classification"
    pretrained: bool = True


@dataclass(frozen=True)
class Architecture:
    """How to build a name as the architecture of a user's checkpoint.

    Attributes:
        make: ``make(classes, state)``: the module with a head of ``classes`` outputs (None: its
            default head), given the checkpoint's state dict (to see which optional parts it
            has); random weights (the checkpoint is loaded into it afterwards).
        preprocessing: the preprocessing of the built module.
        finish: run on the module once the checkpoint is loaded (drop training-only parts).
    """

    make: Callable[[int | None, dict[str, Any]], nn.Module]
    preprocessing: Callable[[nn.Module], Preprocessing]
    finish: Callable[[nn.Module], None] | None = None


@dataclass(frozen=True)
class ModelSource:
    """One family of models, as it registers into the registry (``registry.register``).

    A name belongs to the source whose ``prefix`` it starts with; a name without a registered
    prefix belongs to the first source, in registration order, that lists it, else to the first
    whose ``claims`` says it is its own.

    Attributes:
        kind: what its models' ``LoadedModel.source`` and its catalog rows' ``source`` say.
        names: the names it lists (``model_names()``, in this order); asked at every listing,
            since a list can change (a models folder).
        catalog: its catalog rows, with availability checked now.
        build: builds one of its models; called under the name's own seed when the weights
            are random, so the same name always gets the same weights.
        prefix: names that start with it are its own, listed or not (``"timm:"``); without one,
            its own names are exactly those it lists.
        architecture: how to build one of its names as the architecture of a user's checkpoint
            (and its names are then offered as architectures); None: its names take none.
        own_weights: its models bring their own weights and class names (a model card):
            ``build`` gets the caller's ``checkpoint`` and ``class_names`` to use or refuse,
            instead of the registry loading the checkpoint and renaming the classes.
        hint: how to name one of its architectures, for the message about an unknown one
            (``"a torchvision name such as 'resnet50'"``); empty: not named there.
        index: the facts it keeps in ``zoo_index.json``, read from its installed library
            (top-level keys to values), so that listing its models needs no import of it.
        identity: what ``register`` knows it by (a source registered again replaces itself);
            default: its ``kind`` (two sources of one kind need their own identities).
        claims: names it owns by their form rather than a prefix (``"package.module:function"``),
            asked only of a name no prefix claims and no source lists; None: it claims none.
    """

    kind: Source
    names: Callable[[], Sequence[str]]
    catalog: Callable[[], Iterable[ModelInfo]]
    build: Callable[[ModelRequest], Built]
    prefix: str = ""
    architecture: Callable[[str], Architecture] | None = None
    own_weights: bool = False
    hint: str = ""
    index: Callable[[], dict[str, Any]] | None = None
    identity: str = ""
    claims: Callable[[str], bool] | None = None
