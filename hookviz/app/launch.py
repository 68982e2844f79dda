"""``hookviz app``: serve the page from an installed hookviz, from any folder.

Streamlit runs the package's entry script (``entry/main_script.py``) with the page's settings
(``streamlit_config.toml``, the file a clone's ``.streamlit/config.toml`` links to) given as
Streamlit's command-line options, since the user's folder has no ``.streamlit/`` of its own.
hookviz's own options (``--port``, ``--host``) and any of Streamlit's (``--server.headless
false``) come after them and win.

Each ``--model package.module:function`` (the options after it are its own: ``--weights``,
``--classes``, ``--task``, ``--preprocessing``, ``--name``) becomes a model card in a folder of
this run, put first on ``HOOKVIZ_MODELS_DIR``: every page then offers it as ``card:NAME``, as
it offers a server's cards. The function is imported by the page's process, from the folder
``hookviz app`` was started in. It is checked here first, so that a typo is said on the command
line, not in the browser.

This module imports neither Streamlit nor torch at import time (``hookviz --help`` stays
quick); Streamlit runs in a process of its own.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
ENTRY = HERE / "entry" / "main_script.py"
SETTINGS = HERE / "streamlit_config.toml"
MODELS_DIR_ENV = "HOOKVIZ_MODELS_DIR"  # (hookviz.models.MODELS_DIR_ENV, without importing it)
# (the Dataset run page's run_folder.RUNS_DIR_ENV: that module imports streamlit)
RUNS_DIR_ENV = "HOOKVIZ_RUNS_DIR"
OFFERED_ENV = "HOOKVIZ_MODELS"  # (hookviz/app/view/offered_models.py's)
OFFLINE_ENV = "HOOKVIZ_OFFLINE"  # (hookviz.models's: no download)
EXIT_ERROR = 2
MODEL_OPTIONS = ("--weights", "--classes", "--task", "--preprocessing", "--name")
TASKS = ("classification", "detection", "segmentation", "embedding")

DESCRIPTION = """\
Serve the hookviz page: open the address it prints in a browser. Needs the page's extras:
pip install "hookviz[app]".

--model adds your own network to every page: a function of your code that returns the
nn.Module (imported from this folder, as python -m would), with its own options after it:
  hookviz app --model mynets.net:build --weights net.safetensors --classes classes.txt
Several --model may be given; --name names each in the page's model list.

Any other option is Streamlit's own and passed on (e.g. --server.headless false,
--server.maxUploadSize 100, --theme.base light)."""


@dataclass
class OwnModel:
    """One ``--model`` and the options that followed it."""

    function: str
    weights: str | None = None
    classes: str | None = None
    task: str | None = None
    preprocessing: str | None = None
    name: str | None = None
    given: list[str] = field(default_factory=list)  # (the options given, for messages)

    def card_name(self) -> str:
        return self.name or self.function.rpartition(":")[2]


def main(argv: Sequence[str] | None = None) -> int:
    """``hookviz app [--port N] [--host H] [--model pkg:function [its options]]... [Streamlit's
    options]``; returns the exit status."""
    args, streamlit_options = _parser().parse_known_args(argv)
    try:
        own = _own_models(args.model_options)
    except ValueError as exc:
        print(f"hookviz app: {exc}", file=sys.stderr)
        return EXIT_ERROR
    missing = _missing_packages()
    if missing:
        print(
            f"hookviz app: the page needs {', '.join(missing)}, which this environment lacks: "
            'pip install "hookviz[app]"',
            file=sys.stderr,
        )
        return EXIT_ERROR
    if args.runs is not None and not Path(args.runs).expanduser().is_dir():
        print(f"hookviz app: --runs {args.runs}: no such folder", file=sys.stderr)
        return EXIT_ERROR
    with tempfile.TemporaryDirectory(prefix="hookviz-app-models-") as folder:
        environment = dict(os.environ)
        if args.runs is not None:
            environment[RUNS_DIR_ENV] = str(Path(args.runs).expanduser().resolve())
        if args.offered is not None:
            # (each --model is a card: offered with the rest)
            listed = [*args.offered.split(","), *(f"card:{m.card_name()}" for m in own)]
            environment[OFFERED_ENV] = ",".join(name.strip() for name in listed if name.strip())
        if args.offline:
            environment[OFFLINE_ENV] = "1"
        if own:
            try:
                _check_and_write_cards(own, Path(folder))
            except ValueError as exc:
                print(f"hookviz app: {exc}", file=sys.stderr)
                return EXIT_ERROR
            earlier = environment.get(MODELS_DIR_ENV, "")
            environment[MODELS_DIR_ENV] = os.pathsep.join(p for p in (folder, earlier) if p)
        # (the page's process imports the user's code as this one would: from here)
        environment["PYTHONPATH"] = os.pathsep.join(
            p for p in (os.getcwd(), environment.get("PYTHONPATH", "")) if p
        )
        command = [sys.executable, "-m", "streamlit", "run", str(ENTRY)]
        command += streamlit_flags(args.port, args.host, streamlit_options)
        server = subprocess.Popen(command, env=environment)
        # (a stop asked of this process is Streamlit's to carry out: it ends its sessions)
        for stop in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(stop, lambda number, _: server.send_signal(number))
        while True:
            try:
                return server.wait()
            except KeyboardInterrupt:  # (Streamlit got the same Ctrl-C and stops by itself)
                continue


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hookviz app",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--port", type=int, help="the port to serve on (default 8501)")
    parser.add_argument(
        "--host",
        help="the address to listen on (default 127.0.0.1, this machine only; 0.0.0.0 for a "
        "class: every machine that can reach this one)",
    )
    parser.add_argument(
        "--runs",
        metavar="DIR",
        help="the one folder the Dataset run page opens runs from (HOOKVIZ_RUNS_DIR); served "
        "beyond this machine without it, that page is off",
    )
    parser.add_argument(
        "--models",
        dest="offered",
        metavar="LIST",
        help="the only models the page offers, comma-separated: bundled, cards, uploads (the "
        "Your model page), and names (resnet18, timm:convnext_tiny, clip:ViT-B-32); default: all",
    )
    parser.add_argument(
        "--offline",
        action="store_true",
        help="download nothing: the bundled models, cards, cached weights and untrained ones",
    )
    parser.add_argument(
        "--model",
        dest="model_options",
        action=_ModelAction,
        default=[],
        metavar="PKG.MODULE:FUNCTION",
        help="your own model's builder (several allowed); the options after it are its own",
    )
    for option, metavar, what in (
        ("--weights", "FILE", "a checkpoint for the --model before it (.safetensors or .pt)"),
        ("--classes", "FILE", "a text file of its class names, one per line"),
        ("--task", "TASK", f"what it outputs: {', '.join(TASKS)} (default: guessed)"),
        ("--preprocessing", "TEXT", "e.g. size=224,mean=0.485/0.456/0.406,std=0.229/0.224/0.225"),
        ("--name", "NAME", "its name in the page's model list (default: the function's name)"),
    ):
        parser.add_argument(
            option, dest="model_options", action=_ModelAction, metavar=metavar, help=what
        )
    return parser


class _ModelAction(argparse.Action):
    """Collects ``--model`` and the options after it, in order, as (option, value) pairs."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        pairs = list(getattr(namespace, self.dest, None) or [])
        pairs.append((option_string, values))
        setattr(namespace, self.dest, pairs)


