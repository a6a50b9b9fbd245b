"""How flaxgraph objects look: plain-text ``repr`` in terminals, treescope in notebooks.

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
Everything is computed in one walk, so the cost is linear in the size of the
graph.

``display(obj)`` renders with treescope under Jupyter (the ``__treescope_repr__``
hooks of Object, Variable and State call the functions of ``display_treescope.py``)
and prints the ``repr`` elsewhere.

Source: the output format of Flax NNX ``repr``/``nnx.display`` (seed 003).
"""

from __future__ import annotations

import types
from collections.abc import Callable, Hashable
from typing import Any

import jax
import numpy as np

from flaxgraph.graph.refmap import RefMap
from flaxgraph.graph.registry import (
    _GRAPH_NODE_IMPLS,
    ARRAY_TYPES,
    BUILTIN_CONTAINERS,
    DataLeaf,
    StaticLeaf,
    is_plain_static,
    pytree_children,
)
from flaxgraph.state import State
from flaxgraph.variables import Variable

_FULL_ARRAY_MAX = 10
"""Arrays with at most this many elements are printed in full."""
_INDENT = "  "
_ROOT = "<root>"

Totals = dict[str, list[int]]
"""Per Variable kind name: ``[number of elements, number of bytes]``."""


# -- sizes ---------------------------------------------------------------------------------


def _size(x: Any) -> int:
    size = getattr(x, "size", None)
    return int(size) if size is not None else 0


def _nbytes(x: Any) -> int:
    dtype = getattr(x, "dtype", None)
    itemsize = getattr(dtype, "itemsize", None)  # numpy and extended (key) dtypes
    if itemsize is None:
        try:
            itemsize = np.dtype(dtype).itemsize
        except TypeError:
            return 0
    return _size(x) * int(itemsize)


def _human_bytes(n: int) -> str:
    if n < 1000:
        return f"{n} B"
    for unit, scale in (("KB", 1e3), ("MB", 1e6)):
        if n < scale * 1000:
            return f"{n / scale:.1f} {unit}"
    return f"{n / 1e9:,.1f} GB"


def _value_size(value: Any) -> tuple[int, int] | None:
    """(elements, bytes) of the arrays in ``value``; ``None`` if it holds none."""
    leaves = [value] if isinstance(value, ARRAY_TYPES) else _array_leaves(value)
    if not leaves:
        return None
    return sum(_size(x) for x in leaves), sum(_nbytes(x) for x in leaves)


def _kind(v: Variable[Any]) -> str:
    try:  # random state is counted as one kind, as in Flax NNX
        from flaxgraph.rngs import RngState
    except ImportError:  # pragma: no cover - only while the package is half-built
        return type(v).__name__
    return "RngState" if isinstance(v, RngState) else type(v).__name__


def _variable_totals(v: Variable[Any]) -> Totals:
    size = _value_size(v.raw_value)
    return {_kind(v): list(size)} if size is not None else {}


def _add(into: Totals, totals: Totals) -> None:
    for kind, (n, b) in totals.items():
        entry = into.setdefault(kind, [0, 0])
        entry[0] += n
        entry[1] += b


def _size_text(n: int, b: int) -> str:
    return f"{n:,} ({_human_bytes(b)})"


def _totals_text(totals: Totals) -> str:
    """``'Param: 6 (24 B)'``; with several kinds, a ``Total`` comes last."""
    parts = [f"{kind}: {_size_text(n, b)}" for kind, (n, b) in totals.items()]
    if len(totals) > 1:
        n = sum(n for n, _ in totals.values())
        b = sum(b for _, b in totals.values())
        parts.append(f"Total: {_size_text(n, b)}")
    return ", ".join(parts)


# -- values ----------------------------------------------------------------------------------


def _is_tracer(x: Any) -> bool:
    return isinstance(x, jax.core.Tracer)


