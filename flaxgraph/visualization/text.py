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

The walk is depth-first in attribute order, like ``split``. A node or Variable
met a second time (a shared reference or a cycle) is printed as a reference to
the path where it was first printed, ``Linear(...)  # same as .a``, so every
Variable is printed, and counted, once. A node's counts are those of what is
printed inside it, which makes the root's counts those of the whole graph.
A run of two or more consecutive, structurally identical sub-modules of a list
prints once, ``24 x Block( # [0:24], Param: 24 x 1,234 = 29,616 (118.5 KB)``, its
arrays by shape (``folding.py``; ``nnx.display(obj, fold=False)`` prints them all).
Everything is computed in one walk, plus one per list level for the folding, so the
cost is linear in the size of the graph times the nesting depth of lists. ``flaxgraph/visualization/show.py`` registers these functions as the ``repr`` of the
core classes.

Source: the output format of Flax NNX ``repr``/``nnx.display`` (Flax NNX's
"Transformations" guide).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Any

from flaxgraph.graphlib.graphdefs import (
    ContainerDef,
    GraphDef,
    NodeDef,
    NodeRef,
    StaticDef,
    VariableDef,
)
from flaxgraph.graphlib.refmap import RefMap
from flaxgraph.graphlib.registry import (
    DICT,
    PYTREE,
    SEQUENCE,
    STATIC_LEAF,
    VARIABLE,
    is_node_or_variable,
)
from flaxgraph.statelib import State
from flaxgraph.variablelib.variable import Variable, metadata_of
from flaxgraph.visualization import folding
from flaxgraph.visualization.values import (
    INDENT,
    ROOT,
    Totals,
    add_totals,
    attr_head,
    attr_path,
    dict_head,
    holds_nodes,
    item_path,
    kind_of,
    no_head,
    node_items,
    plain_repr,
    positional,
    pytree_level,
    safe_repr,
    size_text,
    totals_text,
    variable_totals,
)

# -- plain text ------------------------------------------------------------------------------


class _TextPrinter:
    """Writes one value as lines of text in a single depth-first walk.

    Each line is kept as code plus an optional trailing comment, so the comma a
    parent appends after a child lands before the child's comment. A node's
    header comment (its counts) is patched into its first line once its children
    are written.
    """

    def __init__(
        self,
        *,
        fold: bool = True,
        shapes_only: bool = False,
        outside: tuple[RefMap[Any], ...] = (),
    ) -> None:
        self.code: list[str] = []
        self.comments: list[str] = []
        self.seen: RefMap[str] = RefMap()
        # A probe (folding.py) renders one child of a list on its own: `outside` holds
        # what the printers around it have rendered (ancestors included), which it
        # only notes as met (a reference out of the child), never walks into.
        self.outside = outside
        self.met_outside = False
        self.fold = fold  # runs of identical sub-modules as one `N x Type(...)` (folding.py)
        self.shapes_only = shapes_only  # every array by shape and dtype

    def text(self) -> str:
        return "\n".join(
            f"{code}  # {comment}" if comment else code
            for code, comment in zip(self.code, self.comments, strict=True)
        )

    def _line(self, code: str, comment: str = "") -> None:
        self.code.append(code)
        self.comments.append(comment)

    def _leaf(self, indent: str, head: str, text: str) -> None:
        """Writes ``text`` after ``head``; its continuation lines stay under its start."""
        first, *rest = text.split("\n")
        self._line(indent + head + first)
        pad = " " * (len(indent) + len(head))
        for line in rest:
            self._line(pad + line if line.strip() else "")

    def value(self, x: Any, indent: str, head: str, path: str) -> Totals:
        """Writes ``x`` on a new line as ``indent + head + <x>``; returns the counts
        of the Variables printed for the first time inside it."""
        kind = kind_of(x)
        if kind is not None and kind <= VARIABLE:  # a graph node or a Variable
            if self.outside and self._outside(x):
                self.met_outside = True
                self._line(f"{indent}{head}{type(x).__name__}(...)", "outside")
                return {}
            where = self.seen.get(x)
            if where is not None:
                self._line(f"{indent}{head}{type(x).__name__}(...)", f"same as {where or ROOT}")
                return {}
            self.seen[x] = path
            if kind is VARIABLE:
                return self._variable(x, indent, head, path)
            return self._node(x, indent, head, path)
        if kind is STATIC_LEAF:
            self._leaf(indent, head, safe_repr(x.value))
            return {}
        if isinstance(x, State):
            items = list(x.items())
            return self._block(items, indent, head, path, "State({", "})", dict_head, item_path)[1]
        if (kind is SEQUENCE or kind is DICT) and holds_nodes(x):
            if kind is DICT:
                return self._block(
                    list(x.items()), indent, head, path, "{", "}", dict_head, item_path
                )[1]
            open_, close = ("[", "]") if type(x) is list else ("(", ")")
            items = list(enumerate(x))
            return self._block(
                items,
                indent,
                head,
                path,
                open_,
                close,
                no_head,
                item_path,
                trailing_comma=type(x) is tuple and len(x) == 1,
            )[1]
        if kind is PYTREE and holds_nodes(x):
            items = pytree_level(x) or []
            keyed = all(isinstance(k, str) for k, _ in items)
            open_ = f"{type(x).__name__}("
            child_head = attr_head if keyed else no_head
            return self._block(items, indent, head, path, open_, ")", child_head, attr_path)[1]
        self._leaf(indent, head, plain_repr(x, summarize=self.shapes_only))
        return {}

    def _block(
        self,
        items: Sequence[tuple[Hashable, Any]],
        indent: str,
        head: str,
        path: str,
        open_: str,
        close: str,
        child_head: Callable[[Hashable], str],
        child_path: Callable[[Hashable], str],
        trailing_comma: bool = False,
    ) -> tuple[int, Totals]:
        """Writes ``open_``, one child per line, ``close``; returns the index of the
        opening line and the summed counts of the children."""
        start = len(self.code)
        if not items:
            self._line(f"{indent}{head}{open_}{close}")
            return start, {}
        self._line(f"{indent}{head}{open_}")
        inner = indent + INDENT
        totals: Totals = {}
        if self.fold and child_head is no_head and len(items) >= folding.MIN_RUN:
            segments, probes = folding.plan(items, self._probe)
        else:
            segments, probes = [folding.Segment(i, None) for i in range(len(items))], []
        for n, (i, run) in enumerate(segments):
            key, child = items[i]
            if run is None:
                add_totals(
                    totals, self.value(child, inner, child_head(key), path + child_path(key))
                )
            else:
                add_totals(totals, self._run(items, run, probes, inner, path, child_path))
            if n < len(segments) - 1 or trailing_comma:
                self.code[-1] += ","
        self._line(indent + close)
        return start, totals

    def _probe(self, x: Any) -> folding.Probe | None:
        if not holds_nodes(x) or (is_node_or_variable(x) and (x in self.seen or self._outside(x))):
            return None
        return probe(x, (self.seen, *self.outside))

    def _outside(self, x: Any) -> bool:
        return any(x in seen for seen in self.outside)

    def _run(
        self,
        items: Sequence[tuple[Hashable, Any]],
        run: folding.Run,
        probes: list[folding.Probe | None],
        indent: str,
        path: str,
        child_path: Callable[[Hashable], str],
    ) -> Totals:
        """Writes a folded run: its first member, arrays by shape, headed ``N x``."""
        key, first = items[run.start]
        start = len(self.code)
        shapes_only, self.shapes_only = self.shapes_only, True
        try:
            self.value(first, indent, f"{run.stop - run.start} x ", path + child_path(key))
        finally:
            self.shapes_only = shapes_only
        keys = [k for k, _ in items]
        self.code[start] = (
            self.code[start].split(" # ", 1)[0] + " # " + folding.run_comment(keys, run)
        )
        folding.register_members(items, run, probes, self.seen, lambda k: path + child_path(k))
        return run.total

    def _node(self, x: Any, indent: str, head: str, path: str) -> Totals:
        items = node_items(x)
        name = type(x).__name__
        if positional(items):
            start, totals = self._block(
                items, indent, head, path, f"{name}([", "])", no_head, attr_path
            )
        else:
            start, totals = self._block(
                items, indent, head, path, f"{name}(", ")", attr_head, attr_path
            )
        if totals:
            self.code[start] += f" # {totals_text(totals)}"
        return totals

    def _variable(self, v: Variable[Any], indent: str, head: str, path: str) -> Totals:
        fields = [("value", v.raw_value), *sorted(metadata_of(v).items())]
        open_ = f"{type(v).__name__}("
        start, _ = self._block(fields, indent, head, path, open_, ")", attr_head, attr_path)
        totals = variable_totals(v)
        if totals:
            ((n, b),) = totals.values()
            self.code[start] += f" # {size_text(n, b)}"
        return totals


def probe(x: Any, outside: tuple[RefMap[Any], ...]) -> folding.Probe:
    """``x`` rendered on its own with every array by shape (what folding compares);
    the nodes in ``outside`` (rendered around it) are noted, not walked."""
    printer = _TextPrinter(fold=True, shapes_only=True, outside=outside)
    totals = printer.value(x, "", "", "")
    return folding.Probe(printer.text(), printer.seen, totals, printer.met_outside)


def _render_text(x: Any) -> str:
    printer = _TextPrinter(fold=folding.fold_enabled())
    printer.value(x, "", "", "")
    return printer.text()


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
    lines: list[str] = []

    def leaf(indent: str, head: str, text: str) -> None:
        first, *rest = text.split("\n")
        lines.append(indent + head + first)
        pad = " " * (len(indent) + len(head))
        lines.extend(pad + line if line.strip() else "" for line in rest)

    def block(indent: str, head: str, open_: str, children: list[tuple[str, Any]]) -> None:
        lines.append(indent + head + open_)
        for i, (child_head, child) in enumerate(children):
            go(child, indent + INDENT, child_head)
            if i < len(children) - 1:
                lines[-1] += ","
        lines.append(indent + ")")

    def go(d: Any, indent: str, head: str) -> None:
        text, children = def_parts(d)
        if children is None:
            leaf(indent, head, text)
        else:
            block(indent, head, text + ",", children)

    block("", "", f"GraphDef(num_leaves={graphdef.num_leaves},", [("root=", graphdef.root)])
    return "\n".join(lines)


def def_parts(d: Any) -> tuple[str, list[tuple[str, Any]] | None]:
    """One GraphDef definition as ``(text, children)``: ``children`` is ``None`` for
    a definition shown on one line (``text`` is then all of it), else the
    ``(head, child definition)`` lines that go between ``text + ','`` and ``)``."""
    if isinstance(d, NodeDef):
        meta = f", metadata={d.metadata!r}" if d.metadata else ""
        opening = f"NodeDef({d.type.__name__}, index={d.index}{meta}"
        if not d.attributes:
            return opening + ")", None
        return opening, [(attr_head(k), c) for k, c in d.attributes]
    if isinstance(d, VariableDef):
        meta = f", metadata={dict(d.metadata)!r}" if d.metadata else ""
        return f"VariableDef({d.type.__name__}, index={d.index}{meta})", None
    if isinstance(d, NodeRef):
        return f"NodeRef({d.type.__name__}, index={d.index})", None
    if isinstance(d, StaticDef):
        return f"StaticDef({safe_repr(d.value)})", None
    if isinstance(d, ContainerDef):
        if not d.children:
            return f"ContainerDef({d.type.__name__}, [])", None
        children = [(f"{k!r}: ", c) for k, c in zip(d.keys, d.children, strict=True)]
        return f"ContainerDef({d.type.__name__}", children
    return safe_repr(d), None
