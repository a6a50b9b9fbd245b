"""Renderers: the core's display hooks ask ``RENDERERS`` for their kind's renderer, which
``flaxgraph/visualization/`` registers from above (its README); with none registered they
fall back to ``object.__repr__``, treescope's generic rendering and no HTML::

  >>> import jax.numpy as jnp, flaxgraph as nnx
  >>> from flaxgraph.renderers import RENDERERS
  >>> RENDERERS.text("variable", nnx.Param(jnp.ones(2))).splitlines()[0]
  'Param( # 2 (8 B)'

Source: ``docs/design.md``, "Layers"; Python's ``__repr__``, IPython's ``_repr_mimebundle_``,
treescope's ``__treescope_repr__``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

KINDS = ("object", "variable", "state", "graphdef")
"""The kinds a core class asks for: Objects/Modules, Variables, States, GraphDefs."""

TextRenderer = Callable[[Any], str]
TreescopeRenderer = Callable[[Any, Any, Any], Any]
MimebundleRenderer = Callable[[Any, Any, Any], dict[str, Any]]


class Renderers:
    """A table of renderer functions keyed by kind, filled from above by display."""

    def __init__(self) -> None:
        self._text: dict[str, TextRenderer] = {}
        self._treescope: dict[str, TreescopeRenderer] = {}
        self._mimebundle: MimebundleRenderer | None = None

    def register(self, kind: str, *, text: TextRenderer, treescope: TreescopeRenderer) -> None:
        """Sets the renderers of one ``kind`` of ``KINDS``: ``text`` (``obj -> str``) and
        ``treescope`` (``(obj, path, subtree_renderer) -> rendering``).

        Raises:
          ValueError: ``kind`` is not one of ``KINDS``.
        """
        if kind not in KINDS:
            raise ValueError(f"Unknown renderer kind {kind!r}; use one of {', '.join(KINDS)}.")
        self._text[kind] = text
        self._treescope[kind] = treescope

    def register_mimebundle(self, mimebundle: MimebundleRenderer) -> None:
        """Sets the ``(obj, include, exclude) -> {mime type: data}`` function for IPython."""
        self._mimebundle = mimebundle

    def text(self, kind: str, obj: Any) -> str:
        """The plain-text ``repr`` of ``obj`` (``object.__repr__`` if none is registered)."""
        render = self._text.get(kind)
        return render(obj) if render is not None else object.__repr__(obj)

    def treescope(self, kind: str, obj: Any, path: Any, subtree_renderer: Any) -> Any:
        """The treescope rendering of ``obj``, or ``NotImplemented`` if none is registered."""
        render = self._treescope.get(kind)
        return render(obj, path, subtree_renderer) if render is not None else NotImplemented

    def mimebundle(self, obj: Any, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        """Rich renderings of ``obj`` for IPython; ``{}`` if none is registered."""
        render = self._mimebundle
        return render(obj, include, exclude) if render is not None else {}


RENDERERS = Renderers()
"""The registry the core's hooks read; ``flaxgraph/visualization/show.py`` fills it on import."""
