"""Flax's small tree helpers of ``nnx.extract`` that flaxgraph's transforms do not use.

``table.py`` puts them at ``flaxgraph.extract``. ``PrefixMapping`` is the base Flax's
``StateAxes`` derives from; flaxgraph's lift types are registered as its virtual subclasses.
Source: Flax NNX 0.12.8 ``flax.nnx.extract`` (its public source).
"""

from __future__ import annotations

import abc
import collections
import dataclasses
import functools
import inspect
from collections.abc import Callable, Hashable, Iterable, Mapping
from typing import Any, Generic, NamedTuple, TypeVar

import jax

from flaxgraph.graphlib.graphdefs import GraphDef
from flaxgraph.graphlib.registry import is_node_or_variable
from flaxgraph.reprlib import MappingReprMixin
from flaxgraph.transforms.lift_types import LiftType
from flaxgraph.typing import PathParts
from flaxgraph.variablelib.variable import Variable, is_variable

_A = TypeVar("_A")
_F = TypeVar("_F", bound=Callable[..., Any])


Index = int
"""A position in a tuple of arguments."""
KeyPath = tuple[Hashable, ...]
"""A path of keys."""
Prefix = Any
"""A prefix tree (``in_axes``-like)."""
Leaf = Any
"""A pytree leaf."""
KeepFn = Callable[[PathParts, Any, Variable[Any], Variable[Any]], bool]
"""``(path, prefix, new, old) -> keep?``: which Variable updates a transform keeps."""


def _is_graph_leaf(x: object) -> bool:  # a node or a Variable stops a jax.tree walk
    return is_node_or_variable(x)


class OrderedDict(MappingReprMixin, dict[Any, Any]):
    """A ``dict`` that is a JAX pytree keeping its insertion order (``DictKey`` paths)."""


jax.tree_util.register_pytree_with_keys(
    OrderedDict,
    lambda d: ([(jax.tree_util.DictKey(k), v) for k, v in d.items()], tuple(d.keys())),
    lambda keys, values: OrderedDict(zip(keys, values, strict=True)),
)


@functools.cache
def _labeled_class(keys: tuple[str, ...]) -> type:
    base = collections.namedtuple("LabeledTuple", keys)  # type: ignore[misc]

    def item(self: Any, key: Any) -> Any:
        return getattr(self, key) if isinstance(key, str) else tuple.__getitem__(self, key)

    return type("LabeledTuple", (base,), {"keys": lambda self: self._fields, "__getitem__": item})


def labeled(**kwargs: Any) -> Any:
    """A named tuple of ``kwargs`` that also reads by name (``t['a']``) and has ``keys()``.

    Example::

      >>> t = labeled(a=1, b=2)
      >>> t['a'], t[1], t.keys(), tuple(t)
      (1, 2, ('a', 'b'), (1, 2))
    """
    return _labeled_class(tuple(kwargs))(**kwargs)


class PrefixMapping(abc.ABC):
    """Base of the lift types (``StateAxes``, ``StateSharding``, ``DiffState``): a prefix per Variable."""

    @abc.abstractmethod
    def map_prefix(self, path: PathParts, variable: Variable[Any], /) -> Any:
        """The prefix for the Variable at ``path``."""


def broadcast_prefix(
    prefix_tree: Any,
    full_tree: Any,
    prefix_is_leaf: Callable[[Any], bool] | None = None,
    tree_is_leaf: Callable[[Any], bool] | None = None,
) -> list[Any]:
    """Each leaf of ``prefix_tree`` repeated once per leaf of ``full_tree`` under it.

    Objects and Variables are leaves; ``prefix_is_leaf``/``tree_is_leaf`` add leaf
    predicates. Raises ``ValueError`` if ``prefix_tree`` is not a prefix of ``full_tree``.
    """
    result: list[Any] = []

    def add(x: Any, subtree: Any) -> None:
        result.extend([x] * len(jax.tree.leaves(subtree, is_leaf=tree_is_leaf)))

    jax.tree.map(
        add,
        prefix_tree,
        full_tree,
        is_leaf=lambda x: _is_graph_leaf(x) or (prefix_is_leaf is not None and prefix_is_leaf(x)),
    )
    return result


