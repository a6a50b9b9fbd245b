"""Which values are graph nodes, which are containers, and which are leaves.

The graph engine sorts every value it meets into one of five kinds:

* **graph nodes**: reference-semantics objects (``Object``/``Module`` and any type
  registered with ``register_node_type``, or with Flax's ``register_graph_node_type``,
  ``node_registries.py``, which calls it). Identity matters: a node seen
  twice is stored once and referenced afterwards (shared references, cycles).
* **Variables**: nodes whose value is a state leaf; identity matters too.
* **containers**: ``list``, ``tuple``, ``dict`` and any other JAX pytree node
  (named tuples, optax states…). They are walked through by value, like JAX
  walks pytrees; two attributes holding the same list get two lists back.
* **array leaves**: ``jax.Array`` and ``np.ndarray``: they go into the ``State``.
  A raw ``jax.ShapeDtypeStruct`` (one not held by a Variable) is static, as in
  Flax NNX 0.12.8, whose graph flatten makes only arrays leaves: ``nnx.split`` of
  an abstract pytree (``nnx.eval_shape`` of a function returning a Linen
  ``TrainState``) gives an empty State on both libraries.
* **static values**: everything else (ints, strings, NumPy scalars such as
  ``np.float64(0.1)``, functions, ``None``…). They are stored in the ``GraphDef``
  and so must be hashable.

Graph-node types are registered with a ``NodeTypeImpl`` telling the engine how
to list a node's children, build an empty node and fill it: the engine's one record
of a node type (Flax's ``GraphNodeImpl``, ``node_registries.py``, is a view of it).
``Object`` registers itself (and every subclass) this way, which keeps this layer
free of any import from the object model.

``REGISTRY.kind_of(x)`` is the one place that decides which kind a value is (a
``Kind``); every walker of the engine (split and its direct walk, the structure
snapshot, update, clone and copy, the traversals, display) dispatches on it, so
they all see the same graph. The decision depends only on ``type(x)`` and is
remembered per type, so a walk pays one dict lookup per value.
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
      flatten: ``node -> (items, metadata)``; ``items`` is an iterable of
        ``(key, child)`` pairs in a deterministic order, ``metadata`` a hashable
        value stored in the GraphDef (``None`` if there is none).
      create_empty: ``(metadata, trace) -> node``: a new node with no children, made
        without calling ``__init__``; ``trace`` is the current JAX trace token (a
        one-argument function is accepted too).
      set_items: ``(node, items, metadata) -> None``: makes ``node``'s children
        exactly ``items`` (used both to fill a new node and to update an existing
        one in place).
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
    """Marks a child that a node's ``flatten`` wants in the State even though it is
    not an array (``nnx.data(3)``)."""

    __slots__ = ("value",)

    def __init__(self, value: object):
        self.value = value


class StaticLeaf:
    """Marks a child that a node's ``flatten`` wants in the GraphDef even though it
    would otherwise be walked (``nnx.static([...])`` is still rejected if unhashable)."""

    __slots__ = ("value",)

    def __init__(self, value: object):
        self.value = value


class Kind(enum.IntEnum):
    """What a value is to the graph engine (``NodeRegistry.kind_of``).

    Members (their order is the order of the decision, see ``NodeRegistry.classify``):

    * ``NODE``: a registered graph node (``Object``, ``Module``…): identity matters.
    * ``VARIABLE``: a ``Variable``: a node whose value is one State leaf.
    * ``SEQUENCE``: exactly a ``list`` or ``tuple``, walked by position.
    * ``DICT``: exactly a ``dict``, walked by key.
    * ``ARRAY``: an array leaf (``jax.Array`` and Tracers, ``np.ndarray``): it
      goes into the State. A raw ``jax.ShapeDtypeStruct`` is ``STATIC``, as in
      Flax NNX 0.12.8 (a Variable holding one still has it as its State leaf).
    * ``CONSTANT``: an ``int``, ``float``, ``str``, ``bool``, ``complex``,
      ``bytes``, ``None``, ``...`` or a NumPy scalar (``np.float64(0.1)``, static
      as in Flax NNX 0.12.8): always static, never walked.
    * ``REF``: a raw ``jax.Ref``: state with an identity.
    * ``DATA_LEAF``, ``STATIC_LEAF``: the ``DataLeaf``/``StaticLeaf`` marks a node's
      ``flatten`` puts around a child (``nnx.data``, ``nnx.static``).
    * ``PYTREE``: any other JAX pytree node (a named tuple, an optax state…),
      walked by value through JAX's flatten.
    * ``STATIC``: anything else (a function, a config object): a static value.

    The values start at 1, so a cached kind is always true (``kinds.get(t) or …``).
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


