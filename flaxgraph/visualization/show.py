"""Display registration (importing this fills ``flaxgraph.renderers.RENDERERS``; the package
README) and ``nnx.display``: text ``repr`` in terminals, treescope in notebooks.

Source: the Flax NNX ``repr``/``nnx.display`` format; IPython's ``_repr_mimebundle_``."""

from __future__ import annotations

import sys
from typing import Any

from flaxgraph.renderers import RENDERERS
from flaxgraph.visualization.folding import folding
from flaxgraph.visualization.text import graphdef_repr, value_repr
from flaxgraph.visualization.treescope_html import (
    graphdef_treescope_repr,
    node_treescope_repr,
    state_treescope_repr,
    to_html,
)
from flaxgraph.visualization.values import array_repr as array_repr

RENDERERS.register("object", text=value_repr, treescope=node_treescope_repr)
RENDERERS.register("variable", text=value_repr, treescope=node_treescope_repr)
RENDERERS.register("state", text=value_repr, treescope=state_treescope_repr)
RENDERERS.register("graphdef", text=graphdef_repr, treescope=graphdef_treescope_repr)


def mimebundle(obj: Any, include: Any = None, exclude: Any = None) -> dict[str, str]:
    """The body of ``_repr_mimebundle_``: ``{'text/html': treescope document}`` in a Jupyter
    kernel when HTML is wanted, else ``{}``.

    Example::

      >>> import jax.numpy as jnp, flaxgraph as nnx
      >>> nnx.Param(jnp.ones(2))._repr_mimebundle_()  # not in a notebook
      {}
    """
    wanted = (include is None or "text/html" in include) and not (
        exclude is not None and "text/html" in exclude
    )
    return {"text/html": to_html(obj)} if wanted and _shows_html() else {}


RENDERERS.register_mimebundle(mimebundle)


def _shows_html() -> bool:
    """Whether this is an IPython whose display shows HTML (a Jupyter kernel, not a terminal)."""
    ipython = sys.modules.get("IPython")  # never imported outside IPython
    shell = ipython.get_ipython() if ipython is not None else None
    formatter = getattr(shell, "display_formatter", None)
    return "text/html" in getattr(formatter, "active_types", ())


def display(*objects: Any, fold: bool = True) -> None:
    """Shows objects: a treescope rendering in Jupyter, their ``repr`` elsewhere.

    In Jupyter each object is one display output holding its treescope HTML and its
    ``repr`` as ``text/plain``; elsewhere each ``repr`` is printed on stdout.

    Args:
      *objects: anything; Objects, Variables and States render as trees with shapes,
        dtypes and per-kind counts.
      fold: ``True`` (default, as ``repr``) shows a run of identical sub-modules of a list
        once, as ``24 x Block(...)`` with its positions and counts; ``False`` shows each
        in full (keyword-only; Flax's ``display`` has no such argument).

    Returns:
      None.

    Raises:
      Whatever an object's ``repr`` raises.

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