def broadcast_prefix2(
    prefix_tree: Any,
    full_tree: Any,
    is_leaf: Callable[[Any], bool] | None = None,
    prefix_leaf: Callable[[Any], bool] | None = None,
) -> tuple[list[KeyPath], list[Any]]:
    """As :func:`broadcast_prefix`, with the prefix leaves' key paths: ``(paths, leaves)``."""
    leaf_of_prefix: Callable[[Any], bool] | None = prefix_leaf
    if prefix_leaf is not None and is_leaf is not None:
        leaf_of_prefix = lambda x: prefix_leaf(x) or is_leaf(x)
    elif prefix_leaf is None:
        leaf_of_prefix = is_leaf
    paths: list[KeyPath] = []
    leaves: list[Any] = []

    def add(path: KeyPath, x: Any, subtree: Any) -> None:
        n = len(jax.tree.leaves(subtree, is_leaf=is_leaf))
        paths.extend([path] * n)
        leaves.extend([x] * n)

    jax.tree.map_with_path(add, prefix_tree, full_tree, is_leaf=leaf_of_prefix)
    return paths, leaves


def broadcast_prefix_map(
    f: Callable[..., Any],
    prefix_tree: Any,
    full_tree: Any,
    *rest: Any,
    is_leaf: Callable[[Any], bool] | None = None,
    prefix_leaf: Callable[[Any], bool] | None = None,
) -> Any:
    """``full_tree`` with each leaf replaced by ``f(path, prefix_leaf, leaf, *rest_leaves)``."""
    _, prefix_leaves = broadcast_prefix2(
        prefix_tree, full_tree, is_leaf=is_leaf, prefix_leaf=prefix_leaf
    )
    treedef: Any  # a PyTreeDef (jaxlib ships no stub for it)
    with_path, treedef = jax.tree.flatten_with_path(full_tree, is_leaf=is_leaf)
    rest_leaves = [treedef.flatten_up_to(r) for r in rest]
    out = [
        f(path, p, leaf, *others)
        for (path, leaf), p, *others in zip(with_path, prefix_leaves, *rest_leaves, strict=True)
    ]
    return jax.tree.unflatten(treedef, out)


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class GraphDefState:
    """A GraphDef with its State, as one pytree (the GraphDef has no leaves)."""

    graphdef: GraphDef
    state: Any


@dataclasses.dataclass(frozen=True, slots=True)
class Opaque(Generic[_A]):
    """Holds ``value`` out of comparisons: all ``Opaque`` of one type are equal, hash 0."""

    value: _A

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other)

    def __hash__(self) -> int:
        return 0


class Mask(NamedTuple):
    """Marks a position taken out of a tuple by :func:`mask_at`."""


def mask_at(t: tuple[Any, ...], index: int | None) -> tuple[Any, tuple[Any, ...]]:
    """``(t[index], t with Mask() at index)``; ``(None, t)`` if ``index`` is ``None`` or ``t`` no tuple.

    Example::

      >>> mask_at((1, 2, 3), 1)
      (2, (1, Mask(), 3))
    """
    if index is None or not isinstance(t, tuple):
        return None, t
    return t[index], tuple(Mask() if i == index else x for i, x in enumerate(t))


def slice_at(t: tuple[Any, ...], index: int | None) -> tuple[Any, tuple[Any, ...]]:
    """``(t[index], t without it)``; ``(None, t)`` if ``index`` is ``None``."""
    if index is None:
        return None, t
    return t[index], t[:index] + t[index + 1 :]


def replace_at(t: tuple[Any, ...], index: int | None, value: Any) -> tuple[Any, ...]:
    """``t`` with ``value`` at ``index`` (``t`` itself if ``index`` is ``None``)."""
    if index is None:
        return t
    items = list(t)
    items[index] = value
    return tuple(items)


def find(t: tuple[Any, ...], value: Any) -> int | None:
    """The first position of ``value`` in the tuple ``t`` (``==``), or ``None``."""
    if not isinstance(t, tuple):
        return None
    return next((i for i, x in enumerate(t) if x == value), None)


@jax.tree_util.register_static
@dataclasses.dataclass(frozen=True, slots=True)
class ExtractIndex:
    """Where :func:`extract` took a leaf out: its position in the extracted list."""

    index: int


