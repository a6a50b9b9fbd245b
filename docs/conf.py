"""Sphinx configuration of flaxgraph's documentation site (``make docs``, ``docs/build.py``).

Sphinx with MyST-NB (Markdown pages, executed notebooks) and autodoc/autosummary (the API
reference), as Flax and JAX build theirs. ``docs/build.py`` stages the sources (these
pages, the executed guides, the generated API pages) and runs Sphinx with warnings as
errors; everything here works offline (no intersphinx, no remote assets).

Cross-references: a docstring role (``:func:`split```, ``:class:`flaxgraph.State```)
must resolve (nitpicky mode). A reference to a flaxgraph object under the module that
defines it (``flaxgraph.graphlib.split_merge.split``, as type annotations name it) is
resolved to the object's public entry (``flaxgraph.split``); references to other
libraries' classes (``jax.Array`` in an annotation) are left as text, since no
inventory of them is available offline.
"""

from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "docs"))

from api_groups import GROUPS  # noqa: E402

project = "flaxgraph"
author = "the flaxgraph developers"
copyright = "the flaxgraph developers"

extensions = [
    "myst_nb",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.napoleon",
]

exclude_patterns = ["_build", "**.ipynb_checkpoints"]

# -- MyST / MyST-NB: the guides arrive executed (docs/build.py runs and checks them) --
nb_execution_mode = "off"
nb_output_stderr = "remove"
nb_render_markdown_format = "myst"
myst_heading_anchors = 3
myst_enable_extensions = ["colon_fence", "deflist"]
nb_mime_priority_overrides = [("html", "text/html", 0)]

# -- autodoc -----------------------------------------------------------------------
autodoc_typehints = "signature"
autodoc_member_order = "bysource"
autodoc_default_options: dict[str, Any] = {}
autodoc_preserve_defaults = True
autosummary_generate = False
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_rtype = False
napoleon_custom_sections = [("Source", "notes_style")]
add_module_names = False

nitpicky = True
nitpick_ignore_regex = [
    # Other libraries' names in annotations and docstrings: no inventory offline.
    (r"py:(class|data|obj|exc|func|meth|attr|mod)", r"(?!flaxgraph\b).*\..*"),
    # Builtins, typing names and unqualified type-variable names in annotations.
    (r"py:(class|data|obj)", r"[A-Za-z_][A-Za-z0-9_]*"),
    # Private classes in annotations and base-class lists (``flaxgraph.nn.conv._ConvBase``,
    # ``flaxgraph.graphlib.graphdefs.NodeDef``): module-qualified names with no public entry.
    (r"py:(class|obj|data)", r"flaxgraph(\.[a-z_]+)+\.[A-Za-z_]\w*"),
    # Napoleon's "Raises:" and "Returns:" types written as prose ("a ValueError", "The kind").
    (r"py:(class|exc|obj)", r"(?!flaxgraph\.)[^.]* .*"),
    (r"py:exc", r"(?!flaxgraph\.).*"),
]
# The builtin ``type`` in annotations also matches ``Variable.type`` and ``GraphDef.type``.
suppress_warnings = ["ref.python"]
napoleon_use_ivar = True

# -- HTML ---------------------------------------------------------------------------
html_theme = "sphinx_book_theme"
html_title = "flaxgraph"
html_favicon = "favicon.svg"  # also spares the browser a request for /favicon.ico
html_theme_options = {
    "show_toc_level": 2,
    "navigation_with_keys": False,
    "home_page_in_toc": True,
}
# A theme mode from the start, so the theme's script has nothing to reset (and log).
html_context = {"default_mode": "auto"}
html_static_path: list[str] = []
html_last_updated_fmt = None
html_copy_source = True  # the page's source (a guide's executed notebook) to download
html_show_sourcelink = False


