"""The general walk: object graph -> (GraphDef, leaves with paths), sharing and cycles kept.

How it numbers nodes and what its hooks are for: ``docs/design.md``, "split, merge,
update", and the package README, "One classification, one walk, one build".
"""

from __future__ import annotations

import copy
import functools
import types
import warnings
from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np

from flaxgraph.errors import (
    IdentityHashWarning,
    SharedReferenceError,
    numbered_fixes,
)
from flaxgraph.graphlib.graphdefs import (
    ARRAY_DEF,
    ArrayDef,
    ContainerDef,
    Def,
    GraphDef,
    NodeDef,
    NodeRef,
    StaticDef,
    VariableDef,
)
from flaxgraph.graphlib.paths import path_str
from flaxgraph.graphlib.refmap import RefMap
from flaxgraph.graphlib.registry import (
    ARRAY,
    CONSTANT,
    DATA_LEAF,
    DICT,
    NODE,
    PYTREE,
    REF,
    REGISTRY,
    SEQUENCE,
    STATIC_LEAF,
    VARIABLE,
    DataLeaf,
    StaticLeaf,
    children_of,
    flatten_pytree,
    is_plain_static,
    node_impl,
)
from flaxgraph.typing import PathParts
from flaxgraph.variablelib.variable import Variable, metadata_of


def flatten_with_paths(
    node: Any,
    *,
    ref_index: RefMap[int] | None = None,
    root_name: str = "node",
    error_root: Any = None,
    graph: bool = True,
) -> tuple[GraphDef[Any], list[tuple[PathParts, Any]]]:
    """Walks ``node`` and returns its GraphDef and its leaves with their paths.

    Args:
      node: any graph node, Variable, container or leaf.
      ref_index: node -> reference index, shared between calls (``split_context``); new
        nodes get ``len(ref_index)``. Fresh if ``None``.
      root_name: how error messages name the root (``node``, ``args``…).
      error_root: the value error paths are walked from (default ``node``).
      graph: ``False`` for tree mode.

    Returns:
      ``(graphdef, leaves)``, ``leaves`` a list of ``(path, leaf)`` in walk order; a leaf
      is the Variable itself or a raw array.

    Raises:
      SharedReferenceError (a ``ValueError``): tree mode and a Variable is reachable
        along several paths; the message lists them all.
    """
    walk = Walk(RefMap() if ref_index is None else ref_index, root_name, error_root, graph)
    return walk.run(node)


