"""The node registry: which values are graph nodes, Variables, containers, leaves or statics.

``REGISTRY.kind_of(x)`` is the one decision every walker dispatches on, remembered per
type: ``docs/design.md``, "What a value is". Source: Flax NNX 0.12.8 graph flatten
(which values are nodes, leaves and statics).
"""

from __future__ import annotations

import dataclasses
import enum
import inspect
from collections.abc import Callable, Hashable, Iterable, Mapping
from typing import Any, NamedTuple

import jax
import numpy as np

from flaxgraph.typing import Key
from flaxgraph.variablelib.refs import is_ref
from flaxgraph.variablelib.variable import Variable


@dataclasses.dataclass(frozen=True)
class NodeTypeImpl:
    """How the engine handles one graph-node type.

    Attributes:
      type: the node's class.
      flatten: ``node -> (items, metadata)``: ``(key, child)`` pairs in a deterministic
        order and a hashable value stored in the GraphDef (``None`` if none).
      create_empty: ``(metadata, trace) -> node``: a new node with no children, without
        ``__init__`` (a one-argument function is accepted too).
      set_items: ``(node, items, metadata) -> None``: makes the children exactly ``items``
        (fills a new node or updates one in place).
      get_child: ``(node, key) -> child`` or ``MISSING``.
      set_child: ``(node, key, value) -> None``: adds or replaces one child.
      del_child: ``(node, key) -> None``: removes one child.
    """

    type: type
    flatten: Callable[[Any], tuple[Iterable[tuple[Key, Any]], Hashable]]
    create_empty: Callable[..., Any]  # (metadata, trace) -> node
    set_items: Callable[[Any, list[tuple[Key, Any]], Hashable], None]
    get_child: Callable[[Any, Key], Any]
    set_child: Callable[[Any, Key, Any], None]
    del_child: Callable[[Any, Key], None]


class DataLeaf:
    """Marks a child a node's ``flatten`` puts in the State though it is no array (``nnx.data``)."""

    __slots__ = ("value",)

    def __init__(self, value: object):
        self.value = value


class StaticLeaf:
    """Marks a child a node's ``flatten`` keeps in the GraphDef (``nnx.static``)."""

    __slots__ = ("value",)

    def __init__(self, value: object):
        self.value = value


class Kind(enum.IntEnum):
    """What a value is to the graph engine (``NodeRegistry.kind_of``), in ``classify``'s order.

    ``NODE`` (a registered graph node), ``VARIABLE``, ``SEQUENCE`` (exactly a list or
    tuple), ``DICT`` (exactly a dict), ``ARRAY`` (``jax.Array``, Tracers, ``np.ndarray``;
    a raw ``jax.ShapeDtypeStruct`` is ``STATIC``), ``CONSTANT`` (Python constants and
    NumPy scalars: always static), ``REF`` (a raw ``jax.Ref``), ``DATA_LEAF`` and
    ``STATIC_LEAF`` (the ``nnx.data``/``nnx.static`` marks), ``PYTREE`` (another JAX
    pytree node, walked by value), ``STATIC`` (anything else). Values start at 1, so a
    cached kind is always true (``kinds.get(t) or …``).
    """

    NODE = 1
    VARIABLE = 2
    SEQUENCE = 3
    DICT = 4
    ARRAY = 5
    CONSTANT = 6
    REF = 7
    DATA_LEAF = 8
    STATIC_LEAF = 9
    PYTREE = 10
    STATIC = 11


# The members as plain names, in ``Kind``'s order: reading ``Kind.NODE`` goes through the
# enum's class machinery (about 0.2 µs), a module constant costs a global lookup.
NODE, VARIABLE, SEQUENCE, DICT, ARRAY, CONSTANT, REF, DATA_LEAF, STATIC_LEAF, PYTREE, STATIC = Kind

