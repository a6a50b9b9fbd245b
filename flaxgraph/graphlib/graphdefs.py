"""GraphDef: the frozen, hashable description of a graph's structure.

``split`` turns an object graph into a ``GraphDef`` (everything but the state
leaves) and a ``State`` (the leaves). A GraphDef is a tree of small immutable
definitions, one per value met in a depth-first walk:

=================  ======================================================
definition         stands for
=================  ======================================================
``NodeDef``        a graph node (an Object) seen for the first time: its
                   type, reference index, metadata and children by key
``VariableDef``    a Variable seen for the first time: kind, index, metadata;
                   its value is the next leaf of the State
``NodeRef``        a node or Variable seen before: the index to reuse
``ContainerDef``   a list, tuple, dict or other pytree node, walked by value
``ArrayDef``       a raw array leaf; its value is the next leaf of the State
``StaticDef``      a static value (int, str, function…), stored here
=================  ======================================================

Two GraphDefs are equal when the structures are equal, so a GraphDef can be a
static argument of ``jax.jit`` and a cache key; its hash is computed once.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Generic, NamedTuple, Self, TypeVar, Union

import jax

from flaxgraph.graphlib.statics import (
    is_unhashable,
    structural,
    unhashable_static_error,
    unwrap,
)
from flaxgraph.renderers import RENDERERS

if TYPE_CHECKING:
    from flaxgraph.variablelib.variable import Variable

# Each definition is a NamedTuple read by field name: building, hashing and comparing
# definitions run at C speed (tuple construction, hash and equality). Code tells the
# kinds apart by ``type(d) is NodeDef`` etc. Two definitions of different kinds never
# compare equal: the kinds differ in arity (ArrayDef 1, NodeRef and StaticDef 2,
# VariableDef 3, NodeDef and ContainerDef 4) or in a field's type (a NodeDef's
# ``index`` is an int, a ContainerDef's ``keys`` a tuple; a NodeRef's ``type`` is a
# graph node or Variable type, which a static value never has), see
# ``tests/graphlib/test_graphdefs.py``.


def _short(x: object) -> str:
    if isinstance(x, type):
        return x.__name__
    return repr(x)


def _def_repr(self: Any) -> str:
    fields = ", ".join(f"{f}={_short(getattr(self, f))}" for f in self._fields)
    return f"{type(self).__name__}({fields})"


def _immutable(self: object, name: str, value: object) -> None:
    raise AttributeError(f"{type(self).__name__} is immutable")


class NodeDef(NamedTuple):
    """A graph node seen for the first time (index ``index`` in this GraphDef).

    Attributes:
      type: the node's class (a registered graph node type).
      index: its reference index (``NodeRef``s to it carry the same index).
      metadata: what its ``flatten`` returned besides the children (hashable).
      attributes: ``(key, definition)`` per child, in the node's order.
    """

    type: type
    index: int  # type: ignore[assignment]  # a field named like tuple.index
    metadata: Hashable
    attributes: tuple[tuple[Hashable, Def], ...]

    @classmethod
    def from_fields(cls, fields: Iterable[Any], /) -> Self:
        """The record from its field values in field order, without checks (the
        direct walks' constructor; ``tuple.__new__`` itself at run time, see below)."""
        return tuple.__new__(cls, fields)

    def __repr__(self) -> str:
        return _def_repr(self)

    def __setattr__(self, name: str, value: object) -> None:
        _immutable(self, name, value)


class VariableDef(NamedTuple):
    """A Variable seen for the first time; its value is the next State leaf.

    Attributes:
      type: the Variable's class (``Param``, ``BatchStat``...).
      index: its reference index.
      metadata: its metadata as sorted ``(name, value)`` pairs (``()`` if none).
    """

    type: type[Variable[Any]]
    index: int  # type: ignore[assignment]  # a field named like tuple.index
    metadata: tuple[tuple[str, Any], ...]

    @classmethod
    def from_fields(cls, fields: Iterable[Any], /) -> Self:
        """The record from its field values in field order, without checks (the
        direct walks' constructor; ``tuple.__new__`` itself at run time, see below)."""
        return tuple.__new__(cls, fields)

    def __repr__(self) -> str:
        return _def_repr(self)

    def __setattr__(self, name: str, value: object) -> None:
        _immutable(self, name, value)


class NodeRef(NamedTuple):
    """A node or Variable seen before in the walk: reuse the object at ``index``."""

    type: type
    index: int  # type: ignore[assignment]  # a field named like tuple.index

    @classmethod
    def from_fields(cls, fields: Iterable[Any], /) -> Self:
        """The record from its field values in field order, without checks (the
        direct walks' constructor; ``tuple.__new__`` itself at run time, see below)."""
        return tuple.__new__(cls, fields)

    def __repr__(self) -> str:
        return _def_repr(self)

    def __setattr__(self, name: str, value: object) -> None:
        _immutable(self, name, value)


class ContainerDef(NamedTuple):
    """A list/tuple/dict (``type``) or another pytree node (``treedef``), by value.

    Attributes:
      type: the container's class.
      keys: the children's keys (list/tuple positions, dict keys, pytree keys).
      children: one definition per key.
      treedef: the ``jax`` treedef rebuilding a pytree node, ``None`` for a list,
        tuple or dict.
    """

    type: type
    keys: tuple[Hashable, ...]
    children: tuple[Def, ...]
    treedef: Any = None

    @classmethod
    def from_fields(cls, fields: Iterable[Any], /) -> Self:
        """The record from its field values in field order, without checks (the
        direct walks' constructor; ``tuple.__new__`` itself at run time, see below)."""
        return tuple.__new__(cls, fields)

    def __repr__(self) -> str:
        return _def_repr(self)

    def __setattr__(self, name: str, value: object) -> None:
        _immutable(self, name, value)


class ArrayDef(NamedTuple):
    """A raw array leaf; its value is the next State leaf.

    A raw ``jax.Ref`` is a leaf with an identity: its first sighting is an
    ``ArrayDef`` carrying its reference ``index`` (later sightings are
    ``NodeRef``s to it), so a Ref shared along two paths stays one Ref.

    Attributes:
      index: the reference index of a raw ``jax.Ref`` leaf, ``None`` for an array.
    """

    index: int | None = None  # type: ignore[assignment]  # a field named like tuple.index

    def __repr__(self) -> str:
        return "ArrayDef()" if self.index is None else f"ArrayDef(index={self.index})"

    def __setattr__(self, name: str, value: object) -> None:
        _immutable(self, name, value)


class _StaticFields(NamedTuple):
    value_type: type
    key: Hashable


class StaticDef(_StaticFields):
    """A static value kept in the GraphDef (hashable where the GraphDef is a cache key).

    ``StaticDef(value)`` stores the value's type and its structural form: ``1 ==
    True == 1.0`` in Python, but a GraphDef must tell them apart. A
    ``functools.partial`` is stored as a ``PartialKey`` (compared by function and
    arguments, see ``statics.py``); ``value`` gives the partial back.

    Attributes:
      value_type: ``type(value)``.
      key: the structural form of the value (the value itself for a plain static,
        a ``PartialKey`` for a partial).
    """

    __slots__ = ()

    def __new__(cls, value: object) -> StaticDef:
        return tuple.__new__(cls, (type(value), structural(value)))

    @classmethod
    def from_fields(cls, fields: Iterable[Any], /) -> Self:
        """The record from ``(value_type, key)`` (for a plain static such as an int, a
        str or None, the key is the value itself), without checks (the direct walks'
        constructor; ``tuple.__new__`` itself at run time, see below)."""
        return tuple.__new__(cls, fields)

    @property
    def value(self) -> Any:
        """The static value itself (a ``functools.partial`` given back as one)."""
        return unwrap(self.key)

    def __getnewargs__(self) -> tuple[Any, ...]:
        return (self.value,)

    def __repr__(self) -> str:
        return f"StaticDef(value={self.value!r})"

    def __setattr__(self, name: str, value: object) -> None:
        _immutable(self, name, value)


Def = Union[NodeDef, VariableDef, NodeRef, ContainerDef, ArrayDef, StaticDef]

# The direct walks build records with ``from_fields`` on every split: at run time it is
# ``tuple.__new__`` itself (C speed, no Python frame); the methods above type it.
for _record in (NodeDef, VariableDef, NodeRef, ContainerDef, StaticDef):
    setattr(_record, "from_fields", classmethod(tuple.__new__))  # noqa: B010
del _record
ARRAY_DEF = ArrayDef()


class TreeNodeDef(NamedTuple):
    """The whole structure of a tree-mode (``graph=False``) split, as one definition.

    A tree-mode graph has no sharing, so its structure is a single tree: ``treedef``
    is the root definition and ``path_index`` pairs each State leaf's path with its
    position in the flat leaves, sorted by path. ``GraphDef.nodes`` of a tree-mode
    GraphDef is ``(TreeNodeDef(...),)``.
    """

    type: type
    treedef: Def
    path_index: tuple[tuple[tuple[Hashable, ...], int], ...]

    def __repr__(self) -> str:
        return _def_repr(self)

    def __setattr__(self, name: str, value: object) -> None:
        _immutable(self, name, value)


def _leaf_paths_of(d: Def, path: tuple[Hashable, ...], out: list[tuple[Hashable, ...]]) -> None:
    """Appends the path of every leaf below ``d`` (at ``path``), in walk order."""
    if type(d) is VariableDef or type(d) is ArrayDef:
        out.append(path)
    elif type(d) is NodeDef:
        for k, c in d.attributes:
            _leaf_paths_of(c, (*path, k), out)
    elif type(d) is ContainerDef:
        for k, c in zip(d.keys, d.children):
            _leaf_paths_of(c, (*path, k), out)


def _preorder(d: Def, out: list[Def]) -> None:
    out.append(d)
    if type(d) is NodeDef:
        for _, c in d.attributes:
            _preorder(c, out)
    elif type(d) is ContainerDef:
        for c in d.children:
            _preorder(c, out)


N = TypeVar("N")  # the type of the root value (``GraphDef[Model]``)


class DerivedValues:
    """What a ``GraphDef`` derives from its root on first use: the path of every
    leaf (``None`` until asked, when split's direct walk made none) and the hash
    (``None`` until hashed). A cache cell the GraphDef holds; the GraphDef itself
    never changes once made."""

    __slots__ = ("leaf_paths", "hash")

    def __init__(self, leaf_paths: tuple[tuple[Hashable, ...], ...] | None) -> None:
        self.leaf_paths = leaf_paths
        self.hash: int | None = None


class GraphDef(Generic[N]):
    """The structure of a graph: a root definition plus the paths of its State leaves.

    Immutable, hashable (hash computed once) and equal to any GraphDef of the same
    structure, so it can be passed as a static argument to ``jax.jit``. It is also
    a JAX pytree with no leaves (the whole structure is static aux data), so
    ``graphdef, state = nnx.split(model)`` can be passed straight to ``jax.jit``,
    ``jax.vmap`` or ``jax.lax.scan`` as an ordinary argument::

      >>> import jax, jax.numpy as jnp, flaxgraph as nnx
      >>> graphdef, state = nnx.split(nnx.Linear(2, 3, rngs=nnx.Rngs(0)))
      >>> jax.tree.leaves(graphdef)
      []
      >>> jax.jit(lambda g, s, x: nnx.merge(g, s)(x))(graphdef, state, jnp.ones(2)).shape
      (3,)

    ``GraphDef[Model]`` is a valid annotation (as ``State[...]`` and
    ``nnx.PureState[Model]``); it has no effect at run time.

    Attributes:
      root: the definition of the root value.
      leaf_paths: the path of every State leaf, in the order ``merge`` consumes
        them (derived from ``root``; kept to match States by path quickly).
      tree: whether the GraphDef comes from a tree-mode (``graph=False``) split; it
        only changes how ``nodes`` presents it: a tree-shaped graph has the same
        structure in both modes, so the two GraphDefs compare (and hash) equal.

    Source: Flax NNX ``GraphDef`` (split/merge design).
    """

    __slots__ = ("root", "tree", "derived")
    root: Def
    tree: bool
    derived: DerivedValues

    def __init__(
        self,
        root: Def,
        leaf_paths: tuple[tuple[Hashable, ...], ...] | None = None,
        tree: bool = False,
    ):
        object.__setattr__(self, "root", root)
        object.__setattr__(self, "tree", tree)
        object.__setattr__(self, "derived", DerivedValues(leaf_paths))

    @property
    def leaf_paths(self) -> tuple[tuple[Hashable, ...], ...]:
        """The path of every State leaf, in the order ``merge`` consumes them."""
        derived = self.derived
        paths = derived.leaf_paths
        if paths is None:
            found: list[tuple[Hashable, ...]] = []
            _leaf_paths_of(self.root, (), found)
            paths = derived.leaf_paths = tuple(found)
        return paths

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("GraphDef is immutable")

    def __hash__(self) -> int:
        """The structural hash, computed once.

        Raises:
          StaticAttributeError (a ``TypeError``): a static attribute is unhashable
            (a non-frozen dataclass config): the message names its path, as
            Flax's ``GraphDef`` raises. Only code that uses the GraphDef itself as
            a cache key (a dict key, ``jax.jit``'s ``static_argnums``) hashes it;
            split/merge never do, and flaxgraph's transforms key on
            ``lenient_hash`` and ``==``, as JAX compares a treedef's aux data.
        """
        derived = self.derived
        h = derived.hash
        if h is None:
            try:
                h = derived.hash = hash(self.root)
            except TypeError:
                raise self.unhashable_error("node") from None
        return h

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if type(other) is not GraphDef:
            return False
        h, g = self.derived.hash, other.derived.hash
        return (h is None or g is None or h == g) and self.root == other.root

    def unhashable_error(self, root_name: str, roots: tuple[str, ...] = ()) -> TypeError:
        """The ``StaticAttributeError`` naming the first unhashable static value, its
        path formatted from ``root_name``, or, when the root is a tuple of named roots
        (a transform's ``(args, kwargs)``), from ``roots[i]``; a plain ``TypeError`` if
        every static value hashes (then something else failed)."""
        found = _find_unhashable(self.root, ())
        if found is None:
            return TypeError(f"GraphDef of a {self.type.__name__} is unhashable.")
        steps, value, what = found
        if roots and steps and isinstance(steps[0][0], int) and steps[0][0] < len(roots):
            root_name, steps = roots[steps[0][0]], steps[1:]
        where = root_name + "".join(
            f".{k}" if attr and isinstance(k, str) and k.isidentifier() else f"[{k!r}]"
            for k, attr in steps
        )
        return unhashable_static_error(where, value, what)

    def __reduce__(self) -> tuple[type[GraphDef[Any]], tuple[object, ...]]:
        return (GraphDef, (self.root, self.leaf_paths, self.tree))

    @property
    def nodes(self) -> tuple[Any, ...]:
        """The definitions of the GraphDef in depth-first order (Flax's ``nodes``).

        Graph mode: ``nodes[0]`` is the root's definition (a ``NodeDef`` for an
        object seen first here, a ``NodeRef`` for one an enclosing
        ``split_context`` saw before, a ``VariableDef`` for a Variable), followed by
        the definitions of everything below it. Tree mode: a single
        ``TreeNodeDef``. Computed on each access (introspection, not a hot path).
        """
        if self.tree:
            order = sorted(range(len(self.leaf_paths)), key=lambda i: _path_key(self.leaf_paths[i]))
            path_index = tuple((self.leaf_paths[i], i) for i in order)
            return (TreeNodeDef(self.type, self.root, path_index),)
        out: list[Def] = []
        _preorder(self.root, out)
        return tuple(out)

    @property
    def num_leaves(self) -> int:
        """How many State leaves ``merge`` consumes."""
        return len(self.leaf_paths)

    @property
    def type(self) -> type:
        """The type of the root value."""
        root = self.root
        if isinstance(root, (ArrayDef, StaticDef)):  # neither kind is subclassed
            return type(None)
        return root.type

    # Display sits above this layer: it registers the renderers (flaxgraph/renderers.py).
    def __repr__(self) -> str:
        return RENDERERS.text("graphdef", self)

    def __treescope_repr__(self, path: object, subtree_renderer: object) -> object:
        return RENDERERS.treescope("graphdef", self, path, subtree_renderer)

    def _repr_mimebundle_(self, include: object = None, exclude: object = None) -> dict[str, Any]:
        return RENDERERS.mimebundle(self, include, exclude)

    # -- Flax NNX 0.12 members ----------------------------------------------------
    @property
    def attributes(self) -> tuple[tuple[Hashable, Def], ...]:
        """Every ``(key, definition)`` pair of the GraphDef, depth-first.

        One pair per attribute of each ``NodeDef`` and per item of each container
        (list/dict/tuple/pytree), in the order ``nodes`` lists their owners; the
        definition is a ``NodeDef``/``VariableDef``/``NodeRef``/``ContainerDef``/
        ``ArrayDef``/``StaticDef``. A tree-mode GraphDef lists its single tree.
        Computed on each access (introspection, not a hot path).

        Example::

          >>> import flaxgraph as nnx
          >>> graphdef, _ = nnx.split(nnx.Linear(2, 3, rngs=nnx.Rngs(0)))
          >>> [k for k, _ in graphdef.attributes][:2]
          ['bias', 'dot_general']

        Source: Flax NNX 0.12 ``GraphDef.attributes`` (there a flat list of
        ``(key, attribute kind)``; flaxgraph's definitions are nested, so each pair
        holds the attribute's own definition).
        """
        out: list[Def] = []
        _preorder(self.root, out)
        pairs: list[tuple[Hashable, Def]] = []
        for d in out:
            if type(d) is NodeDef:
                pairs.extend(d.attributes)
            elif type(d) is ContainerDef:
                pairs.extend(zip(d.keys, d.children))
        return tuple(pairs)

    def with_no_outer_index(self) -> GraphDef[Any]:
        """This GraphDef without references to an enclosing walk; returns ``self``.

        flaxgraph's GraphDef has no "outer index" (Flax keeps one per node to link
        a GraphDef split inside a transform to the caller's objects): flaxgraph
        renumbers the indices instead (``renumber``), so there is nothing to drop.

        Example::

          >>> import flaxgraph as nnx
          >>> graphdef, _ = nnx.split(nnx.Dict(a=1))
          >>> graphdef.with_no_outer_index() is graphdef
          True

        Source: Flax NNX 0.12 ``GraphDef.with_no_outer_index``.
        """
        return self

    def with_same_outer_index(self) -> GraphDef[Any]:
        """This GraphDef with each node's outer index equal to its index; returns
        ``self`` (flaxgraph's GraphDef has no outer index, see
        ``with_no_outer_index``).

        Example::

          >>> import flaxgraph as nnx
          >>> graphdef, _ = nnx.split(nnx.Dict(a=1))
          >>> graphdef.with_same_outer_index() == graphdef
          True

        Source: Flax NNX 0.12 ``GraphDef.with_same_outer_index``.
        """
        return self

    def with_matching_outer_index(self, other: GraphDef[Any]) -> GraphDef[Any]:
        """This GraphDef with ``other``'s outer indices; returns ``self``
        (flaxgraph's GraphDef has no outer index, see ``with_no_outer_index``).

        Args:
          other: a GraphDef (of the same structure, in Flax).

        Raises:
          TypeError: ``other`` is not a GraphDef.

        Example::

          >>> import flaxgraph as nnx
          >>> graphdef, _ = nnx.split(nnx.Dict(a=1))
          >>> graphdef.with_matching_outer_index(graphdef) is graphdef
          True

        Source: Flax NNX 0.12 ``GraphDef.with_matching_outer_index``.
        """
        if not isinstance(other, GraphDef):
            raise TypeError(
                f"with_matching_outer_index expects a GraphDef, got {type(other).__name__}."
                "\nFix: pass the GraphDef of an `nnx.split` of the same structure."
            )
        return self

    if TYPE_CHECKING:
        # `apply` (``graphdef.apply(state).method(*args)``, Flax NNX ``GraphDef.apply``)
        # is attached by flaxgraph/graphlib/pure_methods.py, the layer above, next to the
        # `call` it runs; declared here for type checkers.
        def apply(self, state: object, *states: object) -> object: ...


def lenient_hash(x: object) -> int:
    """``hash(x)``, except that an unhashable static value (a non-frozen dataclass
    config) inside a GraphDef or tuple of definitions counts by its type only.

    A transform's cache key holds GraphDefs. JAX's treedefs hash a pytree's
    auxiliary data without hashing custom values and compare them with ``==``, so
    Flax's ``nnx.jit`` runs a model holding an unhashable config: two keys are the
    same compilation when they compare equal. This hash agrees with that equality
    (equal keys hold values of the same types), so a key with an unhashable static
    can sit in a dict; ``GraphDef.__hash__`` itself still raises, as Flax's does.

    Example::

      >>> import dataclasses, flaxgraph as nnx
      >>> @dataclasses.dataclass
      ... class Config:
      ...     width: int = 4
      >>> def graphdef(config):
      ...     return nnx.graphdef(nnx.Dict(config=nnx.static(config)))
      >>> lenient_hash(graphdef(Config())) == lenient_hash(graphdef(Config(3)))
      True
      >>> graphdef(Config()) == graphdef(Config(3))
      False
    """
    try:
        return hash(x)
    except TypeError:
        pass
    if type(x) is GraphDef:
        return lenient_hash(x.root)
    if isinstance(x, tuple):
        return hash(tuple(lenient_hash(item) for item in x))
    return hash(type(x))


def _find_unhashable(
    d: Def, steps: tuple[tuple[Hashable, bool], ...]
) -> tuple[tuple[tuple[Hashable, bool], ...], Any, str] | None:
    """``(steps, value, what)`` of the first unhashable static value below ``d``; each
    step is ``(key, is_attribute)``."""
    if type(d) is StaticDef:
        return (steps, d.value, "static attribute") if is_unhashable(d.key) else None
    if type(d) is VariableDef:
        for name, m in d.metadata:
            if is_unhashable(m):
                return (steps, m, f"metadata {name!r} of the {d.type.__name__}")
        return None
    if type(d) is NodeDef:
        if is_unhashable(d.metadata):
            return (steps, d.metadata, "node metadata")
        for k, c in d.attributes:
            found = _find_unhashable(c, (*steps, (k, True)))
            if found is not None:
                return found
    elif type(d) is ContainerDef:
        for k, c in zip(d.keys, d.children):
            found = _find_unhashable(c, (*steps, (k, False)))
            if found is not None:
                return found
        if is_unhashable(d.treedef):
            return (steps, d.treedef, "pytree structure")
    return None


def _path_key(path: tuple[Hashable, ...]) -> tuple[tuple[str, str], ...]:
    return tuple(
        (type(k).__name__, str(k)) if not isinstance(k, int) else ("", f"{k:020d}") for k in path
    )


def _renumbered(d: Def, mapping: dict[int, int]) -> Def:
    if type(d) is NodeDef:
        attributes = tuple((k, _renumbered(c, mapping)) for k, c in d.attributes)
        return NodeDef(d.type, mapping[d.index], d.metadata, attributes)
    if type(d) is VariableDef:
        return VariableDef(d.type, mapping[d.index], d.metadata)
    if type(d) is NodeRef:
        return NodeRef(d.type, mapping[d.index])
    if type(d) is ArrayDef and d.index is not None:
        return ArrayDef(mapping[d.index])
    if type(d) is ContainerDef:
        children = tuple(_renumbered(c, mapping) for c in d.children)
        return ContainerDef(d.type, d.keys, children, d.treedef)
    return d


def renumber(
    graphdef: GraphDef[Any],
    ref_index: Mapping[object, int],
    outer_index: Mapping[object, int],
    offset: int,
) -> GraphDef[Any]:
    """``graphdef`` with its reference indices moved into another index space.

    Args:
      graphdef: from a walk that numbered its objects with ``ref_index``.
      ref_index: object -> index in ``graphdef`` (identity-keyed, a ``RefMap``).
      outer_index: object -> the index it should get instead (identity-keyed);
        objects not in it get ``offset + their index``.
      offset: the first index free in the other space (past every outer index).

    Returns:
      The renumbered GraphDef (same structure and leaf paths). Used so that a graph
      split inside a transform refers to the caller's objects by the caller's
      indices (``update_context``, ``flatten(..., ref_outer_index=...)``).
    """
    mapping = {i: outer_index[x] if x in outer_index else offset + i for x, i in ref_index.items()}
    return GraphDef(_renumbered(graphdef.root, mapping), graphdef.leaf_paths, graphdef.tree)


jax.tree_util.register_pytree_node(
    GraphDef,
    lambda graphdef: ((), graphdef),
    lambda graphdef, _: graphdef,
)