class Walk:
    """One depth-first walk of a graph; subclassed by the lifting machine through its hooks.

    Attributes:
      ref_index: node/Variable -> reference index.
      leaves: ``(path, leaf)`` pairs appended in walk order.
      dynamic_leaves: Python and NumPy numbers outside every graph node are leaves
        (``traced_constant``), as in a transform's arguments.
      graph: ``False`` for tree mode, where a Variable reached twice is an error.
    """

    dynamic_leaves = False

    def __init__(
        self,
        ref_index: RefMap[int],
        root_name: str = "node",
        error_root: Any = None,
        graph: bool = True,
    ):
        self.ref_index = ref_index
        self.leaves: list[tuple[PathParts, Any]] = []
        self.root_name = root_name
        self.error_root = error_root
        self.graph = graph
        self.walk_root: Any = None
        # The registry's classification and node impls, held for the walk's inner loop.
        self.kinds = REGISTRY.kind_cache()
        self.classify = REGISTRY.classify
        self.impls = REGISTRY.node_impls()

    def run(
        self, node: Any, prefix: Any = None
    ) -> tuple[GraphDef[Any], list[tuple[PathParts, Any]]]:
        if self.error_root is None:
            self.error_root = node
        self.walk_root = node
        if type(node) in SCALARS:  # a Python scalar at the root is a leaf, as in JAX
            self.add_leaf((), node, prefix)
            root_def: Def = ARRAY_DEF
        else:
            root_def = self.visit(node, (), prefix, False)
        return GraphDef(root_def, tuple(p for p, _ in self.leaves), not self.graph), self.leaves

    # -- hooks (no-ops for a plain split) ---------------------------------------------
    def enter_node(self, node: Any, path: PathParts, prefix: Any) -> Any:
        """Called on a node's or Variable's first sighting; returns the prefix its children get."""
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
        kind = self.kinds.get(t) or self.classify(x)
        if kind is NODE:
            index = self.ref_index.get(x)
            if index is not None:
                if not self.graph:
                    self.tree_alias(x, path)
                self.on_alias(x, path, prefix)
                return NodeRef(t, index)
            if not self.graph and getattr(t, "_obj_is_pytree", True) is False:
                raise not_a_pytree_error(t, self.where(path))
            index = len(self.ref_index)
            self.ref_index[x] = index
            prefix = self.enter_node(x, path, prefix)
            items, metadata = self.impls[t].flatten(x)
            attributes = tuple((k, self.visit(v, (*path, k), prefix, True)) for k, v in items)
            return NodeDef(t, index, metadata, attributes)
        if kind is VARIABLE:
            index = self.ref_index.get(x)
            if index is not None:
                if not self.graph:
                    self.tree_alias(x, path)
                self.on_alias(x, path, prefix)
                return NodeRef(t, index)
            index = len(self.ref_index)
            self.ref_index[x] = index
            self.add_leaf(path, x, self.enter_node(x, path, prefix))
            return variable_def(t, index, x)
        if kind is SEQUENCE or kind is DICT:
            keys: Sequence[Hashable] = tuple(x) if kind is DICT else range(len(x))
            values = [x[k] for k in keys] if kind is DICT else x
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
        if kind is ARRAY:
            self.add_leaf(path, x, prefix)
            return ARRAY_DEF
        if kind is CONSTANT:
            if self.dynamic_leaves and not in_node and traced_constant(x):
                self.add_leaf(path, x, prefix)  # a JAX leaf in a transform's arguments
                return ARRAY_DEF
            return StaticDef(x)
        if kind is REF:  # a raw jax.Ref is state, like an array, with an identity
            if not self.graph:
                self._tree_ref(x, path)
                self.add_leaf(path, x, prefix)
                return ARRAY_DEF
            index = self.ref_index.get(x)
            if index is not None:
                self.on_alias(x, path, prefix)
                return NodeRef(t, index)
            index = len(self.ref_index)
            self.ref_index[x] = index
            self.add_leaf(path, x, prefix)
            return ArrayDef(index)
        if kind is DATA_LEAF:
            self.add_leaf(path, x.value, prefix)
            return ARRAY_DEF
        if kind is STATIC_LEAF:
            self._check_hashable(x.value, path)
            return StaticDef(x.value)
        if kind is PYTREE:
            items, treedef = flatten_pytree(x)
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

    def diagnostic_root(self) -> tuple[Any, bool]:
        """``(root, wrapped)``: what diagnostics re-walk, and whether it is a tuple of roots."""
        return self.error_root, False

    def tree_alias(self, x: Any, path: PathParts = ()) -> None:
        """Tree mode met ``x`` again: an error for a cycle or a Variable reachable twice."""
        depth = _ancestor_depth(self.walk_root, path, x)
        if depth is not None:
            raise SharedReferenceError(
                f"Tree mode (graph=False) does not allow cycles: the {type(x).__name__} at "
                f"{self.where(path[:depth])} contains itself at {self.where(path)} (the same "
                f"object found at paths {self.where(path[:depth])} and {self.where(path)}).\n"
                + numbered_fixes(
                    [
                        "remove the reference that closes the cycle;",
                        "or use graph mode: graph=True.",
                    ]
                )
            )
        if REGISTRY.kind_of(x) is VARIABLE or _holds_variable(x):
            root, wrapped = self.diagnostic_root()
            raise SharedReferenceError(
                shared_variables_message(
                    root,
                    self.where,
                    "Tree mode (graph=False) does not support shared references",
                    wrapped,
                )
            )

    def _tree_ref(self, x: Any, path: PathParts) -> None:
        """Tree mode: a raw ``jax.Ref`` reachable along two paths is shared state."""
        seen = self.__dict__.setdefault("_refs_seen", {})
        first = seen.setdefault(id(x), (x, path))[1]
        if first != path:
            raise SharedReferenceError(
                "Tree mode (graph=False) does not support shared references: Duplicate Ref "
                f"found at paths:\n    {self.where(first)}\n    {self.where(path)}\n"
                + numbered_fixes(
                    [
                        "keep one reference to the Ref (or wrap it in one Variable);",
                        "or use graph mode: graph=True.",
                    ]
                )
            )

    def _check_hashable(self, x: Any, path: PathParts) -> None:
        """Warns when a static hashes by identity and is made per model (jit would recompile)."""
        if made_per_instance(x):
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


