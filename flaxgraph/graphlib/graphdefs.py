"""GraphDef and its records: the frozen, hashable description of a graph's structure.

The records and why they compare as they do: ``docs/design.md``, "Records: the GraphDef".
Source: Flax NNX ``GraphDef`` (the split/merge design of flax#4107).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Generic, NamedTuple, Self, TypeVar, Union

import jax

from flaxgraph.graphlib.paths import step_str
from flaxgraph.graphlib.statics import (
    is_unhashable,
    structural,
    unhashable_static_error,
    unwrap,
)
from flaxgraph.renderers import RENDERERS

if TYPE_CHECKING:
    from flaxgraph.variablelib.variable import Variable

# Records are NamedTuples (C-speed build, hash, ==); kinds never compare equal (arity or
# field types differ): docs/design.md, "Records: the GraphDef".


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
    """A graph node seen for the first time (reference index ``index``).

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
        """The record from its field values in field order, without checks (``tuple.__new__``)."""
        return tuple.__new__(cls, fields)


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
        """The record from its field values in field order, without checks (``tuple.__new__``)."""
        return tuple.__new__(cls, fields)


class NodeRef(NamedTuple):
    """A node or Variable seen before in the walk: reuse the object at ``index``."""

    type: type
    index: int  # type: ignore[assignment]  # a field named like tuple.index

    @classmethod
    def from_fields(cls, fields: Iterable[Any], /) -> Self:
        """The record from its field values in field order, without checks (``tuple.__new__``)."""
        return tuple.__new__(cls, fields)


class ContainerDef(NamedTuple):
    """A list, tuple or dict (``type``) or another pytree node (``treedef``), walked by value.

    Attributes:
      type: the container's class.
      keys: the children's keys (positions, dict keys, pytree keys).
      children: one definition per key.
      treedef: the ``jax`` treedef of a pytree node, ``None`` for a list, tuple or dict.
    """

    type: type
    keys: tuple[Hashable, ...]
    children: tuple[Def, ...]
    treedef: Any = None

    @classmethod
    def from_fields(cls, fields: Iterable[Any], /) -> Self:
        """The record from its field values in field order, without checks (``tuple.__new__``)."""
        return tuple.__new__(cls, fields)


class ArrayDef(NamedTuple):
    """A raw array leaf; its value is the next State leaf.

    Attributes:
      index: the reference index of a raw ``jax.Ref`` leaf (a Ref shared along two
        paths stays one Ref; later sightings are ``NodeRef``s), ``None`` for an array.
    """

    index: int | None = None  # type: ignore[assignment]  # a field named like tuple.index

    def __repr__(self) -> str:
        return "ArrayDef()" if self.index is None else f"ArrayDef(index={self.index})"


class _StaticFields(NamedTuple):
    value_type: type
    key: Hashable


class StaticDef(_StaticFields):
    """A static value kept in the GraphDef: ``StaticDef(value)``.

    Attributes:
      value_type: ``type(value)`` (so ``1``, ``True`` and ``1.0`` differ).
      key: the value's structural form: the value itself, or a ``PartialKey`` for a
        ``functools.partial`` (``statics.py``).
    """

    __slots__ = ()

    def __new__(cls, value: object) -> StaticDef:
        return tuple.__new__(cls, (type(value), structural(value)))

    @classmethod
    def from_fields(cls, fields: Iterable[Any], /) -> Self:
        """The record from ``(value_type, key)``, without checks (``tuple.__new__``)."""
        return tuple.__new__(cls, fields)

    @property
    def value(self) -> Any:
        """The static value itself (a ``functools.partial`` given back as one)."""
        return unwrap(self.key)

    def __getnewargs__(self) -> tuple[Any, ...]:
        return (self.value,)

    def __repr__(self) -> str:
        return f"StaticDef(value={self.value!r})"


Def = Union[NodeDef, VariableDef, NodeRef, ContainerDef, ArrayDef, StaticDef]

ARRAY_DEF = ArrayDef()


class TreeNodeDef(NamedTuple):
    """The whole structure of a tree-mode (``graph=False``) split, as one definition.

    Attributes:
      type: the root's type.
      treedef: the root definition.
      path_index: each State leaf's path with its position in the flat leaves, sorted by path.
    """

    type: type
    treedef: Def
    path_index: tuple[tuple[tuple[Hashable, ...], int], ...]


# Every record is immutable; the direct walks build them with ``from_fields`` on every
# split: at run time it is ``tuple.__new__`` itself (C speed, no Python frame); the
# methods above type it.
for _record in (NodeDef, VariableDef, NodeRef, ContainerDef, ArrayDef, StaticDef, TreeNodeDef):
    setattr(_record, "__setattr__", _immutable)  # noqa: B010
    if _record not in (ArrayDef, StaticDef):
        setattr(_record, "__repr__", _def_repr)  # noqa: B010
    if _record not in (ArrayDef, TreeNodeDef):
        setattr(_record, "from_fields", classmethod(tuple.__new__))  # noqa: B010
