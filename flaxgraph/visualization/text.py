"""Plain-text ``repr`` of Objects, Variables, States and GraphDefs (terminals).

``repr`` of an Object prints its attributes as an indented tree. Variables show
their value (small arrays in full, arrays of more than 10 elements, tracers and
``jax.ShapeDtypeStruct`` values by shape and dtype) and their metadata; the
first line of every node carries a comment counting elements and bytes per
Variable kind::

  Linear( # Param: 6 (24 B)
    bias=Param( # 2 (8 B)
      value=Array([0., 0.], dtype=float32)
    ),
    kernel=Param( # 4 (16 B)
      value=Array([[1., 1.],
                   [1., 1.]], dtype=float32)
    )
  )

A node or Variable met a second time (a shared reference or a cycle) prints as
``Linear(...)  # same as .a``, and a run of identical sub-modules of a list prints once,
``24 x Block( # [0:24], Param: 24 x 1,234 = 29,616 (118.5 KB)``. This module only
formats: what is shown, where and with which counts is the display tree that
``display_tree.py`` walks. ``show.py`` registers these functions as the ``repr`` of the
core classes.

Source: the output format of Flax NNX ``repr``/``nnx.display`` (Flax NNX's
"Transformations" guide).
"""

from __future__ import annotations

from typing import Any

from flaxgraph.graphlib.graphdefs import GraphDef
from flaxgraph.graphlib.registry import STATIC_LEAF
from flaxgraph.statelib import State
from flaxgraph.variablelib.variable import Variable
from flaxgraph.visualization import folding
from flaxgraph.visualization.display_tree import (
    Bracketed,
    Definition,
    DisplayWalk,
    FoldedRun,
    Leaf,
    Reference,
    Tree,
    definition_tree,
)
from flaxgraph.visualization.values import INDENT, ROOT, kind_of, plain_repr, safe_repr


class _Lines:
    """Lines of text, each kept as code plus an optional trailing comment, so the
    comma a parent appends after a child lands before the child's comment."""

    def __init__(self) -> None:
        self.code: list[str] = []
        self.comments: list[str] = []

    def text(self) -> str:
        return "\n".join(
            f"{code}  # {comment}" if comment else code
            for code, comment in zip(self.code, self.comments, strict=True)
        )

    def add(self, code: str, comment: str = "") -> None:
        self.code.append(code)
        self.comments.append(comment)

    def leaf(self, indent: str, head: str, text: str) -> None:
        """Writes ``text`` after ``head``; its continuation lines stay under its start."""
        first, *rest = text.split("\n")
        self.add(indent + head + first)
        pad = " " * (len(indent) + len(head))
        for line in rest:
            self.add(pad + line if line.strip() else "")

    def tree(self, t: Tree, indent: str, head: str, comment: str | None = None) -> None:
        """Writes ``t`` on a new line as ``indent + head + <t>`` (``comment``: the
        first line's comment instead of the tree's own)."""
        if isinstance(t, Leaf):
            x = t.value
            text = safe_repr(x.value) if kind_of(x) is STATIC_LEAF else plain_repr(x, t.summarize)
            self.leaf(indent, head, text)
        elif isinstance(t, Reference):
            where = "outside" if t.outside else f"same as {t.where or ROOT}"
            self.add(f"{indent}{head}{t.type_name}(...)", where)
        elif isinstance(t, FoldedRun):
            self.tree(t.first, indent, f"{head}{t.length} x ", t.comment)
        else:
            self.block(t, indent, head, t.comment if comment is None else comment)

    def block(self, b: Bracketed, indent: str, head: str, comment: str) -> None:
        start = len(self.code)
        if not b.children:
            self.add(f"{indent}{head}{b.opening}{b.closing}")
        else:
            self.add(f"{indent}{head}{b.opening}")
            for n, child in enumerate(b.children):
                self.tree(child.tree, indent + INDENT, child.head)
                if n < len(b.children) - 1 or b.trailing_comma:
                    self.code[-1] += ","
            self.add(indent + b.closing)
        if comment:
            self.code[start] += f" # {comment}"


def tree_text(t: Tree) -> str:
    """The plain text of a display tree (also what folding compares).

    Args:
      t: a tree from ``display_tree.DisplayWalk.tree``.

    Returns:
      The lines of ``repr``: ``indent + heading + value``, a node's counts after
      ``" # "`` on its first line, a reference's ``# same as .path`` after its code.
      Never raises.

    Example::

      >>> import jax.numpy as jnp, flaxgraph as nnx
      >>> from flaxgraph.visualization.display_tree import DisplayWalk
      >>> print(tree_text(DisplayWalk(fold=True, fingerprint=tree_text).tree([1], "")))
      [1]

    Source: the output format of Flax NNX ``repr``.
    """
    lines = _Lines()
    lines.tree(t, "", "")
    return lines.text()


def _render_text(x: Any) -> str:
    return tree_text(DisplayWalk(fold=folding.fold_enabled(), fingerprint=tree_text).tree(x, ""))


