"""How flaxgraph objects look: plain-text ``repr`` in terminals, treescope in notebooks.

``repr`` of an Object prints its attributes as an indented tree, Variables with
their value's shape and dtype (small arrays in full), and a header comment
counting parameters per Variable kind with their size in bytes::

  Linear( # Param: 6 (24 B)
    bias=Param( # 3 (12 B)
      value=Array([0., 0., 0.], dtype=float32)
    ),
    ...

A node reached a second time (shared reference or cycle) prints as a reference
to its first path instead of again. ``display(obj)`` renders with treescope when
running under IPython/Jupyter and prints the ``repr`` otherwise.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import numpy as np

from flaxgraph.graph.refmap import RefMap
from flaxgraph.graph.registry import _GRAPH_NODE_IMPLS, ARRAY_TYPES
from flaxgraph.variables import Variable

_FULL_ARRAY_MAX = 10
_INDENT = "  "


def _nbytes(value: Any) -> int:
    size = getattr(value, "size", None)
    dtype = getattr(value, "dtype", None)
    try:
        return int(size) * np.dtype(dtype).itemsize if size is not None else 0
    except TypeError:  # key dtypes and other extended dtypes
        return int(size) * 8 if size is not None else 0


def _size(value: Any) -> int:
    size = getattr(value, "size", None)
    return int(size) if size is not None else 0


def _human_bytes(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:,} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000  # type: ignore[assignment]
    return f"{n} B"


def array_repr(value: Any) -> str:
    """An array as ``Array([...])`` when small, else ``Array(shape=…, dtype=…)``."""
    name = {"ArrayImpl": "Array", "ndarray": "np.ndarray"}.get(type(value).__name__, type(value).__name__)
    shape = getattr(value, "shape", None)
    size = _size(value)
    concrete = not type(value).__name__.endswith("Tracer") and not type(value).__name__ == "ShapeDtypeStruct"
    if shape is not None and concrete and size <= _FULL_ARRAY_MAX:
        try:
            return repr(value)
        except Exception:
            pass
    return f"{name}(shape={tuple(shape) if shape is not None else None}, dtype={getattr(value, 'dtype', None)})"


def _leaf_repr(value: Any) -> str:
    if isinstance(value, ARRAY_TYPES):
        return array_repr(value)
    return repr(value)


def _counts(root: Any) -> dict[str, list[int]]:
    """Per Variable kind: [number of elements, bytes], each Variable counted once."""
    from flaxgraph.graph.api import iter_graph

    totals: dict[str, list[int]] = {}
    for _, value in iter_graph(root):
        if isinstance(value, Variable):
            entry = totals.setdefault(type(value).__name__, [0, 0])
            leaves = _array_leaves(value.raw_value)
            entry[0] += sum(_size(x) for x in leaves)
            entry[1] += sum(_nbytes(x) for x in leaves)
    return totals


def _array_leaves(value: Any) -> list[Any]:
    import jax

    return [x for x in jax.tree.leaves(value) if hasattr(x, "shape")]


def _counts_comment(totals: dict[str, list[int]]) -> str:
    if not totals:
        return ""
    parts = [f"{k}: {n:,} ({_human_bytes(b)})" for k, (n, b) in totals.items()]
    return " # " + ", ".join(parts)


def variable_repr(v: Variable[Any], indent: str = "") -> str:
    value = v.raw_value
    leaves = _array_leaves(value)
    comment = ""
    if leaves:
        n = sum(_size(x) for x in leaves)
        comment = f" # {n:,} ({_human_bytes(sum(_nbytes(x) for x in leaves))})"
    inner = indent + _INDENT
    lines = [f"{type(v).__name__}({comment}", f"{inner}value={_leaf_repr(value)}"]
    for k, m in sorted(v._var_metadata.items()):
        lines[-1] += ","
        lines.append(f"{inner}{k}={m!r}")
    lines.append(f"{indent})")
    return "\n".join(lines)


def object_repr(obj: Any) -> str:
    return _Printer().node(obj, "", ("",), top=True)


class _Printer:
    def __init__(self) -> None:
        self.seen: RefMap[str] = RefMap()

    def node(self, x: Any, indent: str, path: tuple[Hashable, ...], top: bool = False) -> str:
        where = "".join(f".{k}" if isinstance(k, str) and k else f"[{k!r}]" for k in path[1:])
        impl = _GRAPH_NODE_IMPLS.get(type(x))
        if impl is not None or isinstance(x, Variable):
            if x in self.seen:
                return f"{type(x).__name__}(...)  # same object as <root>{self.seen[x]}"
            self.seen[x] = where
        if isinstance(x, Variable):
            return variable_repr(x, indent)
        if impl is not None:
            items = list(impl.flatten(x)[0])
            comment = _counts_comment(_counts(x))
            if not items:
                return f"{type(x).__name__}()"
            inner = indent + _INDENT
            body = [
                f"{inner}{self._key(k)}={self.node(_unwrap(v), inner, (*path, k))}" for k, v in items
            ]
            return f"{type(x).__name__}({comment}\n" + ",\n".join(body) + f"\n{indent})"
        if type(x) in (list, tuple, dict) and _has_nodes(x):
            inner = indent + _INDENT
            if type(x) is dict:
                body = [f"{inner}{k!r}: {self.node(v, inner, (*path, k))}" for k, v in x.items()]
                return "{\n" + ",\n".join(body) + f"\n{indent}}}"
            body = [f"{inner}{self.node(v, inner, (*path, i))}" for i, v in enumerate(x)]
            open_, close = ("[", "]") if type(x) is list else ("(", ")")
            return open_ + "\n" + ",\n".join(body) + f",\n{indent}{close}"
        return _leaf_repr(x)

    @staticmethod
    def _key(k: Hashable) -> str:
        return k if isinstance(k, str) else f"[{k!r}]"


def _unwrap(v: Any) -> Any:
    return getattr(v, "value", v) if type(v).__name__ in ("DataLeaf", "StaticLeaf") else v


def _has_nodes(x: Any) -> bool:
    children = x.values() if type(x) is dict else x
    return any(
        isinstance(c, Variable) or type(c) in _GRAPH_NODE_IMPLS or isinstance(c, ARRAY_TYPES)
        or (type(c) in (list, tuple, dict) and _has_nodes(c))
        for c in children
    )


def state_repr(state: Any, indent: str = "") -> str:
    from flaxgraph.state import State

    if not len(state):
        return "State({})"
    inner = indent + _INDENT
    lines = []
    for k, v in state.items():
        if isinstance(v, State):
            text = state_repr(v, inner)
        elif isinstance(v, Variable):
            text = variable_repr(v, inner)
        else:
            text = _leaf_repr(v)
        lines.append(f"{inner}{k!r}: {text}")
    return "State({\n" + ",\n".join(lines) + f"\n{indent}}})"


def graphdef_repr(graphdef: Any) -> str:
    from flaxgraph.graph.graphdef import ContainerDef, NodeDef, NodeRef, StaticDef, VariableDef

    def go(d: Any, indent: str) -> str:
        inner = indent + _INDENT
        if isinstance(d, NodeDef):
            if not d.attributes:
                return f"NodeDef({d.type.__name__}, index={d.index})"
            body = [f"{inner}{k}={go(c, inner)}" for k, c in d.attributes]
            return f"NodeDef({d.type.__name__}, index={d.index},\n" + ",\n".join(body) + f"\n{indent})"
        if isinstance(d, VariableDef):
            meta = f", metadata={dict(d.metadata)}" if d.metadata else ""
            return f"VariableDef({d.type.__name__}, index={d.index}{meta})"
        if isinstance(d, NodeRef):
            return f"NodeRef({d.type.__name__}, index={d.index})"
        if isinstance(d, StaticDef):
            return f"StaticDef({d.value!r})"
        if isinstance(d, ContainerDef):
            if not d.children:
                return f"ContainerDef({d.type.__name__}, [])"
            body = [f"{inner}{k!r}: {go(c, inner)}" for k, c in zip(d.keys, d.children)]
            return f"ContainerDef({d.type.__name__},\n" + ",\n".join(body) + f"\n{indent})"
        return repr(d)

    return f"GraphDef(num_leaves={graphdef.num_leaves},\n{_INDENT}root={go(graphdef.root, _INDENT)}\n)"


# -- treescope -----------------------------------------------------------------------------


def _treescope_object(obj: Any, attributes: dict[str, Any], path: Any, subtree_renderer: Any, comment: str) -> Any:
    from treescope import repr_lib

    return repr_lib.render_object_constructor(
        object_type=type(obj),
        attributes=attributes,
        path=path,
        subtree_renderer=subtree_renderer,
        roundtrippable=False,
    )


def object_treescope_repr(obj: Any, path: Any, subtree_renderer: Any) -> Any:
    impl = _GRAPH_NODE_IMPLS[type(obj)]
    attributes = {str(k): _unwrap(v) for k, v in impl.flatten(obj)[0]}
    return _treescope_object(obj, attributes, path, subtree_renderer, _counts_comment(_counts(obj)))


def variable_treescope_repr(v: Variable[Any], path: Any, subtree_renderer: Any) -> Any:
    attributes = {"value": v.raw_value, **v._var_metadata}
    return _treescope_object(v, attributes, path, subtree_renderer, "")


def state_treescope_repr(state: Any, path: Any, subtree_renderer: Any) -> Any:
    from treescope import repr_lib

    return repr_lib.render_dictionary_wrapper(
        object_type=type(state),
        wrapped_dict=dict(state.items()),
        path=path,
        subtree_renderer=subtree_renderer,
        roundtrippable=False,
    )


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

    Source: Flax NNX ``nnx.display``.
    """
    if _in_notebook():
        import treescope

        for obj in objects:
            treescope.display(obj)
        return
    for obj in objects:
        print(repr(obj))