del _record


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
    """The cache cell of a ``GraphDef``: its leaf paths and hash, computed on first use."""

    __slots__ = ("leaf_paths", "hash")

    def __init__(self, leaf_paths: tuple[tuple[Hashable, ...], ...] | None) -> None:
        self.leaf_paths = leaf_paths
        self.hash: int | None = None


class GraphDef(Generic[N]):
    """The structure of a graph: a root definition plus the paths of its State leaves.

    Immutable, hashable and equal to any GraphDef of the same structure, so it can be a
    static argument of ``jax.jit``; also a pytree with no leaves::

      >>> import jax, jax.numpy as jnp, flaxgraph as nnx
      >>> graphdef, state = nnx.split(nnx.Linear(2, 3, rngs=nnx.Rngs(0)))
      >>> jax.tree.leaves(graphdef)
      []
      >>> jax.jit(lambda g, s, x: nnx.merge(g, s)(x))(graphdef, state, jnp.ones(2)).shape
      (3,)

    ``GraphDef[Model]`` is a valid annotation with no effect at run time.

    Attributes:
      root: the definition of the root value.
      leaf_paths: the path of every State leaf, in the order ``merge`` consumes them.
      tree: whether it comes from a tree-mode (``graph=False``) split; only ``nodes``
        shows it (equality and hash ignore it).
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
          StaticAttributeError (a ``TypeError``): a static attribute is unhashable; the
            message names its path. Transforms key on ``lenient_hash`` and ``==`` instead.
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
        """The ``StaticAttributeError`` naming the first unhashable static, its path rooted at
        ``root_name`` (or ``roots[i]`` for a tuple of named roots); a plain ``TypeError`` if none.
        """
        found = _find_unhashable(self.root, ())
        if found is None:
            return TypeError(f"GraphDef of a {self.type.__name__} is unhashable.")
        steps, value, what = found
        if roots and steps and isinstance(steps[0][0], int) and steps[0][0] < len(roots):
            root_name, steps = roots[steps[0][0]], steps[1:]
        where = root_name + "".join(step_str(k, attr) for k, attr in steps)
        return unhashable_static_error(where, value, what)

    def __reduce__(self) -> tuple[type[GraphDef[Any]], tuple[object, ...]]:
        return (GraphDef, (self.root, self.leaf_paths, self.tree))

    @property
    def nodes(self) -> tuple[Any, ...]:
        """The definitions in depth-first order (Flax's ``nodes``); tree mode: one ``TreeNodeDef``.

        In graph mode ``nodes[0]`` is the root's definition (a ``NodeRef`` if an enclosing
        ``split_context`` saw it before). Computed on each access.
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

        One pair per attribute of each ``NodeDef`` and item of each container; Flax lists
        ``(key, attribute kind)`` flat, flaxgraph gives the attribute's own definition.

        >>> import flaxgraph as nnx
        >>> graphdef, _ = nnx.split(nnx.Linear(2, 3, rngs=nnx.Rngs(0)))
        >>> [k for k, _ in graphdef.attributes][:2]
        ['bias', 'dot_general']
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
        """Returns ``self``: flaxgraph's GraphDef has no outer index (``renumber`` instead).

        >>> import flaxgraph as nnx
        >>> graphdef, _ = nnx.split(nnx.Dict(a=1))
        >>> graphdef.with_no_outer_index() is graphdef
        True
        """
        return self

    def with_same_outer_index(self) -> GraphDef[Any]:
        """Returns ``self`` (no outer index, see ``with_no_outer_index``)."""
        return self

    def with_matching_outer_index(self, other: GraphDef[Any]) -> GraphDef[Any]:
        """Returns ``self`` (no outer index, see ``with_no_outer_index``).

        Args:
          other: a GraphDef.

        Raises:
          TypeError: ``other`` is not a GraphDef.

        >>> import flaxgraph as nnx
        >>> graphdef, _ = nnx.split(nnx.Dict(a=1))
        >>> graphdef.with_matching_outer_index(graphdef) is graphdef
        True
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
    """``hash(x)``, except that an unhashable static inside a GraphDef or tuple counts by type.

    It agrees with ``==`` (as JAX compares a treedef's aux data), so a transform's cache
    key may hold a model with an unhashable config; ``GraphDef.__hash__`` still raises.

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
    """``(steps, value, what)`` of the first unhashable static below ``d`` (steps: key, is_attr)."""
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
      outer_index: object -> the index it gets instead; others get ``offset + index``.
      offset: the first free index in the other space.

    Returns:
      The renumbered GraphDef (same structure and leaf paths).
    """
    mapping = {i: outer_index[x] if x in outer_index else offset + i for x, i in ref_index.items()}
    return GraphDef(_renumbered(graphdef.root, mapping), graphdef.leaf_paths, graphdef.tree)


jax.tree_util.register_pytree_node(
    GraphDef,
    lambda graphdef: ((), graphdef),
    lambda graphdef, _: graphdef,
)