def _own_models(pairs: list[tuple[str, str]]) -> list[OwnModel]:
    """The ``--model`` options with their own, each option given to the ``--model`` before
    it."""
    models: list[OwnModel] = []
    for option, value in pairs:
        if option == "--model":
            if ":" not in value or value.startswith(":") or value.endswith(":"):
                raise ValueError(
                    f"--model {value}: name a function of your code as package.module:function "
                    "(e.g. mynets.net:build)"
                )
            models.append(OwnModel(value))
            continue
        if not models:
            raise ValueError(f"{option} belongs to a --model: give it after the --model it is for")
        model = models[-1]
        key = option.removeprefix("--")
        if getattr(model, key) is not None:
            raise ValueError(f"{option} is given twice for --model {model.function}")
        if option == "--task" and value not in TASKS:
            raise ValueError(f"--task {value}: choose one of {', '.join(TASKS)}")
        setattr(model, key, value)
        model.given.append(option)
    names = [model.card_name() for model in models]
    for name in names:
        if names.count(name) > 1:
            raise ValueError(f"two --model are named {name!r}: give each its own --name")
        if not name.replace("_", "").replace("-", "").replace(".", "").isalnum():
            raise ValueError(f"--name {name!r}: use letters, digits, '_', '-' and '.' only")
    return models


def _missing_packages() -> list[str]:
    """The page's packages this environment does not have."""
    import importlib.util

    wanted = ("streamlit", "streamlit_webrtc", "pandas", "altair")
    missing = [name for name in wanted if importlib.util.find_spec(name) is None]
    if sys.version_info < (3, 11) and importlib.util.find_spec("tomli") is None:
        missing.append("tomli")
    return missing


def _check_and_write_cards(models: list[OwnModel], folder: Path) -> None:
    """Load each model here once (its function imported and called, its weights and classes
    read: a mistake is said now, in the user's words), then write its card into ``folder``."""
    import hookviz

    for model in models:
        weights = _existing(model.weights, "--weights")
        classes = _existing(model.classes, "--classes")
        try:
            preprocessing = (
                hookviz.parse_preprocessing(model.preprocessing) if model.preprocessing else None
            )
            hookviz.load_model(
                model.function,
                checkpoint=str(weights) if weights else None,
                class_names=str(classes) if classes else None,
                task=model.task,
                preprocessing=preprocessing,
                device="cpu",
            )
        except hookviz.HookvizError as exc:
            raise ValueError(f"--model {model.function}: {exc}") from exc
        card: dict[str, object] = {
            "function": model.function,
            "title": f"{model.card_name()} (your code: {model.function})",
        }
        if weights is not None:
            card["weights"] = str(weights)
        if classes is not None:
            card["class_names"] = str(classes)
        if model.task:
            card["task"] = model.task
        if preprocessing is not None:
            card["preprocessing"] = {
                "size": preprocessing.size,
                "mean": list(preprocessing.mean),
                "std": list(preprocessing.std),
                "interpolation": preprocessing.interpolation,
            }
        (folder / f"{model.card_name()}.json").write_text(json.dumps(card, indent=2))


def _existing(path: str | None, option: str) -> Path | None:
    if path is None:
        return None
    found = Path(path).expanduser().resolve()
    if not found.is_file():
        raise ValueError(f"{option} {path}: no such file")
    return found


def streamlit_flags(port: int | None, host: str | None, extra: Sequence[str]) -> list[str]:
    """Streamlit's command-line options: the page's settings file, section by section, then
    ``port`` and ``host``, then ``extra`` (Streamlit's own options as given: they win)."""
    flags: list[str] = []
    for section, options in _settings().items():
        for name, value in options.items():
            text = str(value).lower() if isinstance(value, bool) else str(value)
            flags += [f"--{section}.{name}", text]
    if port is not None:
        flags += ["--server.port", str(port)]
    if host is not None:
        flags += ["--server.address", host]
    return flags + list(extra)


def _settings() -> dict[str, dict[str, object]]:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover (the app extra installs tomli there)
        import tomli as tomllib
    with SETTINGS.open("rb") as file:
        return tomllib.load(file)
