"""Flatten: object graph -> (GraphDef, leaves), detecting sharing and cycles.

The walk is depth-first. Each graph node and Variable gets a reference index
the first time it is seen and becomes a ``NodeRef`` on every later sighting, so
shared references and cycles are stored once. Containers (lists, dicts, tuples,
other pytrees) are walked by value. Array leaves and Variables are appended,
with their paths, to the leaf list in walk order; static values go into the
GraphDef and must be hashable.

``Walk`` carries a *prefix* down the walk and calls a few hooks (``enter_node``,
``child_prefixes``, ``add_leaf``, ``on_alias``) that do nothing here; the
transforms' lifting machine subclasses it to resolve ``in_axes``-like prefixes
and check consistent aliasing in the same single pass.
"""

from __future__ import annotations

import functools
import types
import warnings
from collections.abc import Hashable, Sequence
from typing import Any

from flaxgraph.errors import IdentityHashWarning, StaticAttributeError, numbered_fixes
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
    is_hashable,
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
      root_name: how error messages name the root (``node``, ``args``…).
      error_root: the value paths in error messages are walked from (default
        ``node``).

    Returns:
      ``(graphdef, leaves)`` where ``leaves`` is a list of ``(path, leaf)`` in walk
      order; a leaf is the Variable object itself (not a copy) or a raw array.

    Raises:
      StaticAttributeError (a ``TypeError``): a static value, or a Variable's
        metadata, is unhashable; the message names its path.
    """
    walk = Walk(RefMap() if ref_index is None else ref_index, root_name, error_root)
    return walk.run(node)


class Walk:
    """One depth-first walk of a graph; see the module docstring.

    Attributes:
      ref_index: node/Variable -> reference index.
      leaves: ``(path, leaf)`` pairs appended in walk order.
      dynamic_leaves: if True, plain Python scalars that are not inside a graph
        node are leaves (as JAX treats them in a transform's arguments) instead of
        static values.
    """

    dynamic_leaves = False

    def __init__(self, ref_index: RefMap[int], root_name: str = "node", error_root: Any = None):
        self.ref_index = ref_index
        self.leaves: list[tuple[PathParts, Any]] = []
        self.root_name = root_name
        self.error_root = error_root

    def run(self, node: Any, prefix: Any = None) -> tuple[GraphDef, list[tuple[PathParts, Any]]]:
        if self.error_root is None:
            self.error_root = node
        root_def = self.visit(node, (), prefix, False)
        return GraphDef(root_def, tuple(p for p, _ in self.leaves)), self.leaves

    # -- hooks (no-ops for a plain split) ---------------------------------------------
    def enter_node(self, node: Any, path: PathParts, prefix: Any) -> Any:
        """Called on the first sighting of a node or Variable; returns the prefix its
        children (or, for a Variable, its value) receive."""
        return prefix

    def child_prefixes(
        self, x: Any, path: PathParts, prefix: Any, keys: Sequence[Hashable]
    ) -> Sequence[Any] | None:
        """Per-child prefixes of a container, or ``None`` for "the same for all"."""
        return None

    def add_leaf(self, path: PathParts, leaf: Any, prefix: Any) -> None:
        self.leaves.append((path, leaf))

    def on_alias(self, x: Any, path: PathParts, prefix: Any) -> None:
        """Called when a node or Variable is reached again along another path."""

    # -- the walk ----------------------------------------------------------------------------
    def visit(self, x: Any, path: PathParts, prefix: Any, in_node: bool) -> Def:
        t = type(x)
        impl = _GRAPH_NODE_IMPLS.get(t)
        if impl is not None:
            index = self.ref_index.get(x)
            if index is not None:
                self.on_alias(x, path, prefix)
                return NodeRef(t, index)
            index = len(self.ref_index)
            self.ref_index[x] = index
            prefix = self.enter_node(x, path, prefix)
            items, metadata = impl.flatten(x)
            attributes = tuple((k, self.visit(v, (*path, k), prefix, True)) for k, v in items)
            return NodeDef(t, index, metadata, attributes)
        if isinstance(x, Variable):
            index = self.ref_index.get(x)
            if index is not None:
                self.on_alias(x, path, prefix)
                return NodeRef(t, index)
            index = len(self.ref_index)
            self.ref_index[x] = index
            self.add_leaf(path, x, self.enter_node(x, path, prefix))
            return VariableDef(t, index, self._frozen_metadata(x, path))
        if t is list or t is tuple or t is dict:
            keys: Sequence[Hashable] = tuple(x) if t is dict else range(len(x))
            values = [x[k] for k in keys] if t is dict else x
            prefixes = self.child_prefixes(x, path, prefix, keys)
            if prefixes is None:
                children = tuple(
                    self.visit(v, (*path, k), prefix, in_node) for k, v in zip(keys, values)
                )
            else:
                children = tuple(
                    self.visit(v, (*path, k), p, in_node) for k, v, p in zip(keys, values, prefixes)
                )
            return ContainerDef(t, tuple(keys), children)
        if isinstance(x, ARRAY_TYPES) or (self.dynamic_leaves and not in_node and _is_scalar(x)):
            self.add_leaf(path, x, prefix)
            return ARRAY_DEF
        if is_plain_static(x):
            return StaticDef(x)
        if t is DataLeaf:
            self.add_leaf(path, x.value, prefix)
            return ARRAY_DEF
        if t is StaticLeaf:
            self._check_hashable(x.value, path)
            return StaticDef(x.value)
        children_and_treedef = pytree_children(x)
        if children_and_treedef is not None:
            items, treedef = children_and_treedef
            keys = tuple(k for k, _ in items)
            prefixes = self.child_prefixes(x, path, prefix, keys)
            if prefixes is None:
                prefixes = [prefix] * len(items)
            children = tuple(
                self.visit(v, (*path, k), p, in_node) for (k, v), p in zip(items, prefixes)
            )
            return ContainerDef(t, keys, children, treedef)
        if self.dynamic_leaves and not in_node:
            # Anything else outside graph nodes is a JAX leaf, as in jax.jit's arguments.
            self.add_leaf(path, x, prefix)
            return ARRAY_DEF
        self._check_hashable(x, path)
        return StaticDef(x)

    def where(self, path: PathParts) -> str:
        return path_str(self.root_name, self.error_root, path)

    def _frozen_metadata(self, v: Variable[Any], path: PathParts) -> tuple[tuple[str, Any], ...]:
        if not v._var_metadata:
            return ()
        metadata = tuple(sorted(v._var_metadata.items()))
        try:
            hash(metadata)
        except TypeError:
            bad = [k for k, m in metadata if not is_hashable(m)]
            raise StaticAttributeError(
                f"Metadata {bad[0]!r} of the {type(v).__name__} at {self.where(path)} is "
                f"unhashable ({type(dict(metadata)[bad[0]]).__name__}), but metadata is part "
                "of the GraphDef, which must be hashable.\n"
                + numbered_fixes([f"use a tuple (or another hashable value) for {bad[0]!r}."])
            ) from None
        return metadata

    def _check_hashable(self, x: Any, path: PathParts) -> None:
        if _made_per_instance(x):
            warnings.warn(
                f"The static attribute at {self.where(path)} is a {type(x).__name__} that "
                "hashes by identity: every new instance gives a new GraphDef, so transforms "
                "recompile for each new model even when nothing else changed.\n"
                + numbered_fixes(
                    [
                        "define __eq__ and __hash__ on the class (or make it a frozen dataclass);",
                        "or store a module-level function/value instead of a fresh object.",
                    ]
                ),
                IdentityHashWarning,
                stacklevel=2,
            )
        if not is_hashable(x):
            raise StaticAttributeError(
                f"The static attribute at {self.where(path)} is a {type(x).__name__}, which "
                "is unhashable; static attributes are stored in the GraphDef, which must be "
                "hashable (it is a jit cache key).\n"
                + numbered_fixes(
                    [
                        "make the value hashable (a tuple instead of a list, a frozen dataclass…);",
                        "or, if it holds arrays, wrap the arrays in a Variable (nnx.Variable(x)) "
                        "or register the type as a JAX pytree so its arrays become state.",
                    ]
                )
            )


_SCALARS = frozenset({int, float, bool, complex})


def _made_per_instance(x: Any) -> bool:
    """Whether a static value compares by identity *and* is likely created afresh for
    each model (so two equal models get unequal GraphDefs): plain objects without
    ``__eq__``, lambdas and nested functions (closures such as initializers made by
    ``lecun_normal()``), and ``functools.partial``. Module-level functions, classes,
    modules and JAX's function wrappers are identity-hashed too but are singletons,
    and so are ``None`` and ``...`` (reached here as ``nnx.static(None)``)."""
    if is_plain_static(x):
        return False
    if isinstance(x, functools.partial):
        return True
    if isinstance(x, types.FunctionType):
        return "<lambda>" in x.__qualname__ or "<locals>" in x.__qualname__
    if type(x).__hash__ is not object.__hash__ or callable(x):
        return False
    return not isinstance(x, (types.ModuleType, type))


def _is_scalar(x: Any) -> bool:
    return type(x) in _SCALARS