# The members as plain names: reading ``Kind.NODE`` goes through the enum's class
# machinery (about 0.2 µs), a module constant costs a global lookup.
NODE = Kind.NODE
VARIABLE = Kind.VARIABLE
SEQUENCE = Kind.SEQUENCE
DICT = Kind.DICT
ARRAY = Kind.ARRAY
CONSTANT = Kind.CONSTANT
REF = Kind.REF
DATA_LEAF = Kind.DATA_LEAF
STATIC_LEAF = Kind.STATIC_LEAF
PYTREE = Kind.PYTREE
STATIC = Kind.STATIC

ARRAY_TYPES: tuple[type[Any], ...] = (jax.Array, np.ndarray, np.generic, jax.ShapeDtypeStruct)
"""The types of array-like values: what a transform traces when it meets one as an
argument or output leaf (a NumPy scalar included, as JAX does). ``classify`` tests
``np.generic`` first: held by an object, a NumPy scalar is static."""
PLAIN_STATIC = frozenset({int, float, str, bool, complex, bytes, type(None), type(Ellipsis)})

STABLE_STATIC_MODULES = frozenset({"builtins", "types", "functools", "numpy", "jax", "jaxlib"})
"""Top-level packages whose static types (functions, classes, dtypes, partials) users do not register
as JAX pytrees later: their "static" kind is remembered like any other."""
BUILTIN_CONTAINERS = frozenset({list, tuple, dict})
_TRACER = jax.core.Tracer