ARRAY_TYPES: tuple[type[Any], ...] = (jax.Array, np.ndarray, np.generic, jax.ShapeDtypeStruct)
"""The array-like types a transform traces as an argument or output leaf (NumPy scalars too)."""
PLAIN_STATIC = frozenset({int, float, str, bool, complex, bytes, type(None), type(Ellipsis)})

STABLE_STATIC_MODULES = frozenset({"builtins", "types", "functools", "numpy", "jax", "jaxlib"})
"""Top-level packages whose static types are never registered as pytrees later (kind remembered)."""
BUILTIN_CONTAINERS = frozenset({list, tuple, dict})
_TRACER = jax.core.Tracer


class NodeRegistry:
    """The graph-node types and the kind of every type met so far.

    Attributes:
      impls: node type -> its ``NodeTypeImpl`` (written by ``register_node_type`` only).
      kinds: type -> ``Kind``, filled by ``classify``; never replaced, only updated.
      tracer_kinds: abstract-value type -> ``Kind`` (``ARRAY`` or ``REF``) for Tracers.
      unflattenable: the JAX-pytree types whose flatten raised (taken as static).
    """

    __slots__ = ("impls", "kinds", "tracer_kinds", "unflattenable")

    # A program that makes classes on the fly (one per call) would otherwise keep
    # every one of them alive through ``kinds``; past this many entries it starts over.
    MAX_KINDS = 4096

    def __init__(self) -> None:
        self.impls: dict[type, NodeTypeImpl] = {}
        self.kinds: dict[type, Kind] = {}
        self.tracer_kinds: dict[type, Kind] = {}
        self.unflattenable: set[type] = set()

    def register(self, impl: NodeTypeImpl) -> None:
        """Makes ``impl.type`` a graph node (replacing an earlier registration)."""
        self.impls[impl.type] = impl
        self.kinds.pop(impl.type, None)

    def kind_cache(self) -> Mapping[type, Kind]:
        """The kinds decided so far, by type (read-only), for a walker's inner loop.

        ``cache.get(type(x)) or REGISTRY.classify(x)`` is ``kind_of(x)`` without a call.
        """
        return self.kinds

    def node_impls(self) -> Mapping[type, NodeTypeImpl]:
        """The registered node types and their impls (read-only), for a walker's inner loop."""
        return self.impls

    def kind_of(self, x: object) -> Kind:
        """The ``Kind`` of ``x`` (remembered per ``type(x)``)."""
        return self.kinds.get(type(x)) or self.classify(x)

    def _flattens(self, x: object) -> bool:
        """Whether ``x`` is a JAX pytree node (not if its flatten raises: see ``unflattenable``)."""
        try:
            return pytree_children(x) is not None
        except Exception:
            self.unflattenable.add(type(x))
            return False

    def classify(self, x: object) -> Kind:
        """Decides the kind of ``x`` (first test in ``Kind``'s order wins), remembered per type.

        Exceptions: ``docs/design.md``, "What a value is" (Tracers by abstract-value type;
        ``STATIC`` remembered only for ``STABLE_STATIC_MODULES`` types).
        """
        t = type(x)
        if issubclass(t, _TRACER):
            aval_type = type(getattr(x, "aval", None))
            kind = self.tracer_kinds.get(aval_type)
            if kind is None:
                if isinstance(x, ARRAY_TYPES):
                    kind = self.tracer_kinds[aval_type] = ARRAY
                elif is_ref(x):
                    kind = self.tracer_kinds[aval_type] = REF
            if kind is not None:
                return kind
        if t in self.impls:
            kind = NODE
        elif isinstance(x, Variable):
            kind = VARIABLE
        elif t is list or t is tuple:
            kind = SEQUENCE
        elif t is dict:
            kind = DICT
        elif isinstance(x, np.generic):
            # Held by a node, a NumPy scalar is static (Flax NNX 0.12.8); as a transform's
            # argument it is traced (walk.traced_constant).
            kind = CONSTANT
        elif isinstance(x, ARRAY_TYPES) and t is not jax.ShapeDtypeStruct:
            # A raw ShapeDtypeStruct is static, as in Flax NNX 0.12.8.
            kind = ARRAY
        elif t in PLAIN_STATIC:
            kind = CONSTANT
        elif is_ref(x):
            kind = REF
        elif t is DataLeaf:
            kind = DATA_LEAF
        elif t is StaticLeaf:
            kind = STATIC_LEAF
        elif self._flattens(x):
            kind = PYTREE
        else:
            kind = STATIC
        kinds = self.kinds
        if issubclass(t, _TRACER):
            return kind
        if kind is STATIC and t.__module__.partition(".")[0] not in STABLE_STATIC_MODULES:
            # A user's class may be registered as a pytree later: decide afresh each time.
            return kind
        if len(kinds) >= self.MAX_KINDS:
            kinds.clear()
        kinds[t] = kind
        return kind