SCALARS = frozenset({int, float, bool, complex})

_NUMPY_NUMBERS = (np.number, np.bool_)


def traced_constant(x: object) -> bool:
    """Whether the ``CONSTANT`` ``x`` is a leaf outside every graph node (``dynamic_leaves``).

    True for exactly ``int``, ``float``, ``bool``, ``complex`` and NumPy numbers and bools
    (which ``jax.jit`` traces); held by a node they stay static (#29). The one rule, asked
    by ``Walk.visit`` and ``transforms/plan_code.py``: ``docs/design.md``, "What a value is".
    """
    return type(x) in SCALARS or isinstance(x, _NUMPY_NUMBERS)


def argument_leaf(x: object) -> bool:
    """Whether ``x`` is an argument leaf that may stand for a leaf of another type on the fast path.

    An ``ARRAY`` (``registry.ARRAY_TYPES``) or a constant ``traced_constant`` traces.
    """
    kind = REGISTRY.kind_of(x)
    return kind is ARRAY or (kind is CONSTANT and traced_constant(x))


_variable_def = VariableDef.from_fields  # the record's C-speed constructor (graphdefs.py)


def variable_def(t: type, index: int, variable: Variable[Any]) -> VariableDef:
    """The record of a Variable seen first (type ``t``, ``index``, its sorted metadata items).

    Shared by ``Walk.visit`` and ``direct_split.split_direct``; unhashable metadata is
    kept (only ``hash(graphdef)`` raises).
    """
    metadata = metadata_of(variable)
    return _variable_def((t, index, tuple(sorted(metadata.items())) if metadata else ()))


def not_a_pytree_error(t: type, where: str) -> ValueError:
    """The error for tree mode meeting a ``pytree=False`` object, which JAX cannot flatten."""
    return ValueError(
        f"Tree mode (graph=False) cannot walk the {t.__name__} at {where}: its class has "
        f"pytree=False, so it is no JAX pytree. Found at path: {where}.\n"
        + numbered_fixes(
            [
                "use graph mode: graph=True (or the nnx.compat spelling of the function);",
                f"or declare {t.__name__} with pytree=True (nnx.Pytree's default).",
            ]
        )
    )


def made_per_instance(x: Any) -> bool:
    """Whether a static compares by identity and is likely made afresh per model.

    Plain objects without ``__eq__``, lambdas, closures and partials of them; module-level
    functions, classes, modules, ``None`` and ``...`` are singletons and do not count.
    """
    if is_plain_static(x):
        return False
    if isinstance(x, functools.partial):  # compared structurally (graphlib/statics.py)
        return any(made_per_instance(v) for v in (x.func, *x.args, *x.keywords.values()))
    if isinstance(x, types.FunctionType):
        return "<lambda>" in x.__qualname__ or "<locals>" in x.__qualname__
    own_hash: object = type(x).__hash__
    if own_hash is not object.__hash__ or callable(x):
        return False
    if isinstance(x, (types.ModuleType, type)):
        return False
    # A type implemented in C may compare by value without showing it in its
    # ``__hash__`` attribute (``jax.sharding.PartitionSpec``): a copy tells.
    try:
        twin = copy.copy(x)
        return twin is not x and not bool(twin == x)
    except Exception:
        return True


