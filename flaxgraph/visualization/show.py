"""How flaxgraph objects look: plain-text ``repr`` in terminals, treescope in notebooks.

Display sits above the core. The object model and the graph engine never import
it; their ``__repr__``, ``__treescope_repr__`` and ``_repr_html_`` hooks read the
registry ``flaxgraph.renderers.RENDERERS``, which this module fills when it is
imported (``import flaxgraph`` does). The pieces, one concept per file:

* ``values.py``: counts of elements and bytes per Variable kind, array
  summaries;
* ``display_tree.py``: the one walk of what is shown (children, counts, shared
  references as ``# same as .path``, folded runs), as records;
* ``text.py``: that tree formatted as the plain-text ``repr`` (an indented tree,
  counts in the first-line comments);
* ``treescope_html.py``: the same tree formatted for treescope, and the HTML a
  notebook shows when an Object, Variable, State, GraphDef or Rngs ends a cell;
* ``folding.py``: runs of identical sub-modules shown once (``24 x Block(...)``);
* this module: the registration and ``display``.

Source: the output format of Flax NNX ``repr``/``nnx.display`` (Flax NNX's
"Transformations" guide).
"""

from __future__ import annotations

import sys
from typing import Any

from flaxgraph.renderers import RENDERERS
from flaxgraph.visualization.folding import folding
from flaxgraph.visualization.text import graphdef_repr, object_repr, state_repr, variable_repr
from flaxgraph.visualization.treescope_html import (
    graphdef_treescope_repr,
    object_treescope_repr,
    state_treescope_repr,
    to_html,
    variable_treescope_repr,
)
from flaxgraph.visualization.values import array_repr as array_repr

RENDERERS.register("object", text=object_repr, treescope=object_treescope_repr)
RENDERERS.register("variable", text=variable_repr, treescope=variable_treescope_repr)
RENDERERS.register("state", text=state_repr, treescope=state_treescope_repr)
RENDERERS.register("graphdef", text=graphdef_repr, treescope=graphdef_treescope_repr)


def mimebundle(obj: Any, include: Any = None, exclude: Any = None) -> dict[str, str]:
    """IPython's rich display of an Object, Variable, State or GraphDef: treescope HTML.

    The body of their ``_repr_mimebundle_``: a notebook shows it when one of them is
    the last expression of a cell (``text/plain`` still comes from ``repr``).

    Args:
      obj: the object to show.
      include: the mime types IPython asks for (``None``: any).
      exclude: the mime types IPython does not want (``None``: none).

    Returns:
      ``{'text/html': treescope document}`` when the running IPython shows HTML (a
      Jupyter kernel) and ``text/html`` is wanted; ``{}`` otherwise (plain Python,
      terminal IPython), so nothing is rendered for nothing.

    Example::

      >>> import jax.numpy as jnp, flaxgraph as nnx
      >>> nnx.Param(jnp.ones(2))._repr_mimebundle_()  # not in a notebook
      {}

    Source: IPython's ``_repr_mimebundle_`` protocol; treescope's HTML rendering.
    """
    wanted = (include is None or "text/html" in include) and not (
        exclude is not None and "text/html" in exclude
    )
    return {"text/html": to_html(obj)} if wanted and _shows_html() else {}


RENDERERS.register_mimebundle(mimebundle)


def _shows_html() -> bool:
    """True inside an IPython whose display shows HTML (a Jupyter kernel, not a terminal)."""
    ipython = sys.modules.get("IPython")  # never imported outside IPython
    shell = ipython.get_ipython() if ipython is not None else None
    formatter = getattr(shell, "display_formatter", None)
    return "text/html" in getattr(formatter, "active_types", ())


def display(*objects: Any, fold: bool = True) -> None:
    """Shows objects: a treescope rendering in Jupyter, their ``repr`` elsewhere.

    In Jupyter each object is shown as one display output holding both its
    treescope HTML and its ``repr`` as ``text/plain`` (what text-only front ends
    and the guide checker read).

    Args:
      *objects: anything; Objects, Modules, Variables and States render as trees
        with shapes, dtypes and per-kind parameter counts.
      fold: ``True`` (default, as ``repr``) shows a run of two or more consecutive,
        structurally identical sub-modules of a list once, as ``24 x Block(...)``
        with its positions and counts (``# [0:24], Param: 24 x 1,234 = 29,616
        (118.5 KB)``; collapsed in treescope, expand it to see the first member,
        arrays by shape); ``False`` shows every one in full (keyword-only; Flax's
        ``display`` has no such argument).

    Returns:
      None. Outside Jupyter (and in terminal IPython) each object's ``repr`` is
      printed on stdout.

    Raises:
      Nothing of its own; whatever an object's ``repr`` raises.

    Example::

      >>> import jax.numpy as jnp, flaxgraph as nnx
      >>> nnx.display(nnx.Param(jnp.zeros(2)))
      Param( # 2 (8 B)
        value=Array([0., 0.], dtype=float32)
      )

    Source: Flax NNX ``nnx.display``.
    """
    with folding(fold):
        if _shows_html():
            from IPython.display import display as show

            for obj in objects:
                show({"text/plain": repr(obj), "text/html": to_html(obj)}, raw=True)
            return
        for obj in objects:
            print(repr(obj))
