"""Renderers: how the core's classes reach display code that sits above them.

The object model (``Object``, ``Variable``, ``State``) and the graph engine
(``GraphDef``) must not import ``flaxgraph/visualization/``: display is built on top
of them (it walks graphs and reads Variables), so an import the other way would
close a circle. Instead their ``__repr__``, ``__treescope_repr__`` and
``_repr_mimebundle_`` hooks ask ``RENDERERS`` for the renderer of their *kind*
(``'object'``, ``'variable'``, ``'state'`` or ``'graphdef'``), and
``flaxgraph/visualization/show.py`` registers the renderers when it is imported, which
``import flaxgraph`` does. Nothing registered (only while the package is still
being imported) means the defaults: ``object.__repr__``, treescope's generic
rendering, no rich (HTML) display.

``RENDERERS`` is the package's one registry of renderers, a deliberate module-level
object: it is filled once, at import, and read on every ``repr``.

Example::

  >>> import jax.numpy as jnp, flaxgraph as nnx
  >>> from flaxgraph.renderers import RENDERERS
  >>> RENDERERS.text("variable", nnx.Param(jnp.ones(2))).splitlines()[0]
  'Param( # 2 (8 B)'

Source: flaxgraph's layering rule (display registers from above); the hook names
are Python's ``__repr__``, IPython's ``_repr_mimebundle_`` and treescope's
``__treescope_repr__``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

KINDS = ("object", "variable", "state", "graphdef")
"""The kinds a core class asks for: Objects/Modules, Variables, States, GraphDefs."""

TextRenderer = Callable[[Any], str]
TreescopeRenderer = Callable[[Any, Any, Any], Any]
MimebundleRenderer = Callable[[Any, Any, Any], dict[str, Any]]


class Renderers:
    """A table of renderer functions keyed by kind, filled from above by display.

    Attributes are private; use ``register``/``register_mimebundle`` to fill it and
    ``text``/``treescope``/``mimebundle`` to render.

    Source: flaxgraph's own design (a registry instead of lazy imports).
    """

    def __init__(self) -> None:
        self._text: dict[str, TextRenderer] = {}
        self._treescope: dict[str, TreescopeRenderer] = {}
        self._mimebundle: MimebundleRenderer | None = None

    def register(self, kind: str, *, text: TextRenderer, treescope: TreescopeRenderer) -> None:
        """Sets the renderers of one kind (replacing any earlier ones).

        Args:
          kind: one of ``KINDS``.
          text: ``obj -> str``, the plain-text ``repr``.
          treescope: ``(obj, path, subtree_renderer) -> rendering``, the body of
            ``__treescope_repr__``.

        Raises:
          ValueError: ``kind`` is not one of ``KINDS``.
        """
        if kind not in KINDS:
            raise ValueError(f"Unknown renderer kind {kind!r}; use one of {', '.join(KINDS)}.")
        self._text[kind] = text
        self._treescope[kind] = treescope

    def register_mimebundle(self, mimebundle: MimebundleRenderer) -> None:
        """Sets the one ``(obj, include, exclude) -> {mime type: data}`` function that
        renders any kind for IPython (``_repr_mimebundle_``)."""
        self._mimebundle = mimebundle

    def text(self, kind: str, obj: Any) -> str:
        """The plain-text ``repr`` of ``obj`` (``object.__repr__`` if none is registered)."""
        render = self._text.get(kind)
        return render(obj) if render is not None else object.__repr__(obj)

    def treescope(self, kind: str, obj: Any, path: Any, subtree_renderer: Any) -> Any:
        """The treescope rendering of ``obj``, or ``NotImplemented`` (treescope then
        falls back to its own handlers) if none is registered."""
        render = self._treescope.get(kind)
        return render(obj, path, subtree_renderer) if render is not None else NotImplemented

    def mimebundle(self, obj: Any, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        """Rich renderings of ``obj`` for IPython (e.g. ``{'text/html': ...}``); ``{}``
        (IPython then shows the plain text) if none is registered."""
        render = self._mimebundle
        return render(obj, include, exclude) if render is not None else {}


RENDERERS = Renderers()
"""The registry the core's hooks read; ``flaxgraph/visualization/show.py`` fills it on import."""
