"""A model's preprocessing as one line of text, as the command line's ``--preprocessing`` and
the page take it: ``size=224,mean=0.485/0.456/0.406,std=0.229/0.224/0.225``. One parser for
both, so the same text means the same input everywhere."""

from __future__ import annotations

import re
from typing import Any

from ..core.preprocess import Preprocessing
from ..errors import ModelError

__all__ = ["IMAGENET_PREPROCESSING", "parse_preprocessing"]

# wrap_model's default, and your own code's
IMAGENET_PREPROCESSING = Preprocessing(
    size=224, mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225)
)

_PREPROCESSING_KEYS = ("size", "mean", "std", "interpolation", "fixed")
_INTERPOLATIONS = ("bilinear", "bicubic", "nearest")
_YES, _NO = ("yes", "true", "1"), ("no", "false", "0")


def parse_preprocessing(spec: str | Preprocessing) -> Preprocessing:
    """A ``Preprocessing`` from its text form, as the command line's ``--preprocessing`` and
    the page take it: comma-separated ``key=value`` entries, any of

    - ``size=224``: the short side the image is resized to, in pixels (default 224);
    - ``mean=0.485/0.456/0.406`` and ``std=0.229/0.224/0.225``: per channel (R/G/B) on RGB
      scaled to [0, 1]; one number is all three (``mean=0.5,std=0.5``); ``;`` may separate
      them too. Default: ImageNet's, as above;
    - ``interpolation=bilinear`` (or ``bicubic``, ``nearest``);
    - ``fixed=yes``: the model takes only a ``size`` x ``size`` square (each image is then
      resized to it whole, never cropped). A model that fails on a non-square input is found
      fixed at load anyway.

    ``"size=224,mean=0.5,std=0.5,interpolation=bicubic"`` is EfficientNet-Lite's. A
    ``Preprocessing`` given is returned as it is.

    Raises:
        ModelError: an unknown key, a value that is not one, or no entry at all (the message
            names the entry and the form it takes).
    """
    if isinstance(spec, Preprocessing):
        return spec
    if not isinstance(spec, str):
        raise ModelError(
            f"preprocessing is a Preprocessing or text such as 'size=224,mean=0.5,std=0.5', "
            f"not {type(spec).__name__}"
        )
    values: dict[str, Any] = {}
    entries = [entry.strip() for entry in spec.split(",") if entry.strip()]
    if not entries:
        raise ModelError(
            "the preprocessing is empty: give entries such as "
            "'size=224,mean=0.485/0.456/0.406,std=0.229/0.224/0.225'"
        )
    for entry in entries:
        key, equals, value = (part.strip() for part in entry.partition("="))
        key = key.lower()
        if not equals or not value:
            raise ModelError(f"preprocessing entry {entry!r} is not key=value (e.g. size=224)")
        if key not in _PREPROCESSING_KEYS:
            raise ModelError(
                f"unknown preprocessing entry {key!r}: the entries are "
                f"{', '.join(_PREPROCESSING_KEYS)} (e.g. size=224,mean=0.5,std=0.5)"
            )
        if key in values:
            raise ModelError(f"preprocessing entry {key!r} is given twice")
        values[key] = _preprocessing_value(key, value)
    return Preprocessing(
        size=values.get("size", IMAGENET_PREPROCESSING.size),
        mean=values.get("mean", IMAGENET_PREPROCESSING.mean),
        std=values.get("std", IMAGENET_PREPROCESSING.std),
        interpolation=values.get("interpolation", "bilinear"),
        fixed=values.get("fixed", False),
    )


def _preprocessing_value(key: str, value: str) -> Any:
    if key == "size":
        try:
            size = int(value)
        except ValueError:
            size = 0
        if size < 1:
            raise ModelError(f"preprocessing size={value} is not a number of pixels (size=224)")
        return size
    if key in ("mean", "std"):
        parts = [part.strip() for part in re.split(r"[/;]", value)]
        try:
            numbers = tuple(float(part) for part in parts)
        except ValueError:
            numbers = ()
        if len(numbers) == 1:
            numbers = numbers * 3
        if len(numbers) != 3:
            raise ModelError(
                f"preprocessing {key}={value} is not one number or three (R/G/B), e.g. "
                f"{key}={'0.485/0.456/0.406' if key == 'mean' else '0.229/0.224/0.225'}"
            )
        if key == "std" and min(numbers) <= 0:
            raise ModelError(f"preprocessing std={value}: a standard deviation is above 0")
        return numbers
    if key == "interpolation":
        if value.lower() not in _INTERPOLATIONS:
            raise ModelError(
                f"preprocessing interpolation={value} is not one of {', '.join(_INTERPOLATIONS)}"
            )
        return value.lower()
    if value.lower() in _YES:  # fixed
        return True
    if value.lower() in _NO:
        return False
    raise ModelError(f"preprocessing fixed={value} is not yes or no")