REGISTRY = NodeRegistry()
"""The engine's one registry: node types and the kind of each type met."""

GRAPH_NODE_IMPLS: dict[type, NodeTypeImpl] = REGISTRY.impls
"""``REGISTRY.impls``: node type -> ``NodeTypeImpl`` (read-only for callers)."""


def register_node_type(
    type: type,
    flatten: Callable[[Any], tuple[Iterable[tuple[Key, Any]], Hashable]],
    create_empty: Callable[[Hashable], Any],
    set_items: Callable[[Any, list[tuple[Key, Any]], Hashable], None],
    get_child: Callable[[Any, Key], Any],
    set_child: Callable[[Any, Key, Any], None],
    del_child: Callable[[Any, Key], None],
) -> NodeTypeImpl:
    """Registers ``type`` as a graph node with the engine's functions; returns its ``NodeTypeImpl``.

    It replaces an earlier registration. Users register with
    ``nnx.register_graph_node_type``, which calls this.
    """
    if len(inspect.signature(create_empty).parameters) < 2:
        user_create = create_empty

        def create_empty(metadata: Hashable, trace: object = None) -> object:
            return user_create(metadata)

    impl = NodeTypeImpl(type, flatten, create_empty, set_items, get_child, set_child, del_child)
    REGISTRY.register(impl)
    return impl


def node_impl(node: object) -> NodeTypeImpl:
    """The ``NodeTypeImpl`` of the graph node ``node``.

    Raises:
      KeyError: ``type(node)`` is not a registered graph-node type.
    """
    return REGISTRY.impls[type(node)]


def get_graph_node_impl(x: object) -> NodeTypeImpl | None:
    """The impl registered for ``type(x)`` exactly, or ``None``."""
    return REGISTRY.impls.get(type(x))


def is_node_module(x: object) -> bool:
    """Whether ``x``'s kind is ``NODE`` (a registered graph node type; not a Variable).

    >>> import flaxgraph as nnx
    >>> is_node_module(nnx.Dict()), is_node_module(nnx.Param(1)), is_node_module([1])
    (True, False, False)

    Source: Flax NNX 0.12.8 ``flax.nnx.graphlib.is_node_module`` (same answers).
    """
    return REGISTRY.kind_of(x) is NODE


def is_node_or_variable(x: object) -> bool:
    """True for values whose identity the engine tracks: graph nodes and Variables."""
    return REGISTRY.kind_of(x) <= VARIABLE


def is_array_leaf(x: object) -> bool:
    """True for values stored in a State as raw leaves (arrays and array-likes)."""
    return REGISTRY.kind_of(x) is ARRAY


def pytree_children(x: object) -> tuple[list[tuple[Key, Any]], Any] | None:
    """One level of a non-builtin pytree node, ``([(key, child)], treedef)``; None for a leaf."""
    if type(x) in PLAIN_STATIC or jax.tree_util.all_leaves((x,)):
        return None  # (all_leaves asks JAX's registry alone: no flatten, ~0.2 µs)
    treedef: object  # a PyTreeDef (jaxlib ships no stub for it)
    with_path, treedef = jax.tree_util.tree_flatten_with_path(x, is_leaf=lambda y: y is not x)
    if jax.tree_util.treedef_is_leaf(treedef) and treedef.num_leaves == 1:
        return None
    return [(_key_of(path[0]), child) for path, child in with_path], treedef