def _public_entries() -> dict[int, str]:
    """id(object) -> the full name of its entry in the API reference."""
    entries: dict[int, str] = {}
    for group in GROUPS:
        for name in group.names:
            target = _resolve(f"flaxgraph.{name}")
            if target is not None:
                entries.setdefault(id(target), f"flaxgraph.{name}")
    return entries


def _resolve(dotted: str) -> Any:
    """The object a dotted name reaches (importing modules on the way), or None."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        try:
            for attribute in parts[cut:]:
                obj = getattr(obj, attribute)
        except AttributeError:
            return None
        return obj
    return None


def _resolve_internal(app: Any, env: Any, node: Any, contnode: Any) -> Any:
    """A ``flaxgraph.<module>.<Name>`` reference -> the entry of the same object."""
    if node.get("refdomain") != "py":
        return None
    target = node.get("reftarget", "")
    candidates = [target] if target.startswith("flaxgraph.") else [f"flaxgraph.{target}"]
    entries = _ENTRIES_OF.setdefault(id(app), _public_entries())
    for candidate in candidates:
        obj = _resolve(candidate)
        if obj is None:
            continue
        public = entries.get(id(obj))
        if public is None or public == target:
            continue
        domain = env.get_domain("py")
        found = domain.find_obj(env, None, None, public, None, 1)
        if found:
            name, _ = found[0]
            return domain.resolve_xref(
                env, node["refdoc"], app.builder, "obj", name, node, contnode
            )
    return None


_SECTION = re.compile(
    r"^(?P<indent>\s*)(Args|Arguments|Attributes|Keyword Args|Other Parameters):\s*$"
)
_NAMES_ONLY = re.compile(r"^[\w*]+(, *[\w*]+)*,?$")
_LITERAL = re.compile(r"``[^`]+?``")


def _house_style(app: Any, what: str, name: str, obj: Any, options: Any, lines: list[str]) -> None:
    """Reads two conventions of flaxgraph's docstrings the way they are meant, before
    napoleon parses them (every other markup problem still fails the build):

    * an ``Args:`` entry may name several parameters, over several lines
      (``use_bias, dtype,`` / ``param_dtype: as in Linear.``), starred ones included
      (``*args, **kwargs: ...``): the names are joined on one line and their stars
      escaped, as napoleon does for a single ``*args``;
    * a plural of a literal (````State````s) gets the escaped space reStructuredText
      needs between the literal and the ``s``.
    """
    out: list[str] = []
    entry_indent: int | None = None
    for line in lines:
        section = _SECTION.match(line)
        if section is not None:
            entry_indent = len(section["indent"]) + 2
            out.append(line)
            continue
        indent = len(line) - len(line.lstrip())
        if entry_indent is not None and line.strip() and indent < entry_indent:
            entry_indent = None
        joining = out and entry_indent is not None and _NAMES_ONLY.match(out[-1].strip() or "x")
        if joining and out[-1].rstrip().endswith(",") and indent >= entry_indent:
            out[-1] = out[-1].rstrip() + " " + line.strip()
        else:
            out.append(line)
        if entry_indent is not None and indent == entry_indent and ":" in out[-1]:
            names, _, rest = out[-1].strip().partition(":")
            if "*" in names and "\\*" not in names and _NAMES_ONLY.match(names):
                out[-1] = " " * indent + names.replace("*", "\\*") + ":" + rest
    lines[:] = [_plural_literals(line) for line in out]


def _plural_literals(line: str) -> str:
    """A literal followed by a letter gets an escaped space (literals pair from the left)."""
    pieces, end = [], 0
    for match in _LITERAL.finditer(line):
        pieces.append(line[end : match.end()])
        end = match.end()
        if line[end : end + 1].isalpha():
            pieces.append("\\ ")
    return "".join(pieces) + line[end:]


_ENTRIES_OF: dict[int, dict[int, str]] = {}
"""The public entries, computed once per Sphinx application (on the first lookup)."""


def setup(app: Any) -> None:
    app.connect("missing-reference", _resolve_internal)
    app.connect("autodoc-process-docstring", _house_style, priority=400)
