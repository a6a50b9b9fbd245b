"""Plain-text ``repr`` of Objects, Variables, States and GraphDefs: only formats the tree
``display_tree.py`` walks (the package README)::

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
  >>> print(repr(nnx.graphdef(Scale())))
  GraphDef(num_leaves=1,
    root=NodeDef(Scale, index=0,
      w=VariableDef(Param, index=1)
    )
  )

Source: the output format of Flax NNX ``repr``/``nnx.display``; the GraphDef format is
flaxgraph's own."""

from __future__ import annotations

from typing import Any

from flaxgraph.graphlib.graphdefs import GraphDef
from flaxgraph.graphlib.registry import STATIC_LEAF
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
    """Lines of text as code plus a trailing comment, so a parent's comma lands before it."""

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
        """Writes ``t`` as ``indent + head + <t>`` (``comment`` replaces the tree's own)."""
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
    """The plain text of a display tree (also what folding compares); never raises.

    Example::

      >>> from flaxgraph.visualization.display_tree import DisplayWalk
      >>> print(tree_text(DisplayWalk(fold=True, fingerprint=tree_text).tree([1], "")))
      [1]
    """
    lines = _Lines()
    lines.tree(t, "", "")
    return lines.text()


def value_repr(x: Any) -> str:
    """The ``repr`` of an Object, Variable or State: an indented tree with per-kind counts (a
    Variable: element count and bytes, value, sorted metadata)."""
    return tree_text(DisplayWalk(fold=folding.fold_enabled(), fingerprint=tree_text).tree(x, ""))


def graphdef_repr(graphdef: GraphDef) -> str:
    """The ``repr`` of a GraphDef: ``NodeDef``/``VariableDef``/``NodeRef``/… as an indented tree."""
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