class Unflattenable(NamedTuple):
    """A value registered as a JAX pytree whose flatten raises, and where it is."""

    keys: tuple[Key, ...]  # the path below the value searched
    value: object
    error: Exception  # JAX's error from flattening it


def find_unflattenable(x: Any) -> Unflattenable | None:
    """The first value in ``x`` (or its plain containers) whose pytree flatten raises, or ``None``.

    The walks take such a value as static; an attribute assignment refuses it
    (``UnclassifiableValueError``).
    """
    t = type(x)
    items: Iterable[tuple[Key, Any]]
    if t is list or t is tuple:
        items = enumerate(x)
    elif t is dict:
        items = x.items()
    else:
        kind = REGISTRY.kinds.get(t) or REGISTRY.classify(x)
        if kind is not STATIC or t not in REGISTRY.unflattenable:
            return None
        try:
            pytree_children(x)
        except Exception as error:
            return Unflattenable(keys=(), value=x, error=error)
        return None
    for key, item in items:
        found = find_unflattenable(item)
        if found is not None:
            return found._replace(keys=(key, *found.keys))
    return None


def unclassifiable_message(type_name: str, error: BaseException, where: str) -> str:
    """The message of ``UnclassifiableValueError``: type, JAX's error, where, how to mark it."""
    return (
        f"Cannot tell whether {where} (a {type_name}) is data or static: its type is a "
        f"JAX pytree whose flatten raised {type(error).__name__}: {error}.\nFix: mark it "
        "when assigning it:\n"
        "  1. `obj.attr = nnx.static(value)`: kept whole in the GraphDef (it must be "
        "hashable);\n"
        "  2. `obj.attr = nnx.data(value)`: one State leaf, passed to JAX as it is;\n"
        "  3. or fix the type's pytree registration (jax.tree_util.register_pytree_node)."
    )


def children_of(x: Any) -> list[tuple[Key, Any]]:
    """The ``(key, child)`` pairs one level below ``x``, whatever its kind (``[]`` for leaves)."""
    kind = REGISTRY.kinds.get(type(x)) or REGISTRY.classify(x)
    if kind is NODE:
        return list(REGISTRY.impls[type(x)].flatten(x)[0])
    if kind is SEQUENCE:
        return list(enumerate(x))
    if kind is DICT:
        return list(x.items())
    if kind is PYTREE:
        return flatten_pytree(x)[0]
    return []


def flatten_pytree(x: object) -> tuple[list[tuple[Key, Any]], Any]:
    """One level of the pytree node ``x``: ``([(key, child), ...], treedef)``.

    Raises:
      ValueError: ``x`` is a pytree leaf, not a node.
    """
    found = pytree_children(x)
    if found is None:
        raise ValueError(
            f"A {type(x).__name__} is a pytree leaf, not a pytree node: it has no children."
        )
    return found


def unflatten_pytree(children: list[tuple[Key, Any]], treedef: Any) -> object:
    """Rebuilds the node ``flatten_pytree`` took apart, from ``(key, child)`` pairs."""
    return treedef.unflatten([child for _, child in children])


def _key_of(entry: object) -> Key:
    for attr in ("name", "key", "idx"):
        if hasattr(entry, attr):
            typed: Hashable = getattr(entry, attr)
            return typed
    return str(entry)


def is_hashable(x: object) -> bool:
    """Whether ``hash(x)`` works (what a static value or a cache key needs)."""
    try:
        hash(x)
    except TypeError:
        return False
    return True


def is_plain_static(x: object) -> bool:
    """True for values of kind ``CONSTANT`` (Python constants, NumPy scalars)."""
    return REGISTRY.kind_of(x) is CONSTANT