def array_repr(value: Any) -> str:
    """Formats an array: in full when small and concrete, else by shape and dtype.

    Args:
      value: a ``jax.Array``, tracer, ``np.ndarray``, numpy scalar or
        ``jax.ShapeDtypeStruct``.

    Returns:
      The array's own ``repr`` (possibly several lines) when it is concrete and has
      at most 10 elements; otherwise ``Array(shape=(…), dtype=…)`` (``Tracer(…)``,
      ``ShapeDtypeStruct(…)``, ``np.ndarray(…)`` for those types). Key arrays and
      other extended dtypes are always summarized. Never raises for these types.

    Example::

      >>> import jax, jax.numpy as jnp
      >>> from flaxgraph.display import array_repr
      >>> array_repr(jnp.zeros((20, 3)))
      'Array(shape=(20, 3), dtype=float32)'
      >>> array_repr(jnp.arange(3))
      'Array([0, 1, 2], dtype=int32)'

    Source: Flax NNX prints Variable values the same way (seed 003).
    """
    shape = getattr(value, "shape", None)
    dtype = getattr(value, "dtype", None)
    if _is_tracer(value):
        name = "Tracer"
    elif isinstance(value, jax.ShapeDtypeStruct):
        name = "ShapeDtypeStruct"
    elif isinstance(value, jax.Array):
        name = "Array"
    elif isinstance(value, np.ndarray):
        name = "np.ndarray"
    else:
        name = type(value).__name__
    summarize = (
        name in ("Tracer", "ShapeDtypeStruct")
        or shape is None
        or _size(value) > _FULL_ARRAY_MAX
        or jax.dtypes.issubdtype(dtype, jax.dtypes.extended)
    )
    if not summarize:
        try:
            return repr(value)
        except Exception:  # e.g. a deleted (donated) buffer
            pass
    return f"{name}(shape={tuple(shape) if shape is not None else None}, dtype={dtype})"


def _safe_repr(x: Any) -> str:
    if isinstance(x, (types.FunctionType, types.BuiltinFunctionType)):
        # No memory address: the same function prints the same in every run.
        return f"<function {getattr(x, '__module__', None) or '?'}.{x.__qualname__}>"
    try:
        return repr(x)
    except Exception:
        return object.__repr__(x)


def _join_inline(open_: str, parts: list[str], close: str) -> str:
    """Joins parts on one line; continuation lines of a part stay under its start."""
    out = open_
    for i, part in enumerate(parts):
        if i:
            out += ", "
        column = len(out) - (out.rfind("\n") + 1)
        out += part.replace("\n", "\n" + " " * column)
    return out + close


def _array_leaves(x: Any) -> list[Any]:
    try:
        return [leaf for leaf in jax.tree.leaves(x) if isinstance(leaf, ARRAY_TYPES)]
    except Exception:  # a registered pytree whose flatten fails: show it as a leaf
        return []


def _children(x: Any) -> list[tuple[Hashable, Any]] | None:
    """One level of a non-builtin pytree node, or ``None`` for a leaf."""
    try:
        children = pytree_children(x)
    except Exception:
        return None
    return children[0] if children is not None else None


def _plain_repr(x: Any) -> str:
    """A value holding no graph node or Variable, with its arrays through ``array_repr``."""
    if isinstance(x, ARRAY_TYPES):
        return array_repr(x)
    t = type(x)
    if t is dict:
        return _join_inline("{", [f"{k!r}: {_plain_repr(v)}" for k, v in x.items()], "}")
    if t is list:
        return _join_inline("[", [_plain_repr(v) for v in x], "]")
    if t is tuple:
        return _join_inline("(", [_plain_repr(v) for v in x], ",)" if len(x) == 1 else ")")
    if not is_plain_static(x) and _array_leaves(x):
        items = _children(x)
        if items:
            parts = [
                f"{k}={_plain_repr(v)}" if isinstance(k, str) else _plain_repr(v) for k, v in items
            ]
            return _join_inline(f"{t.__name__}(", parts, ")")
    return _safe_repr(x)


def _is_node(x: Any) -> bool:
    return type(x) in _GRAPH_NODE_IMPLS or isinstance(x, Variable)


