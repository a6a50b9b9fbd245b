"""Flatten: object graph -> (GraphDef, leaves), detecting sharing and cycles.

The walk is depth-first. Each graph node and Variable gets a reference index
the first time it is seen and becomes a ``NodeRef`` on every later sighting, so
shared references and cycles are stored once; in graph mode a raw ``jax.Ref``
leaf is tracked the same way (one State leaf, ``NodeRef``s for later sightings).
Containers (lists, dicts, tuples,
other pytrees) are walked by value. Array leaves and Variables are appended,
with their paths, to the leaf list in walk order; static values go into the
GraphDef and must be hashable.

``Walk`` carries a *prefix* down the walk and calls a few hooks (``enter_node``,
``child_prefixes``, ``add_leaf``, ``on_alias``) that do nothing here; the
transforms' lifting machine subclasses it to resolve ``in_axes``-like prefixes
and check consistent aliasing in the same single pass.
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
      ref_index: identity map node -> reference index, shared between calls to
        give several graphs one index space (``split_context``); new nodes get
        ``len(ref_index)`` as index. A fresh map is used if ``None``.
      root_name: how error messages name the root (``node``, ``args``…).
      error_root: the value paths in error messages are walked from (default
        ``node``).
      graph: ``False`` for tree mode: a Variable reachable along two paths raises
        ``SharedReferenceError`` (see ``flaxgraph.modes``).

    Returns:
      ``(graphdef, leaves)`` where ``leaves`` is a list of ``(path, leaf)`` in walk
      order; a leaf is the Variable object itself (not a copy) or a raw array.

    Raises:
      (An unhashable static attribute or Variable metadata is allowed, as in Flax:
      only ``hash(graphdef)`` raises then, naming its path.)
      SharedReferenceError (a ``ValueError``): with ``graph=False``, a Variable is
        reachable along several paths; the message lists them all.
    """
    walk = Walk(RefMap() if ref_index is None else ref_index, root_name, error_root, graph)
    return walk.run(node)


class Walk:
    """One depth-first walk of a graph; see the module docstring.

    Attributes:
      ref_index: node/Variable -> reference index.
      leaves: ``(path, leaf)`` pairs appended in walk order.
      dynamic_leaves: if True, plain Python scalars that are not inside a graph
        node are leaves (as JAX treats them in a transform's arguments) instead of
        static values.
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
        """``(root, wrapped)``: what error diagnostics re-walk, and whether it is a
        tuple of named roots (paths then start with the root's position)."""
        return self.error_root, False

    def tree_alias(self, x: Any, path: PathParts = ()) -> None:
        """Tree mode met ``x`` again at ``path``: an error if ``x`` is an ancestor of
        ``path`` (a cycle: a tree has none) or if a Variable is thereby reachable twice
        (a shared object without Variables is harmless: pytrees may repeat leaves-free
        nodes)."""
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
        """Warns when a static value hashes by identity and is made per model (every
        model would get its own GraphDef, so jit would recompile). An unhashable
        value is fine here: only hashing the GraphDef (a jit cache key) needs it
        hashable, and ``GraphDef.__hash__`` then names its path."""
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
    """Whether the constant ``x`` (a value ``REGISTRY.kind_of`` calls ``CONSTANT``) is
    a leaf where a walk with ``dynamic_leaves`` meets it outside every graph node (a
    transform's argument, an item of a list, tuple or dict argument, an output): a
    Python number (``int``, ``float``, ``bool``, ``complex``, exactly) or a NumPy
    number or bool (``np.float32(1.0)``, ``np.int64(3)``, ``np.bool_(True)``), which
    ``jax.jit`` and Flax NNX 0.12.8's transforms trace. Held by a graph node the same
    value is static, as in Flax (#29). Strings, ``None`` and ``np.str_`` stay static
    everywhere. This is the one rule of a constant's role: the general walk
    (``Walk.visit``) and the fast path's argument checks (``transforms/plan_code.py``)
    both ask it."""
    return type(x) in SCALARS or isinstance(x, _NUMPY_NUMBERS)


def argument_leaf(x: object) -> bool:
    """Whether the general walk makes ``x`` a leaf where it meets it outside every
    graph node in a transform's arguments *and* any such leaf may stand for another
    one (the fast path's argument checks accept it in place of a leaf of another
    type: the plan's compiled function is a ``jax.jit``, which retraces when a
    leaf's type calls for it): an ``ARRAY`` of the engine's classification
    (``registry.ARRAY_TYPES``) or a constant ``traced_constant`` traces."""
    kind = REGISTRY.kind_of(x)
    return kind is ARRAY or (kind is CONSTANT and traced_constant(x))


_variable_def = VariableDef.from_fields  # the record's C-speed constructor (graphdefs.py)


def variable_def(t: type, index: int, variable: Variable[Any]) -> VariableDef:
    """The split rule of a Variable seen for the first time, written once for every
    walk (``Walk.visit`` and the direct walk, ``direct_split.split_direct``): its
    record holds its type ``t``, its new reference ``index`` and its metadata
    *frozen*, i.e. the sorted items of its metadata dict (``()`` for none); the walk
    puts the Variable itself into the State, and a later sighting is a ``NodeRef`` to
    ``index``.

    An unhashable metadata value (``out_sharding=["data", None]``) is kept, as in
    Flax: the GraphDef compares it with ``==`` and the transforms' cache keys work
    without hashing it (``graphdefs.lenient_hash``); only ``hash(graphdef)`` needs it
    hashable, and then names the Variable's path."""
    metadata = metadata_of(variable)
    return _variable_def((t, index, tuple(sorted(metadata.items())) if metadata else ()))


def not_a_pytree_error(t: type, where: str) -> ValueError:
    """Tree mode met an instance of a ``Pytree`` class declared with ``pytree=False``
    (e.g. an ``nnx.Object``): JAX cannot flatten_with_paths it, so tree mode cannot walk it."""
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
    """Whether a static value compares by identity *and* is likely created afresh for
    each model (so two equal models get unequal GraphDefs): plain objects without
    ``__eq__``, lambdas and nested functions (closures such as initializers made by
    ``lecun_normal()``), and a ``functools.partial`` of such a value (a partial itself
    compares by function and arguments in a GraphDef). Module-level functions, classes,
    modules and JAX's function wrappers are identity-hashed too but are singletons,
    and so are ``None`` and ``...`` (reached here as ``nnx.static(None)``)."""
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


def _is_scalar(x: Any) -> bool:
    return type(x) in SCALARS


def _ancestor_depth(root: Any, path: PathParts, x: Any) -> int | None:
    """The length of the prefix of ``path`` (walked from ``root``) that leads to ``x``,
    if ``x`` is met on the way (then reaching ``x`` at ``path`` closes a cycle)."""
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
    """Every path of every Variable reachable from ``root`` (through shared nodes
    too, cycles cut): ``id(variable) -> [(variable, path), ...]``. With ``wrapped``,
    ``root`` is a tuple of named roots and paths start with the root's position."""
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
    """The message of a ``SharedReferenceError``: every Variable reachable along
    several paths (those whose list of paths ``select`` accepts, if given), each path
    formatted by ``where``."""
    lines = []
    kinds: list[str] = []
    for entries in variable_paths(root, wrapped).values():
        if len(entries) > 1 and (select is None or select([p for _, p in entries])):
            v = entries[0][0]
            if type(v).__name__ not in kinds:
                kinds.append(type(v).__name__)
            shape = getattr(v.raw_value, "shape", None)
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
