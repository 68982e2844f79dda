"""The counts and limits the docs state are the code's.

Each test reads a sentence of ``README.md`` or ``docs/`` and the value it states from the code;
a change to either that the other does not follow fails here, naming the file. The cache table
of "How it works" is written from the code when the site is built (``docs/hooks/page_caches.py``):
its test checks that the hook finds every cache of the page. Constants of the page are looked up
by name anywhere under ``hookviz/app/`` (not imported from one module), so moving one between
modules keeps these tests green, and renaming it fails them.
"""

from __future__ import annotations

import ast
import importlib.util
import re
import sys
from pathlib import Path

import pytest

import hookviz
from hookviz.core.baseline_maps import BASELINE_MAPS
from hookviz.core.preprocess import Preprocessing
from hookviz.insight.faithfulness import ROAD_PERCENTILES

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten")
NUMBER_WORDS = {word: n for n, word in enumerate(WORDS)}


def read(relative: str) -> str:
    """A doc's text, its lines joined (a sentence may wrap anywhere)."""
    return " ".join((ROOT / relative).read_text(encoding="utf-8").split())


def stated(relative: str, pattern: str) -> str:
    """The value ``pattern``'s group captures in the doc; fails when the sentence is gone."""
    match = re.search(pattern, read(relative))
    assert match, f"{relative} no longer says {pattern!r}: update the doc or this test"
    return match.group(1)


def constant(name: str, under: str = "hookviz/app") -> object:
    """The value of the module-level assignment ``NAME = ...`` under ``under``."""
    found = []
    for path in sorted((ROOT / under).rglob("*.py")):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if (
                isinstance(node, ast.Assign)
                and any(isinstance(t, ast.Name) and t.id == name for t in node.targets)
            ) or (
                isinstance(node, ast.AnnAssign)
                and isinstance(node.target, ast.Name)
                and node.target.id == name
            ):
                found.append(eval(compile(ast.Expression(node.value), str(path), "eval")))
    # (several equal assignments are one constant being moved between modules)
    assert found and all(value == found[0] for value in found), f"{name} under {under}/: {found}"
    return found[0]