def _ancestor_depth(root: Any, path: PathParts, x: Any) -> int | None:
    """The length of ``path``'s prefix leading to ``x``, if ``x`` is on it (a cycle)."""
    current = root
    for depth, key in enumerate(path):
        if current is x:
            return depth
        kind = REGISTRY.kind_of(current)
        if kind is NODE:
            current = node_impl(current).get_child(current, key)
        elif kind is SEQUENCE or kind is DICT:
            current = current[key]
        elif kind is PYTREE:
            current = dict(flatten_pytree(current)[0]).get(key)
        else:
            return None
        if type(current) in (DataLeaf, StaticLeaf):
            current = current.value
    return None


def _holds_variable(node: Any) -> bool:
    """Whether a Variable is reachable from the graph node ``node``."""
    seen: set[int] = set()
    todo = [node]
    while todo:
        x = todo.pop()
        if REGISTRY.kind_of(x) is VARIABLE:
            return True
        if id(x) in seen:
            continue
        seen.add(id(x))
        todo.extend(v for _, v in children_of(x))
    return False


def variable_paths(root: Any, wrapped: bool = False) -> dict[int, list[tuple[Any, PathParts]]]:
    """Every path of every Variable below ``root``: ``id(variable) -> [(variable, path), ...]``.

    With ``wrapped``, ``root`` is a tuple of named roots and paths start with the position.
    """
    found: dict[int, list[tuple[Any, PathParts]]] = {}
    on_path: set[int] = set()

    def go(x: Any, path: PathParts) -> None:
        kind = REGISTRY.kind_of(x)
        if kind is VARIABLE:
            found.setdefault(id(x), []).append((x, path))
            return
        if kind is NODE:
            if id(x) in on_path:
                return
            on_path.add(id(x))
            for k, v in children_of(x):
                go(v, (*path, k))
            on_path.discard(id(x))
            return
        for k, v in children_of(x):
            go(v, (*path, k))

    if wrapped:
        for i, r in enumerate(root):
            go(r, (i,))
    else:
        go(root, ())
    return found


def shared_variables_message(
    root: Any,
    where: Any,
    what: str,
    wrapped: bool = False,
    fixes: Sequence[str] = (),
    select: Any = None,
) -> str:
    """The ``SharedReferenceError`` message: each Variable reachable along several paths (those
    ``select`` accepts), each path formatted by ``where``.
    """
    lines = []
    kinds: list[str] = []
    for entries in variable_paths(root, wrapped).values():
        if len(entries) > 1 and (select is None or select([p for _, p in entries])):
            v = entries[0][0]
            if type(v).__name__ not in kinds:
                kinds.append(type(v).__name__)
            shape = getattr(v._var_raw, "shape", None)
            lines.append(
                f"  the {type(v).__name__}"
                + (f" of shape {tuple(shape)}" if shape is not None else "")
                + " at:"
            )
            lines.extend(f"    {where(p)}" for _, p in entries)
    # The line after the listing carries Flax's phrases ("Duplicate Param", "found at
    # paths"), which Flax's tests match.
    return (
        f"{what}, but these Variables are reachable along several paths:\n"
        + "\n".join(lines)
        + f"\n(Duplicate {', '.join(kinds) or 'Variable'} found at paths listed above.)\n"
        + numbered_fixes(
            list(fixes)
            or [
                "remove the duplicate references, so that the objects form a tree;",
                "pass a copy (nnx.clone(obj)) where the object appears a second time;",
                "or use graph mode: graph=True (or the nnx.compat spelling of the function).",
            ]
        )
    )
