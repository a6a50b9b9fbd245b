"""Flatten: object graph -> (GraphDef, leaves), detecting sharing and cycles.

The walk is depth-first. Each graph node and Variable gets a reference index
the first time it is seen and becomes a ``NodeRef`` on every later sighting, so
shared references and cycles are stored once. Containers (lists, dicts, tuples,
other pytrees) are walked by value. Array leaves and Variables are appended,
with their paths, to the leaf list in walk order; static values go into the
GraphDef and must be hashable.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from flaxgraph.errors import StaticAttributeError, numbered_fixes
from flaxgraph.graph.graphdef import (
    ARRAY_DEF,
    ContainerDef,
    Def,
    GraphDef,
    NodeDef,
    NodeRef,
    StaticDef,
    VariableDef,
)
from flaxgraph.graph.paths import path_str
from flaxgraph.graph.refmap import RefMap
from flaxgraph.graph.registry import (
    _GRAPH_NODE_IMPLS,
    ARRAY_TYPES,
    DataLeaf,
    StaticLeaf,
    is_plain_static,
    pytree_children,
)
from flaxgraph.variables import Variable

PathParts = tuple[Hashable, ...]


def flatten(
    node: Any,
    *,
    ref_index: RefMap[int] | None = None,
    root_name: str = "node",
    error_root: Any = None,
) -> tuple[GraphDef, list[tuple[PathParts, Any]]]:
    """Walks ``node`` and returns its GraphDef and its leaves with their paths.

    Args:
      node: any graph node, Variable, container or leaf.
      ref_index: identity map node -> reference index, shared between calls to
        give several graphs one index space (``split_context``); new nodes get
        ``len(ref_index)`` as index. A fresh map is used if ``None``.
      root_name: how error messages name the root (``model``, ``args``…).
      error_root: the value paths in error messages are walked from (default
        ``node``).

    Returns:
      ``(graphdef, leaves)`` where ``leaves`` is a list of ``(path, leaf)`` in walk
      order; a leaf is the Variable object itself (not a copy) or a raw array.

    Raises:
      StaticAttributeError (a ``TypeError``): a static value, or a Variable's
        metadata, is unhashable; the message names its path.
    """
    if ref_index is None:
        ref_index = RefMap()
    leaves: list[tuple[PathParts, Any]] = []
    root = _Walk(ref_index, leaves, root_name, node if error_root is None else error_root)
    root_def = root.visit(node, ())
    return GraphDef(root_def, tuple(p for p, _ in leaves)), leaves


class _Walk:
    __slots__ = ("ref_index", "leaves", "root_name", "root")

    def __init__(self, ref_index: RefMap[int], leaves: list[Any], root_name: str, root: Any):
        self.ref_index = ref_index
        self.leaves = leaves
        self.root_name = root_name
        self.root = root

    def visit(self, x: Any, path: PathParts) -> Def:
        t = type(x)
        impl = _GRAPH_NODE_IMPLS.get(t)
        if impl is not None:
            index = self.ref_index.get(x)
            if index is not None:
                return NodeRef(t, index)
            index = len(self.ref_index)
            self.ref_index[x] = index
            items, metadata = impl.flatten(x)
            attributes = tuple((k, self.visit(v, (*path, k))) for k, v in items)
            return NodeDef(t, index, metadata, attributes)
        if isinstance(x, Variable):
            index = self.ref_index.get(x)
            if index is not None:
                return NodeRef(t, index)
            index = len(self.ref_index)
            self.ref_index[x] = index
            self.leaves.append((path, x))
            return VariableDef(t, index, self._frozen_metadata(x, path))
        if t is list or t is tuple:
            children = tuple(self.visit(v, (*path, i)) for i, v in enumerate(x))
            return ContainerDef(t, tuple(range(len(x))), children)
        if t is dict:
            keys = tuple(x)
            return ContainerDef(dict, keys, tuple(self.visit(x[k], (*path, k)) for k in keys))
        if isinstance(x, ARRAY_TYPES):
            self.leaves.append((path, x))
            return ARRAY_DEF
        if is_plain_static(x):
            return StaticDef(x)
        if t is DataLeaf:
            self.leaves.append((path, x.value))
            return ARRAY_DEF
        if t is StaticLeaf:
            self._check_hashable(x.value, path)
            return StaticDef(x.value)
        children = pytree_children(x)
        if children is not None:
            items, treedef = children
            keys = tuple(k for k, _ in items)
            return ContainerDef(
                t, keys, tuple(self.visit(v, (*path, k)) for k, v in items), treedef
            )
        self._check_hashable(x, path)
        return StaticDef(x)

    def _frozen_metadata(self, v: Variable[Any], path: PathParts) -> tuple[tuple[str, Any], ...]:
        metadata = tuple(sorted(v._var_metadata.items()))
        try:
            hash(metadata)
        except TypeError:
            bad = [k for k, m in metadata if not _hashable(m)]
            where = path_str(self.root_name, self.root, path)
            raise StaticAttributeError(
                f"Metadata {bad[0]!r} of the {type(v).__name__} at {where} is unhashable "
                f"({type(dict(metadata)[bad[0]]).__name__}), but metadata is part of the "
                "GraphDef, which must be hashable.\n"
                + numbered_fixes([f"use a tuple (or another hashable value) for {bad[0]!r}."])
            ) from None
        return metadata

    def _check_hashable(self, x: Any, path: PathParts) -> None:
        if not _hashable(x):
            where = path_str(self.root_name, self.root, path)
            raise StaticAttributeError(
                f"The static attribute at {where} is a {type(x).__name__}, which is "
                "unhashable; static attributes are stored in the GraphDef, which must be "
                "hashable (it is a jit cache key).\n"
                + numbered_fixes(
                    [
                        "make the value hashable (a tuple instead of a list, a frozen dataclass…);",
                        "or, if it holds arrays, wrap the arrays in a Variable (nnx.Variable(x)) "
                        "or register the type as a JAX pytree so its arrays become state.",
                    ]
                )
            )


def _hashable(x: Any) -> bool:
    try:
        hash(x)
    except TypeError:
        return False
    return True