def load_hook(name: str):
    spec = importlib.util.spec_from_file_location(name, DOCS / "hooks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # (its dataclasses look their module up there)
    spec.loader.exec_module(module)
    return module


def test_readme_counts_the_cam_methods():
    others = int(stated("README.md", r"or one of (\d+) other CAM methods"))
    assert others == len(hookviz.METHODS) - 1


@pytest.mark.parametrize("guide", ["docs/guide/explore.md", "docs/guide/methods.md"])
def test_the_method_guides_name_every_cam_method(guide):
    """The method box's guide and the Methods page's list every CAM method by its label."""
    from hookviz.app.method_texts import METHOD_LABELS

    text = read(guide)
    labels = {m: METHOD_LABELS[m].split(" (")[0] for m in hookviz.METHODS}
    missing = [
        label
        for label in labels.values()
        if not re.search(rf"(?<![\w-]){re.escape(label)}(?!\w)", text)  # (not Grad-CAM's CAM)
    ]
    assert not missing, f"{guide} does not name {missing}"


def test_the_api_reference_counts_the_baselines():
    assert NUMBER_WORDS[stated("docs/reference/api.md", r"and (\w+) baselines that")] == len(
        BASELINE_MAPS
    )


def test_how_it_works_states_the_forward_pass_memory():
    remembered = int(stated("docs/how-it-works.md", r"remembers its last (\d+) CAMs"))
    assert remembered == constant("_REMEMBERED", "hookviz/core")


def test_how_it_works_states_the_upload_folder_limit():
    limit = r"bounded at (\d+) MB \(`HOOKVIZ_SHARED_DIR_MB`"
    megabytes = int(stated("docs/how-it-works.md", limit))
    assert megabytes == constant("DEFAULT_LIMIT_MB")


def test_how_it_works_states_the_browser_message_age():
    age = r"keep a large message \(a picture's data\) for (\d+) runs"
    runs = int(stated("docs/how-it-works.md", age))
    config = (ROOT / ".streamlit" / "config.toml").read_text(encoding="utf-8")
    # (a regular expression, not tomllib: Python 3.10 has none)
    assert runs == int(re.search(r"^maxCachedMessageAge = (\d+)", config, re.M).group(1))


def test_how_it_works_states_the_top_classes_budget():
    seconds = float(stated("docs/how-it-works.md", r"the four together cost at most ([\d.]+) s"))
    assert seconds == constant("BUDGET_SECONDS")


@pytest.mark.parametrize(
    "doc, pattern",
    [
        ("docs/how-it-works.md", r"aspect ratio kept \(up to (\d+):1\)"),
        ("docs/guide/explore.md", r"aspect ratio, up to (\d+):1"),
    ],
)
def test_the_docs_state_the_longest_aspect_ratio(doc, pattern):
    assert float(stated(doc, pattern)) == Preprocessing.__dataclass_fields__["max_aspect"].default


@pytest.mark.parametrize("doc", ["docs/getting-started.md", "docs/guide/explore.md"])
def test_the_docs_state_the_upload_limits(doc):
    megabytes = int(stated(doc, r"up to (\d+) MB and \d+ megapixels"))
    megapixels = int(stated(doc, r"up to \d+ MB and (\d+) megapixels"))
    assert megabytes * 2**20 == hookviz.images.MAX_BYTES
    assert megapixels * 1_000_000 == hookviz.images.MAX_PIXELS


def test_the_explore_guide_states_the_picture_bounds():
    assert int(stated("docs/guide/explore.md", r"at display size \(at most (\d+) pixels\)")) == (
        constant("DISPLAY_LONG_SIDE")
    )
    assert int(stated("docs/guide/explore.md", r"grid shows at most (\d+) channels")) == (
        constant("MAX_GRID_CHANNELS")
    )
    slider = r"how many channels the grid shows \(up to (\d+)\)"
    assert int(stated("docs/guide/explore.md", slider)) == constant("MAX_GRID_CHANNELS")
    fallback = stated("docs/guide/explore.md", r"with untrained weights, the (\w+) most confident")
    assert NUMBER_WORDS[fallback] == constant("FALLBACK_BOXES")


def test_the_your_model_guide_states_the_checkpoint_limits():
    guide = "docs/guide/your-model.md"
    assert int(stated(guide, r"state dict \([^)]*\), up to (\d+) MB")) == constant(
        "CHECKPOINT_LIMIT_MB"
    )
    entries = int(stated(guide, r"up to (\d+) checkpoints \([\d.]+ GB"))
    gigabytes = float(stated(guide, r"up to \d+ checkpoints \(([\d.]+) GB"))
    bounds = {
        cache.bound
        for cache in load_hook("page_caches").page_caches()
        if cache.name == "checkpoint_store" and "Kept" in cache.kind
    }
    assert bounds == {f"{entries} and {gigabytes * 1000:g} MiB"}


def test_the_methods_guide_states_the_sanity_steps():
    steps = stated("docs/guide/methods.md", r"from the head down in (\w+) steps")
    assert NUMBER_WORDS[steps] == constant("_SANITY_STEPS")


def test_the_evaluate_guide_states_the_road_images():
    images = stated("docs/guide/evaluate.md", r"The ROAD metrics cost most: (\w+) imputed images")
    assert NUMBER_WORDS[images] == len(ROAD_PERCENTILES)


def test_the_cache_table_lists_every_cache_of_the_page():
    """The build hook finds each ``st.cache_resource``/``st.cache_data`` of ``hookviz/app/`` and
    ``app.py``, and a bound for each."""
    hook = load_hook("page_caches")
    decorated = [c for c in hook.page_caches() if "Kept" not in c.kind]
    sources = "\n".join(p.read_text(encoding="utf-8") for p in hook.page_sources() if p.is_file())
    assert len(decorated) == len(re.findall(r"^\s*@st\.cache_(?:resource|data)\b", sources, re.M))
    assert all(cache.bound != "unbounded" for cache in hook.page_caches())
    assert hook.MARKER in (DOCS / hook.PAGE).read_text(encoding="utf-8")
    by_name = {cache.name: cache for cache in decorated}
    assert by_name["model"].bound == "4" and "shared" in by_name["model"].kind


def test_how_it_works_names_the_module_that_registers_hooks():
    """The hooks section's first sentence names the modules that call ``register_*hook``."""
    text = read("docs/how-it-works.md")
    section = text[text.index("## The hooks") : text.index("## The lean graph")]
    sentence = section[: section.index(" registers hooks")]
    registering = {
        path.relative_to(ROOT).as_posix()
        for path in (ROOT / "hookviz").rglob("*.py")
        if re.search(r"\.register_(?:module_)?forward(?:_pre)?_hook\b", path.read_text("utf-8"))
    }
    assert registering, "no module registers a hook: the pattern above went stale"
    named = set(re.findall(r"`(hookviz/[\w/]+\.py)`", sentence))
    assert named == registering


# The pages that name the code's files and functions, for a reader to follow them.
CODE_TOURS = ("docs/page-internals.md", "docs/contributing.md", "docs/how-it-works.md")
# `path/to/file.py: name` (and `js/name.js: name`, under hookviz/app/browser/)
NAMED_IN_FILE = re.compile(r"`((?:[\w.]+/)*[\w.]+\.(?:py|js)): (\w+)")
FILE_PATH = re.compile(r"`((?:hookviz|tests|docs|app|js)[\w/.]*\.(?:py|js))`")


def code_path(text: str) -> Path:
    """A path as the docs write it: from the repository root, or ``js/...`` for the browser's."""
    return ROOT / "hookviz" / "app" / "browser" / text if text.startswith("js/") else ROOT / text


@pytest.mark.parametrize("doc", CODE_TOURS)
def test_the_files_the_code_tours_name_exist(doc):
    text = read(doc)
    named = {match.group(1) for match in FILE_PATH.finditer(text)}
    named |= {match.group(1) for match in NAMED_IN_FILE.finditer(text)}
    assert named, f"{doc} names no file: the patterns above went stale"
    named = {path for path in named if "NAME" not in path}  # (a recipe's placeholder)
    missing = sorted(path for path in named if not code_path(path).is_file())
    assert not missing, f"{doc} names files that are not there: {missing}"


@pytest.mark.parametrize("doc", CODE_TOURS)
def test_the_functions_the_code_tours_name_are_in_their_files(doc):
    """Each ``file: name`` is defined in that file (a function, class, method or constant)."""
    wrong = []
    for match in NAMED_IN_FILE.finditer(read(doc)):
        path, name = code_path(match.group(1)), match.group(2)
        if not path.is_file():
            continue  # (the test above names it)
        source = path.read_text(encoding="utf-8")
        defined = (
            rf"(?:def|class|function)\s+{name}\b"  # Python, or JavaScript's functions
            rf"|^\s*(?:export\s+)?(?:const\s+)?{name}\s*[=(:]"  # constants, JS methods
        )
        if not re.search(defined, source, re.M):
            wrong.append(f"{match.group(1)}: {name}")
    assert not wrong, f"{doc} names what its file does not define: {wrong}"


def test_the_test_table_finds_the_tests_of_the_page():
    hook = load_hook("test_map")
    guards = hook.guards()
    assert "test_app.py" in guards[hook.WHOLE_PAGE_HEADLESS]
    assert "test_browser_classes.py" in guards[hook.WHOLE_PAGE_BROWSER]
    assert "test_wire.py" in guards["hookviz.app.browser.wire"]
    assert hook.MARKER in (DOCS / hook.PAGE).read_text(encoding="utf-8")


def test_the_dataset_guide_states_how_many_overlays_it_draws():
    guide = "docs/guide/dataset.md"
    assert int(stated(guide, r"the overlays\*\* of the first (\d+) rows shown")) == constant(
        "THUMBNAILS"
    )
    assert int(stated(guide, r"Overlays are drawn for the first (\d+) rows shown")) == constant(
        "THUMBNAILS"
    )


def test_the_evaluate_guide_states_the_chunk_size():
    """As ``hookviz evaluate --help`` says it (the command-line reference is built from it)."""
    import argparse

    from hookviz.cli import _parser

    (commands,) = [a for a in _parser()._actions if isinstance(a, argparse._SubParsersAction)]
    (option,) = [a for a in commands.choices["evaluate"]._actions if a.dest == "chunk_size"]
    pattern = r"`--chunk-size`: images per chunk[^(]*\(default (\d+)\)"
    assert int(stated("docs/guide/evaluate.md", pattern)) == option.default


def test_how_it_works_names_the_methods_sent_ahead():
    from hookviz.app.method_texts import METHOD_LABELS
    from hookviz.core.methods import NEEDS_GRADIENT

    listed = stated(
        "docs/how-it-works.md",
        r"Only the methods whose CAM is one backward pass of "
        r"the class are sent ahead: ([^(]+) \(`NEEDS_GRADIENT`\)",
    )
    named = {name.strip() for name in re.split(r",| and ", listed) if name.strip()}
    assert named == {METHOD_LABELS[method] for method in NEEDS_GRADIENT}


def test_the_beyond_guide_states_the_trust_checks_forward_passes():
    """Deletion and insertion, in heatmap order and in a random one, ``steps + 1`` points each."""
    import inspect

    steps = inspect.signature(hookviz.trust_curves).parameters["steps"].default
    passes = int(stated("docs/guide/beyond.md", r"The trust check costs (\d+) forward passes"))
    assert passes == 2 * 2 * (steps + 1)
    assert int(stated("docs/guide/beyond.md", r"Run the trust check\* to run it \((\d+)")) == passes