def _holds_nodes(x: Any) -> bool:
    """True if ``x`` is, or is a container holding, a node, Variable or State."""
    if _is_node(x) or isinstance(x, State):
        return True
    t = type(x)
    if t in BUILTIN_CONTAINERS:
        return any(_holds_nodes(c) for c in (x.values() if t is dict else x))
    if is_plain_static(x) or isinstance(x, ARRAY_TYPES):
        return False
    return any(_holds_nodes(c) for _, c in _children(x) or ())


def _attr_path(key: Hashable) -> str:
    return f".{key}" if isinstance(key, str) and key.isidentifier() else f"[{key!r}]"


def _node_items(x: Any) -> list[tuple[Hashable, Any]]:
    items = []
    for key, value in _GRAPH_NODE_IMPLS[type(x)].flatten(x)[0]:
        if type(value) is DataLeaf:
            value = value.value
        items.append((key, value))
    return items


def _positional(items: list[tuple[Hashable, Any]]) -> bool:
    """Nodes keyed 0, 1, … (``nnx.List``) print like a list."""
    return bool(items) and all(type(k) is int for k, _ in items)


# -- plain text ------------------------------------------------------------------------------


class _TextPrinter:
    """Writes one value as lines of text in a single depth-first walk.

    Each line is kept as code plus an optional trailing comment, so the comma a
    parent appends after a child lands before the child's comment. A node's
    header comment (its counts) is patched into its first line once its children
    are written.
    """

    def __init__(self) -> None:
        self.code: list[str] = []
        self.comments: list[str] = []
        self.seen: RefMap[str] = RefMap()

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
        if _is_node(x):
            where = self.seen.get(x)
            if where is not None:
                self._line(f"{indent}{head}{type(x).__name__}(...)", f"same as {where or _ROOT}")
                return {}
            self.seen[x] = path
            if isinstance(x, Variable):
                return self._variable(x, indent, head, path)
            return self._node(x, indent, head, path)
        if type(x) is StaticLeaf:
            self._leaf(indent, head, _safe_repr(x.value))
            return {}
        if isinstance(x, State):
            items = list(x.items())
            return self._block(items, indent, head, path, "State({", "})", _dict_head, _item_path)[
                1
            ]
        if type(x) in BUILTIN_CONTAINERS and _holds_nodes(x):
            if type(x) is dict:
                return self._block(
                    list(x.items()), indent, head, path, "{", "}", _dict_head, _item_path
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
                _no_head,
                _item_path,
                trailing_comma=type(x) is tuple and len(x) == 1,
            )[1]
        if not isinstance(x, ARRAY_TYPES) and not is_plain_static(x) and _holds_nodes(x):
            items = _children(x) or []
            keyed = all(isinstance(k, str) for k, _ in items)
            open_ = f"{type(x).__name__}("
            child_head = _attr_head if keyed else _no_head
            return self._block(items, indent, head, path, open_, ")", child_head, _attr_path)[1]
        self._leaf(indent, head, _plain_repr(x))
        return {}

    def _block(
        self,
        items: list[tuple[Hashable, Any]],
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
        inner = indent + _INDENT
        totals: Totals = {}
        for i, (key, child) in enumerate(items):
            _add(totals, self.value(child, inner, child_head(key), path + child_path(key)))
            if i < len(items) - 1 or trailing_comma:
                self.code[-1] += ","
        self._line(indent + close)
        return start, totals

    def _node(self, x: Any, indent: str, head: str, path: str) -> Totals:
        items = _node_items(x)
        name = type(x).__name__
        if _positional(items):
            start, totals = self._block(
                items, indent, head, path, f"{name}([", "])", _no_head, _attr_path
            )
        else:
            start, totals = self._block(
                items, indent, head, path, f"{name}(", ")", _attr_head, _attr_path
            )
        if totals:
            self.code[start] += f" # {_totals_text(totals)}"
        return totals

    def _variable(self, v: Variable[Any], indent: str, head: str, path: str) -> Totals:
        fields = [("value", v.raw_value), *sorted(v._var_metadata.items())]
        open_ = f"{type(v).__name__}("
        start, _ = self._block(fields, indent, head, path, open_, ")", _attr_head, _attr_path)
        totals = _variable_totals(v)
        if totals:
            ((n, b),) = totals.values()
            self.code[start] += f" # {_size_text(n, b)}"
        return totals


def _no_head(key: Hashable) -> str:
    return ""


def _attr_head(key: Hashable) -> str:
    return f"{key}=" if isinstance(key, str) else f"[{key!r}]="


def _dict_head(key: Hashable) -> str:
    return f"{key!r}: "


def _item_path(key: Hashable) -> str:
    return f"[{key!r}]"


def _render_text(x: Any) -> str:
    printer = _TextPrinter()
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
      print as ``TypeName([...])``.

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

    Source: Flax NNX ``Object.__repr__`` output format (seed 003).
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

    Source: Flax NNX ``Variable.__repr__`` output format (seed 003).
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


def graphdef_repr(graphdef: Any) -> str:
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
    from flaxgraph.graph.graphdef import ContainerDef, NodeDef, NodeRef, StaticDef, VariableDef

    lines: list[str] = []

    def leaf(indent: str, head: str, text: str) -> None:
        first, *rest = text.split("\n")
        lines.append(indent + head + first)
        pad = " " * (len(indent) + len(head))
        lines.extend(pad + line if line.strip() else "" for line in rest)

    def block(indent: str, head: str, open_: str, children: list[tuple[str, Any]]) -> None:
        lines.append(indent + head + open_)
        for i, (child_head, child) in enumerate(children):
            go(child, indent + _INDENT, child_head)
            if i < len(children) - 1:
                lines[-1] += ","
        lines.append(indent + ")")

    def go(d: Any, indent: str, head: str) -> None:
        if isinstance(d, NodeDef):
            meta = f", metadata={d.metadata!r}" if d.metadata else ""
            opening = f"NodeDef({d.type.__name__}, index={d.index}{meta}"
            if not d.attributes:
                leaf(indent, head, opening + ")")
            else:
                block(indent, head, opening + ",", [(_attr_head(k), c) for k, c in d.attributes])
        elif isinstance(d, VariableDef):
            meta = f", metadata={dict(d.metadata)!r}" if d.metadata else ""
            leaf(indent, head, f"VariableDef({d.type.__name__}, index={d.index}{meta})")
        elif isinstance(d, NodeRef):
            leaf(indent, head, f"NodeRef({d.type.__name__}, index={d.index})")
        elif isinstance(d, StaticDef):
            leaf(indent, head, f"StaticDef({_safe_repr(d.value)})")
        elif isinstance(d, ContainerDef):
            if not d.children:
                leaf(indent, head, f"ContainerDef({d.type.__name__}, [])")
            else:
                children = [(f"{k!r}: ", c) for k, c in zip(d.keys, d.children, strict=True)]
                block(indent, head, f"ContainerDef({d.type.__name__},", children)
        else:
            leaf(indent, head, _safe_repr(d))

    block("", "", f"GraphDef(num_leaves={graphdef.num_leaves},", [("root=", graphdef.root)])
    return "\n".join(lines)


# -- display -------------------------------------------------------------------------------------


def _in_notebook() -> bool:
    try:
        from IPython import get_ipython  # type: ignore[import-not-found]
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and type(shell).__name__ == "ZMQInteractiveShell"


def display(*objects: Any) -> None:
    """Shows objects: a treescope rendering in Jupyter, their ``repr`` elsewhere.

    Args:
      *objects: anything; Objects, Modules, Variables and States render as trees
        with shapes, dtypes and per-kind parameter counts.

    Returns:
      None. Outside Jupyter each object's ``repr`` is printed on stdout.

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
    if _in_notebook():
        import treescope

        for obj in objects:
            treescope.display(obj)
        return
    for obj in objects:
        print(repr(obj))