def extract(
    f: Callable[[Any, Any, Any], bool],
    prefix: Any,
    tree: Any,
    *,
    is_leaf: Callable[[Any], bool] | None = None,
    prefix_leaf: Callable[[Any], bool] | None = None,
) -> tuple[Any, list[Any]]:
    """Takes out of ``tree`` the leaves for which ``f(path, prefix_leaf, leaf)`` holds.

    Returns ``(tree with ExtractIndex(i) in their place, [the leaves taken])``;
    :func:`insert` puts them back.
    """
    taken: list[Any] = []

    def take(path: Any, p: Any, leaf: Any) -> Any:
        if f(path, p, leaf):
            taken.append(leaf)
            return ExtractIndex(len(taken) - 1)
        return leaf

    return broadcast_prefix_map(take, prefix, tree, is_leaf=is_leaf, prefix_leaf=prefix_leaf), taken


def insert(tree: Any, extracted: list[Any]) -> Any:
    """Puts back the leaves :func:`extract` took out of ``tree``."""
    return jax.tree.map(
        lambda x: extracted[x.index] if isinstance(x, ExtractIndex) else x,
        tree,
        is_leaf=lambda x: isinstance(x, ExtractIndex),
    )


def copy_var_structure(tree: _A) -> _A:
    """A copy of ``tree``'s containers that keeps its Variables (the same objects)."""
    return jax.tree.map(lambda x: x, tree, is_leaf=is_variable)


def snapshot(args: _A) -> tuple[_A, _A]:
    """``(args with new containers and the same Variables, a full copy with new Variables)``."""
    return copy_var_structure(args), jax.tree.map(lambda x: x, args)


def variable_changed(post: Variable[Any], pre: Variable[Any]) -> bool:
    """Whether ``post`` differs from ``pre`` in pytree structure or in the identity of a leaf."""
    post_def: Any  # a PyTreeDef
    post_leaves, post_def = jax.tree.flatten(post)
    pre_leaves, pre_def = jax.tree.flatten(pre)
    return post_def != pre_def or any(a is not b for a, b in zip(post_leaves, pre_leaves))


def treemap_copy_args(f: _F) -> _F:
    """Decorates ``f`` to receive copies of its arguments' containers (``jax.tree.map``)."""

    @functools.wraps(f)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        args, kwargs = jax.tree.map(lambda x: x, (args, kwargs))
        return f(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


def check_same_variables(inputs: Any, outputs: Any, transform_name: str = "") -> None:
    """Raises ``ValueError`` unless every Variable of ``inputs`` is the same object at the same
    place of ``outputs``.
    """

    def check(in_leaf: Any, out_leaf: Any) -> None:
        if is_variable(in_leaf) and in_leaf is not out_leaf:
            raise ValueError(
                f"{transform_name} Variable identity must be preserved across iterations."
            )

    jax.tree.map(check, inputs, outputs, is_leaf=lambda x: isinstance(x, Mask) or is_variable(x))


def update_carry_variables(init_val: Any, val_out: Any) -> Any:
    """``val_out`` with each Variable of ``init_val`` kept, updated from the one at its place."""

    def update(in_leaf: Any, out_leaf: Any) -> Any:
        if is_variable(in_leaf):
            in_leaf.update_from_state(out_leaf)
            return in_leaf
        return out_leaf

    return jax.tree.map(update, init_val, val_out, is_leaf=is_variable)


def filter_kwargs(f: Callable[..., Any], **kwargs: Any) -> dict[str, Any]:
    """The ``kwargs`` that ``f`` accepts by name (all of them if it takes ``**kwargs``).

    Example::

      >>> filter_kwargs(lambda a, *, b: 0, a=1, b=2, c=3)
      {'a': 1, 'b': 2}
    """
    parameters = inspect.signature(f).parameters.values()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return kwargs
    named = {
        p.name
        for p in parameters
        if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    }
    return {k: v for k, v in kwargs.items() if k in named}


def to_masked(tree: Any, all_updates: Iterable[Mapping[Any, Any]]) -> Any:
    """``tree`` with each leaf replaced by the update at its key path (``None`` if none; later wins)."""
    combined: dict[Any, Any] = {}
    for updates in all_updates:
        combined.update(updates)
    return jax.tree.map_with_path(
        lambda path, _: combined.get(path), tree, is_leaf=lambda x: x is None
    )


PrefixMapping.register(LiftType)  # isinstance(nnx.StateAxes(...), PrefixMapping), as in Flax