def object_repr(obj: Any) -> str:
    """The ``repr`` of an Object or Module: an indented tree with per-kind counts.

    Args:
      obj: a graph node (an ``Object``/``Module`` or a registered node type).

    Returns:
      Several lines: ``TypeName( # Kind: elements (bytes), …`` then one
      ``name=value`` line (or block) per attribute in ``split`` order, then ``)``.
      A node or Variable met again prints as ``TypeName(...)  # same as .path``.
      Counts cover the Variables printed inside each node, each one once; with
      several kinds a ``Total`` is added. Nodes keyed ``0, 1, …`` (``nnx.List``)
      print as ``TypeName([...])``. A run of two or more consecutive, structurally
      identical Objects in a list prints once as ``N x TypeName( # [i:j], Kind: N x
      each = total (bytes)``, arrays by shape (``nnx.display(obj, fold=False)``
      prints each).

    Raises:
      Nothing for graphs of Objects, Variables, arrays (concrete or traced) and
      containers; a static attribute whose own ``repr`` raises is shown with
      ``object.__repr__``.

    Example::

      >>> import jax.numpy as jnp, flaxgraph as nnx
      >>> class Scale(nnx.Module):
      ...   def __init__(self):
      ...     self.w = nnx.Param(jnp.ones(2))
      >>> print(repr(Scale()))
      Scale( # Param: 2 (8 B)
        w=Param( # 2 (8 B)
          value=Array([1., 1.], dtype=float32)
        )
      )

    Source: Flax NNX ``Object.__repr__`` output format (Flax NNX's "Transformations" guide).
    """
    return _render_text(obj)


def variable_repr(v: Variable[Any]) -> str:
    """The ``repr`` of a Variable: its kind, element count and bytes, value, metadata.

    Args:
      v: a Variable of any kind.

    Returns:
      ``Kind( # n (bytes)``, then ``value=…`` and one ``key=value`` line per
      metadata entry (sorted by key), then ``)``. The count comment is left out
      when the value holds no array. Never raises for array or pytree values.

    Example::

      >>> import jax.numpy as jnp, flaxgraph as nnx
      >>> class Count(nnx.Variable): pass
      >>> print(repr(Count(jnp.arange(1, 11))))
      Count( # 10 (40 B)
        value=Array([ 1,  2,  3,  4,  5,  6,  7,  8,  9, 10], dtype=int32)
      )

    Source: Flax NNX ``Variable.__repr__`` output format (Flax NNX's "Transformations" guide).
    """
    return _render_text(v)


def state_repr(state: State) -> str:
    """The ``repr`` of a State: nested ``State({...})`` blocks of Variables and leaves.

    Args:
      state: a ``State``.

    Returns:
      ``State({`` then one ``'key': value`` line (or block) per entry in the
      State's order, sub-States nested the same way, then ``})``; ``State({})``
      when empty. Never raises for Variables, arrays and plain values.

    Example::

      >>> import jax.numpy as jnp, flaxgraph as nnx
      >>> print(repr(nnx.State({'w': jnp.zeros(2)})))
      State({
        'w': Array([0., 0.], dtype=float32)
      })

    Source: Flax NNX ``State.__repr__`` output format.
    """
    return _render_text(state)


def graphdef_repr(graphdef: GraphDef) -> str:
    """The ``repr`` of a GraphDef: its definitions as an indented tree.

    Args:
      graphdef: a ``GraphDef``.

    Returns:
      ``GraphDef(num_leaves=n,`` then ``root=…``: a ``NodeDef(Type, index=i, …`` per
      node with one ``key=definition`` line per attribute, ``VariableDef(Kind,
      index=i, metadata={…})``, ``NodeRef(Type, index=i)`` for a node seen before,
      ``ContainerDef(type, …)``, ``ArrayDef()`` and ``StaticDef(value)``. Definitions
      without children stay on one line.

    Example::

      >>> import jax.numpy as jnp, flaxgraph as nnx
      >>> class Scale(nnx.Module):
      ...   def __init__(self):
      ...     self.w = nnx.Param(jnp.ones(2))
      >>> print(repr(nnx.graphdef(Scale())))
      GraphDef(num_leaves=1,
        root=NodeDef(Scale, index=0,
          w=VariableDef(Param, index=1)
        )
      )

    Source: flaxgraph's own format (Flax NNX prints its GraphDef as nested
    dataclasses).
    """
    lines = _Lines()

    def go(d: Definition, indent: str, head: str) -> None:
        if d.children is None:
            lines.leaf(indent, head, d.text)
            return
        lines.add(indent + head + d.text + ",")
        for i, (child_head, child) in enumerate(d.children):
            go(child, indent + INDENT, child_head)
            if i < len(d.children) - 1:
                lines.code[-1] += ","
        lines.add(indent + ")")

    go(definition_tree(graphdef), "", "")
    return lines.text()