class NodeRegistry:
    """The graph-node types and the kind of every type met so far.

    Attributes:
      impls: node type -> its ``NodeTypeImpl``, written only by
        ``register_node_type`` (like JAX's pytree registry).
      kinds: type -> ``Kind``, filled by ``classify`` the first time a value of the
        type is met; registering a node type forgets that type's entry. The dict
        is never replaced, only updated, so a walker may keep a reference to it or
        its ``get`` for the length of a walk.
      tracer_kinds: abstract-value type -> ``Kind`` (``ARRAY`` or ``REF``) for JAX
        Tracers, whose kind depends on what they stand for, not on their type.
      unflattenable: the types met registered as JAX pytrees whose flatten raised
        on a value (taken as static; see ``find_unflattenable``).
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
        """The kinds decided so far, by type (read-only), for a walker's inner loop:
        ``cache.get(type(x)) or REGISTRY.classify(x)`` is ``kind_of(x)`` without a
        method call per value. The mapping is never replaced, so a walker may hold it
        for the length of a walk."""
        return self.kinds

    def node_impls(self) -> Mapping[type, NodeTypeImpl]:
        """The registered graph-node types and their impls (read-only), for a walker's
        inner loop (``impls[type(x)]`` without a call per node); elsewhere use
        ``node_impl(x)`` or ``get_graph_node_impl(x)``."""
        return self.impls

    def kind_of(self, x: object) -> Kind:
        """The ``Kind`` of ``x`` (remembered per ``type(x)``)."""
        return self.kinds.get(type(x)) or self.classify(x)

    def _flattens(self, x: object) -> bool:
        """Whether ``x`` is a JAX pytree node (it has children). A value whose type is
        registered with JAX but whose flatten raises is taken as static (the walks
        never fail on it) and its type noted in ``unflattenable``."""
        try:
            return pytree_children(x) is not None
        except Exception:
            self.unflattenable.add(type(x))
            return False

    def classify(self, x: object) -> Kind:
        """Decides the kind of ``x`` and remembers it for ``type(x)``. The first
        test that holds wins, in ``Kind``'s order: a registered node type (exact
        type), a Variable, a list or tuple, a dict, a NumPy scalar (a constant), an
        array, a plain constant, a
        raw ``jax.Ref``, a ``DataLeaf``/``StaticLeaf`` mark, a JAX pytree node, and
        else a static value. Each test depends on the type alone (JAX's pytree
        registry and the array ABCs are keyed by type), so the answer holds for
        every value of the type; a "static" answer for a class defined outside the
        modules of ``STABLE_STATIC_MODULES`` is not remembered, since the class may
        be registered as a JAX pytree later. A JAX Tracer stands for an array
        or a Ref: its kind depends on the type of its abstract value (``x.aval``) and
        is remembered per abstract-value type."""
        t = type(x)
        if issubclass(t, _TRACER):
            # A Tracer stands for an array or for a Ref: the type of its abstract value
            # tells, so the kind is remembered per abstract-value type, not per type.
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
            # A NumPy scalar (np.float64(0.1), np.int32(3), np.bool_(True)) is static, as
            # in Flax NNX 0.12.8: code branches on it in Python (a drop-path rate from
            # np.linspace). Passed to a transform as an argument (or in a list, tuple or
            # dict argument) a NumPy number is traced, as in JAX and Flax: the walk's
            # one rule for a constant's role there is walk.traced_constant.
            kind = CONSTANT
        elif isinstance(x, ARRAY_TYPES) and t is not jax.ShapeDtypeStruct:
            # A raw ShapeDtypeStruct is static, as in Flax NNX 0.12.8 (only arrays
            # are State leaves there); transforms still trace it as an argument.
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
            # A user's class may be registered with JAX as a pytree after a first value
            # of it was met (``jax.tree_util.register_pytree_node`` tells nobody), so
            # its "static" answer is decided afresh each time, as JAX's registry is.
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
    """Registers ``type`` as a reference-semantics graph node with the engine's own
    functions (see ``NodeTypeImpl``), replacing an earlier registration, and returns
    its record.

    ``Object`` and its subclasses register themselves this way. The public way to
    register another type is Flax's ``register_graph_node_type``
    (``nnx.register_graph_node_type``, ``nnx.graphlib.register_graph_node_type``),
    which calls this one.
    """
    if len(inspect.signature(create_empty).parameters) < 2:
        user_create = create_empty

        def create_empty(metadata: Hashable, trace: object = None) -> object:
            return user_create(metadata)

    impl = NodeTypeImpl(type, flatten, create_empty, set_items, get_child, set_child, del_child)
    REGISTRY.register(impl)
    return impl


def node_impl(node: object) -> NodeTypeImpl:
    """The ``NodeTypeImpl`` of the graph node ``node`` (its kind is ``NODE``).

    Raises:
      KeyError: ``type(node)`` is not a registered graph-node type.
    """
    return REGISTRY.impls[type(node)]


def get_graph_node_impl(x: object) -> NodeTypeImpl | None:
    """Returns the impl registered for ``type(x)`` exactly, or ``None``."""
    return REGISTRY.impls.get(type(x))


def is_node_module(x: object) -> bool:
    """Whether ``type(x)`` is a registered graph node type (an Object, a Module,
    ``Rngs``…; not a Variable): the values whose kind is ``NODE``. The engine's
    question, under Flax's name for it (``nnx.graphlib.is_node_module``);
    ``nnx.graphlib.is_graph_node`` also says yes to Variables and Refs, and
    ``is_node_or_variable`` to Variables.

    Example::

      >>> import flaxgraph as nnx
      >>> is_node_module(nnx.Dict()), is_node_module(nnx.Param(1)), is_node_module([1])
      (True, False, False)

    Source: Flax NNX 0.12.8 ``flax.nnx.graphlib.is_node_module`` (same answers)."""
    return REGISTRY.kind_of(x) is NODE


def is_node_or_variable(x: object) -> bool:
    """True for values whose identity the engine tracks: graph nodes and Variables."""
    return REGISTRY.kind_of(x) <= VARIABLE


def is_array_leaf(x: object) -> bool:
    """True for values stored in a State as raw leaves (arrays and array-likes)."""
    return REGISTRY.kind_of(x) is ARRAY


def pytree_children(x: object) -> tuple[list[tuple[Key, Any]], Any] | None:
    """One level of a non-builtin pytree node: ``([(key, child)], treedef)``, or
    ``None`` if ``x`` is a pytree leaf (then it is a static value)."""
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
    """The first value in ``x`` (``x`` itself, or an item of the plain lists, tuples
    and dicts it is made of) whose type is registered as a JAX pytree but whose
    flatten raises, as an ``Unflattenable`` record; ``None`` if there is none.

    Such a value is neither walkable data nor known to be static; the walks take it
    as static (``classify``), an attribute assignment refuses it
    (``UnclassifiableValueError``). Costs one remembered-kind lookup per value."""
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
    """The message of ``UnclassifiableValueError``: what (the type and JAX's error),
    where, and how to mark the value."""
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
    """The ``(key, child)`` pairs one level below ``x``, whatever its kind: a node's
    items (``DataLeaf``/``StaticLeaf`` marks included), a list's or tuple's items by
    position, a dict's items, a pytree node's children; ``[]`` for a Variable, an
    array, a constant, a static value and a mark."""
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
    """One level of the pytree node ``x``: ``([(key, child), ...], treedef)``; the
    inverse of ``unflatten_pytree``. (Flax NNX 0.12's private ``graphlib``
    helper; aux data such as ``struct.field(pytree_node=False)`` stays in ``treedef``.)

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
    """True for ints, floats, strings, bools, ``None``, NumPy scalars… (always static,
    never walked)."""
    return REGISTRY.kind_of(x) is CONSTANT
