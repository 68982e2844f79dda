"""Reading a user's checkpoint as data, never as code, and fitting it to an architecture.

A checkpoint arrives as a path, bytes or a file object, in one of two formats told apart by
content, not by file name: safetensors (tensors and a str -> str metadata dict, nothing else) or
a ``torch.save`` file, read only with ``torch.load(weights_only=True)``: its restricted unpickler
refuses any global it does not know, so a pickled module, a TorchScript archive or a planted
``__reduce__`` never runs. What comes out is a plain state dict, taken out of the usual training
containers and stripped of wrapper prefixes, then checked key by key against the architecture:
never a silent ``strict=False`` load, which hides a wrong architecture behind random weights.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import pickle
import struct
import zipfile
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import torch

from ..errors import CheckpointError

CheckpointSource = str | os.PathLike | bytes | bytearray | memoryview | BinaryIO
ClassNames = Sequence[str] | str | os.PathLike | bytes

# The containers training code wraps a state dict in, in the order they are preferred: the
# weights the model was trained to (an EMA copy is used only when it is all there is).
CONTAINER_KEYS = ("state_dict", "model_state_dict", "model", "state_dict_ema")
# Prefixes wrappers put in front of every key: DataParallel / DDP, and torch.compile.
WRAPPER_PREFIXES = ("module.", "_orig_mod.")
# Classes a weights-only load may build besides tensors: Lightning keeps its hyper-parameters
# in an argparse.Namespace. Plain data, no behaviour.
_SAFE_GLOBALS = [argparse.Namespace]

RESAVE_HINT = (
    "Re-save the weights alone, in Python: torch.save(model.state_dict(), 'model.pt'), or "
    "safetensors.torch.save_file(model.state_dict(), 'model.safetensors')"
)


@dataclass(frozen=True)
class Checkpoint:
    """What a checkpoint file holds, as data.

    Attributes:
        state: parameter and buffer tensors by key, as stored (prefixes not yet fitted).
        format: ``"safetensors"`` or ``"torch"``.
        container: the key the state dict sat under (``"state_dict"``, ...), or None.
        class_names: names from the safetensors metadata (``"class_names"``, a JSON list).
        label: the file name when known, for messages.
        notes: what else was noticed (other containers present, entries left out).
    """

    state: dict[str, torch.Tensor]
    format: str
    container: str | None
    class_names: tuple[str, ...] | None
    label: str
    notes: tuple[str, ...] = ()


def read_checkpoint(source: CheckpointSource) -> Checkpoint:
    """Read ``source`` (a path, bytes or a binary file object) without running anything in it.

    Raises:
        CheckpointError: unreadable, unsafe (a pickled module, TorchScript, unknown globals),
            or not holding a state dict.
    """
    data, path, label = _open(source)
    head = data[:16] if data is not None else _peek(path)
    if not head:
        raise CheckpointError(f"the checkpoint {label} is empty")
    if _is_safetensors(head, data, path):
        return _read_safetensors(data, path, label)
    if head[:4] == b"PK\x03\x04":
        _refuse_torchscript(data, path, label)
    elif head[:1] != b"\x80":  # a legacy torch.save file is a pickle (protocol 2+)
        raise CheckpointError(
            f"the checkpoint {label} could not be read: it is neither a safetensors file nor a "
            "PyTorch (torch.save) file"
        )
    return _read_torch(data, path, label)


def read_class_names(names: ClassNames) -> tuple[str, ...]:
    """Class names from a list, or from a path / bytes of a UTF-8 text file with one name per
    line (blank lines ignored, surrounding spaces stripped).

    Raises:
        CheckpointError: the file cannot be read, or holds no names.
    """
    if isinstance(names, (bytes, bytearray)):
        try:
            text = bytes(names).decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise CheckpointError(f"the class-names file is not UTF-8 text ({exc})") from exc
        listed = text.splitlines()
    elif isinstance(names, (str, os.PathLike)):
        try:
            listed = Path(names).read_text(encoding="utf-8-sig").splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            raise CheckpointError(f"the class-names file {names} could not be read: {exc}") from exc
    else:
        listed = list(names)
        if not all(isinstance(name, str) for name in listed):
            raise CheckpointError("class names must be strings")
    cleaned = tuple(name.strip() for name in listed if name.strip())
    if not cleaned:
        raise CheckpointError("the class names are empty: give one name per line")
    return cleaned


def fit_keys(
    state: Mapping[str, torch.Tensor], expected: Mapping[str, torch.Tensor]
) -> tuple[dict[str, torch.Tensor], tuple[str, ...]]:
    """The checkpoint's tensors under the architecture's key names, and what was done.

    Wrapper prefixes (``module.``, ``_orig_mod.``) are removed wherever every key has them;
    then, if the keys still do not match, the one common prefix that makes the most of them
    match (Lightning's ``model.``, a ``backbone.``), found by comparing with the architecture's
    own keys. Entries outside that prefix (a loss's weights, a teacher) are left out, and said.
    """
    fitted, done = dict(state), []
    stripped = True
    while stripped:
        stripped = False
        for prefix in WRAPPER_PREFIXES:
            if fitted and all(key.startswith(prefix) for key in fitted):
                fitted = {key[len(prefix) :]: value for key, value in fitted.items()}
                done.append(f"prefix {prefix!r} removed")
                stripped = True
    wanted = set(expected)
    matching = len(wanted.intersection(fitted))
    if matching == len(wanted):
        return fitted, tuple(done)
    prefix, count = _best_prefix(fitted, wanted)
    if prefix and count > matching:
        inside = {k[len(prefix) :]: v for k, v in fitted.items() if k.startswith(prefix)}
        outside = len(fitted) - len(inside)
        done.append(f"prefix {prefix!r} removed")
        if outside:
            done.append(f"{outside} entries outside {prefix!r} left out")
        fitted = inside
    return fitted, tuple(done)


Shape = tuple[int, ...]


@dataclass(frozen=True)
class KeyMismatch:
    """How a checkpoint's state dict differs from an architecture's, key by key.

    Attributes:
        missing: (key, its shape in the architecture) for each key the checkpoint lacks.
        unexpected: (key, its shape in the checkpoint) for each key the architecture lacks.
        mismatched: (key, shape in the checkpoint, shape in the architecture) for each key
            both have with other shapes.
    """

    missing: tuple[tuple[str, Shape], ...]
    unexpected: tuple[tuple[str, Shape], ...]
    mismatched: tuple[tuple[str, Shape, Shape], ...]

    def rows(self, shown: int = 8) -> list[dict[str, str]]:
        """The first ``shown`` keys of each kind as table rows (kind, key, the shape in the
        checkpoint, the shape in the architecture), then a row counting the rest."""
        rows = []
        kinds = (
            ("missing", [(key, None, shape) for key, shape in self.missing]),
            ("unexpected", [(key, shape, None) for key, shape in self.unexpected]),
            ("mismatched", list(self.mismatched)),
        )
        for kind, entries in kinds:
            for key, theirs, ours in entries[:shown]:
                rows.append(
                    {
                        "kind": kind,
                        "key": key,
                        "in the checkpoint": _shape_text(theirs),
                        "in the architecture": _shape_text(ours),
                    }
                )
            if len(entries) > shown:
                rows.append(
                    {
                        "kind": kind,
                        "key": f"… and {len(entries) - shown} more",
                        "in the checkpoint": "",
                        "in the architecture": "",
                    }
                )
        return rows

    def text(self, shown: int = 4) -> str:
        """The counts and the first keys of each kind, one line each."""
        lines = []
        for title, keys in (
            ("missing", [key for key, _ in self.missing]),
            ("unexpected", [key for key, _ in self.unexpected]),
            (
                "mismatched (checkpoint vs architecture)",
                [f"{key} {theirs} vs {ours}" for key, theirs, ours in self.mismatched],
            ),
        ):
            more = f", +{len(keys) - shown} more" if len(keys) > shown else ""
            listed = ", ".join(keys[:shown]) if keys else "none"
            lines.append(f"  {len(keys)} {title}: {listed}{more}")
        return "\n".join(lines)


def _shape_text(shape: Shape | None) -> str:
    return "absent" if shape is None else "×".join(map(str, shape)) or "scalar"


class CheckpointMismatchError(CheckpointError):
    """A checkpoint whose keys or shapes do not fit the architecture; ``mismatch`` says how."""

    def __init__(self, message: str, mismatch: KeyMismatch) -> None:
        super().__init__(message)
        self.mismatch = mismatch


def key_mismatch(
    state: Mapping[str, torch.Tensor], expected: Mapping[str, torch.Tensor]
) -> KeyMismatch | None:
    """How ``state`` differs from ``expected``, or None when every key and shape fits."""
    mismatch = KeyMismatch(
        missing=tuple((k, tuple(v.shape)) for k, v in expected.items() if k not in state),
        unexpected=tuple((k, tuple(v.shape)) for k, v in state.items() if k not in expected),
        mismatched=tuple(
            (key, tuple(state[key].shape), tuple(expected[key].shape))
            for key in expected
            if key in state and tuple(state[key].shape) != tuple(expected[key].shape)
        ),
    )
    if not (mismatch.missing or mismatch.unexpected or mismatch.mismatched):
        return None
    return mismatch


def head_keys(expected: Mapping[str, torch.Tensor], num_classes: int) -> tuple[str, ...]:
    """The classifier's keys: the trailing entries whose first dimension is the class count
    (the last Linear or 1x1 Conv of every torchvision and timm classifier, with its bias)."""
    keys = []
    for key in reversed(list(expected)):
        tensor = expected[key]
        if tensor.ndim == 0 or tensor.shape[0] != num_classes:
            break
        keys.append(key)
    return tuple(reversed(keys))


def describe(checkpoint: Checkpoint, fitted: Sequence[str]) -> str:
    """Where the weights came from, in words (``LoadedModel.loaded_from``)."""
    parts = [f"{checkpoint.label} ({checkpoint.format})"]
    if checkpoint.container:
        parts.append(f"state dict under {checkpoint.container!r}")
    parts.extend(fitted)
    parts.extend(checkpoint.notes)
    return "; ".join(parts)


# ---------------------------------------------------------------- reading


def _open(source: CheckpointSource) -> tuple[bytes | None, Path | None, str]:
    if isinstance(source, (bytes, bytearray, memoryview)):
        return bytes(source), None, "(uploaded bytes)"
    if isinstance(source, (str, os.PathLike)):
        path = Path(source)
        if not path.is_file():
            raise CheckpointError(f"no checkpoint file at {path}")
        return None, path, repr(path.name)
    if hasattr(source, "read"):
        data = source.read()
        if not isinstance(data, (bytes, bytearray)):
            raise CheckpointError("the checkpoint file object must be opened in binary mode")
        name = getattr(source, "name", None)
        return bytes(data), None, repr(Path(name).name) if isinstance(name, str) else "(file)"
    raise CheckpointError(
        f"a checkpoint is a path, bytes or a binary file object, not {type(source).__name__}"
    )


def _peek(path: Path | None) -> bytes:
    assert path is not None
    with path.open("rb") as file:
        return file.read(16)


def _is_safetensors(head: bytes, data: bytes | None, path: Path | None) -> bool:
    # 8 bytes of little-endian header length, then a JSON header
    if len(head) < 9 or head[8:9] != b"{":
        return False
    (length,) = struct.unpack("<Q", head[:8])
    size = len(data) if data is not None else path.stat().st_size  # type: ignore[union-attr]
    return 8 + length <= size


def _read_safetensors(data: bytes | None, path: Path | None, label: str) -> Checkpoint:
    from safetensors import SafetensorError, safe_open
    from safetensors.torch import load, load_file

    try:
        if data is not None:
            state = load(data)
            metadata = _safetensors_metadata(data)
        else:
            state = load_file(str(path))
            with safe_open(str(path), framework="pt") as file:
                metadata = file.metadata() or {}
    except (SafetensorError, OSError, ValueError) as exc:
        raise CheckpointError(f"the safetensors file {label} could not be read: {exc}") from exc
    names = None
    if "class_names" in metadata:
        try:
            listed = json.loads(metadata["class_names"])
        except json.JSONDecodeError as exc:
            raise CheckpointError(
                f"the class_names metadata of {label} is not a JSON list ({exc})"
            ) from exc
        if not isinstance(listed, list) or not all(isinstance(n, str) for n in listed):
            raise CheckpointError(f"the class_names metadata of {label} is not a list of names")
        names = tuple(listed)
    return Checkpoint(_tensors_only(state, label), "safetensors", None, names, label)


def _safetensors_metadata(data: bytes) -> dict[str, str]:
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + length])
    metadata = header.get("__metadata__") or {}
    return {str(k): str(v) for k, v in metadata.items()}


def _refuse_torchscript(data: bytes | None, path: Path | None, label: str) -> None:
    try:
        with zipfile.ZipFile(io.BytesIO(data) if data is not None else path) as archive:
            names = archive.namelist()
    except zipfile.BadZipFile as exc:
        raise CheckpointError(f"the checkpoint {label} could not be read: {exc}") from exc
    if any(name.endswith("constants.pkl") or "/code/" in name for name in names):
        raise CheckpointError(
            f"the checkpoint {label} is a TorchScript archive (torch.jit.save): it holds code, "
            f"and hookviz only reads weights. {RESAVE_HINT}"
        )


def _read_torch(data: bytes | None, path: Path | None, label: str) -> Checkpoint:
    source = io.BytesIO(data) if data is not None else path
    try:
        with torch.serialization.safe_globals(_SAFE_GLOBALS):
            loaded = torch.load(source, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        # the weights-only unpickler names the global it refused (a class, a function)
        refused = _refused_global(str(exc))
        if refused and _runs_code(refused):
            raise CheckpointError(
                f"the checkpoint {label} would run code when opened (it calls {refused}): it is "
                "not a model's weights. hookviz did not load it, and nothing in it ran."
            ) from exc
        what = f" ({refused})" if refused else ""
        raise CheckpointError(
            f"the checkpoint {label} holds Python objects besides tensors{what}: it was probably "
            "saved with torch.save(model) rather than the model's weights. hookviz reads "
            f"weights only and runs nothing from a file. {RESAVE_HINT}"
        ) from exc
    except (RuntimeError, EOFError, OSError, KeyError, ValueError, IndexError) as exc:
        raise CheckpointError(f"the checkpoint {label} could not be read: {exc}") from exc
    state, container, notes = _unwrap(loaded, label)
    return Checkpoint(_tensors_only(state, label), "torch", container, None, label, notes)


# Modules whose functions a pickle calls to run a command, open a file or import code. A
# refused global from one of them, or any function outside the libraries whose classes a whole
# saved model names, is a file that runs code when unpickled, not a model saved whole.
_CODE_MODULES = frozenset(
    [
        "builtins",
        "__builtin__",
        "io",
        "os",
        "posix",
        "nt",
        "subprocess",
        "sys",
        "shutil",
        "socket",
        "importlib",
        "runpy",
        "pty",
        "ctypes",
        "webbrowser",
        "pickle",
        "marshal",
        "code",
        "codecs",
        "operator",
        "functools",
        "types",
        "pathlib",
        "tempfile",
        "urllib",
        "http",
        "platform",
        "asyncio",
        "multiprocessing",
        "signal",
    ]
)
_MODEL_LIBRARIES = frozenset({"torch", "torchvision", "timm", "numpy", "collections", "__main__"})


def _runs_code(refused: str) -> bool:
    """Whether the global a weights-only load refused is a way to run code (``os.system``,
    ``builtins.open``) rather than a model's class (``torch.save(model)``)."""
    module, _, name = refused.rpartition(".")
    root = module.split(".")[0]
    if root in _CODE_MODULES:
        return True
    return root not in _MODEL_LIBRARIES and not name[:1].isupper()


def _refused_global(message: str) -> str:
    for marker in ("Unsupported global: GLOBAL ", "GLOBAL "):
        if marker in message:
            return message.split(marker, 1)[1].split()[0].rstrip(".,")
    return ""


def _unwrap(loaded: object, label: str) -> tuple[Mapping, str | None, tuple[str, ...]]:
    if not isinstance(loaded, Mapping):
        raise CheckpointError(
            f"the checkpoint {label} holds a {type(loaded).__name__}, not a state dict. "
            f"{RESAVE_HINT}"
        )
    if loaded and all(isinstance(v, torch.Tensor) for v in loaded.values()):
        return loaded, None, ()
    present = [key for key in CONTAINER_KEYS if isinstance(loaded.get(key), Mapping)]
    if not present:
        keys = ", ".join(map(repr, list(loaded)[:6]))
        raise CheckpointError(
            f"the checkpoint {label} holds no state dict: its entries are {keys}; hookviz "
            f"looks for the weights themselves or under one of {', '.join(CONTAINER_KEYS)}"
        )
    chosen = present[0]
    notes = tuple(f"{other!r} also present, not used" for other in present[1:])
    return loaded[chosen], chosen, notes


def _tensors_only(state: Mapping, label: str) -> dict[str, torch.Tensor]:
    if not state:
        raise CheckpointError(f"the checkpoint {label} holds no tensors")
    odd = [key for key, value in state.items() if not isinstance(value, torch.Tensor)]
    if odd:
        raise CheckpointError(
            f"the state dict in {label} has entries that are not tensors ({', '.join(odd[:4])})"
        )
    return {str(key): value for key, value in state.items()}


def _best_prefix(state: Mapping[str, torch.Tensor], wanted: set[str]) -> tuple[str, int]:
    counts: Counter[str] = Counter()
    for key in state:
        for index, char in enumerate(key):
            if char == "." and key[index + 1 :] in wanted:
                counts[key[: index + 1]] += 1
    if not counts:
        return "", 0
    prefix, count = max(counts.items(), key=lambda item: (item[1], -len(item[0])))
    return prefix, count
