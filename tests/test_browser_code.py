"""The browser code's shape (``hookviz/app/browser/js/``): no function longer than a reader can
hold, and no state kept on the page's elements as expando properties."""

from __future__ import annotations

import re
from dataclasses import dataclass

from hookviz.app.browser import bundle

LONGEST = 120  # lines, from a function's opening brace to its closing one
# words before "(...) {" that open a block, not a function
_BLOCKS = {"if", "for", "while", "switch", "catch", "with", "function"}


@dataclass(frozen=True)
class Function:
    name: str
    first: int  # the line of its opening brace (1-based)
    last: int  # the line of its closing brace

    @property
    def lines(self) -> int:
        return self.last - self.first + 1


def _code_only(text: str) -> str:
    """``text`` with its comments, strings and template literals' text blanked (their line
    breaks kept, so lines keep their numbers); a template literal's ``${...}`` stays code."""
    out = []
    i, n = 0, len(text)
    templates: list[int] = []  # for each template literal open, the braces open in its ${}
    while i < n:
        c = text[i]
        if templates and templates[-1] == 0 and c != "`" and not text.startswith("${", i):
            # inside a template literal's text
            out.append("\n" if c == "\n" else " ")
            i += 2 if c == "\\" else 1
            continue
        if c == "`":
            if templates and templates[-1] == 0:
                templates.pop()  # its end
            else:
                templates.append(0)  # a new one
            out.append(" ")
            i += 1
        elif text.startswith("${", i) and templates and templates[-1] == 0:
            templates[-1] = 1
            out.append("  ")
            i += 2
        elif c in "{}" and templates and templates[-1] > 0:
            templates[-1] += 1 if c == "{" else -1
            out.append(c if templates[-1] > 0 else " ")  # (the ${}'s own braces blanked)
            i += 1
        elif text.startswith("//", i):
            end = text.find("\n", i)
            end = n if end == -1 else end
            out.append(" " * (end - i))
            i = end
        elif text.startswith("/*", i):
            end = text.index("*/", i) + 2
            out.append(re.sub(r"[^\n]", " ", text[i:end]))
            i = end
        elif c in "'\"":
            j = i + 1
            while text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(" " * (j + 1 - i))
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _opens_a_function(before: str) -> str | None:
    """The name of the function whose body a "{" after ``before`` opens ("=>" for an arrow
    function), or None for any other block or an object literal."""
    before = before.rstrip()
    if before.endswith("=>"):
        return "=>"
    if not before.endswith(")"):
        return None
    depth = 0
    for at in range(len(before) - 1, -1, -1):
        depth += {")": 1, "(": -1}.get(before[at], 0)
        if depth == 0:
            break
    word = re.search(r"([\w$]+)\s*$", before[:at])
    if word is None:
        return None
    if word[1] == "function" or re.search(r"\bfunction\s+[\w$]+\s*$", before[:at]):
        return word[1]
    return None if word[1] in _BLOCKS else word[1]


def functions(text: str) -> list[Function]:
    """Every function of a JavaScript module: declarations, expressions, arrow functions with a
    block body and class methods, each with the lines it spans."""
    code = _code_only(text)
    found, open_braces = [], []  # (name or None, line) of each "{" not closed yet
    line = 1
    for at, c in enumerate(code):
        if c == "\n":
            line += 1
        elif c == "{":
            open_braces.append((_opens_a_function(code[max(0, at - 400) : at]), line))
        elif c == "}":
            name, first = open_braces.pop()
            if name is not None:
                found.append(Function(name, first, line))
    assert not open_braces, "unbalanced braces"
    return found


def test_the_measure_finds_each_kind_of_function() -> None:
    source = """
export function outer(a) {
  const arrow = (b) => {
    if (b) {
      return `${b}: {`;
    }
    return { b };
  };
  // a comment with { a brace
  return arrow(a);
}
class Thing {
  method(x) {
    for (const y of x) {
      const s = "}";
    }
  }
}
const late = function () {
  return 1;
};
"""
    found = {f.name: (f.first, f.last) for f in functions(source)}
    assert found == {"outer": (2, 11), "=>": (3, 8), "method": (13, 17), "function": (19, 21)}


def test_no_function_of_the_browser_code_is_over_the_limit() -> None:
    long = [
        f"{path.name}: {function.name} at line {function.first}, {function.lines} lines"
        for path in sorted(bundle.JS.glob("*.js"))
        for function in functions(path.read_text(encoding="utf-8"))
        if function.lines > LONGEST
    ]
    assert not long, f"functions over {LONGEST} lines: {long}"


def test_the_browser_code_keeps_no_state_on_elements() -> None:
    """State lives in objects, module-level maps or (``data-*``) attributes, not in expando
    properties of elements (``element.__hvSomething``), which nothing declares or cleans."""
    for path in sorted(bundle.JS.glob("*.js")):
        code = _code_only(path.read_text(encoding="utf-8"))
        found = re.findall(r"\b(?!window\b)\w+\.__\w+", code)
        assert not found, f"{path.name} keeps state on elements: {found}"
