"""Graphs inside pytrees: ``to_tree``/``from_tree`` and ``prefix`` (``nnx.extract``); Flax's
other helpers at that path are in ``flax_surface/extract_records.py``.

Source: Flax NNX 0.12 ``nnx.extract`` (``to_tree``, ``from_tree``, ``NodeStates``, ``prefix``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Hashable, Iterable, Mapping
from typing import Any

import jax

from flaxgraph.filterlib import Filter, to_predicate
from flaxgraph.graphlib.contexts import MergeContext, SplitContext, merge_context, split_context
from flaxgraph.graphlib.graphdefs import GraphDef
from flaxgraph.graphlib.paths import keys_str
from flaxgraph.graphlib.refmap import RefMap
from flaxgraph.graphlib.registry import is_node_or_variable
from flaxgraph.graphlib.walk import flatten_with_paths
from flaxgraph.modes import resolve_graph
from flaxgraph.statelib import State
from flaxgraph.typing import MISSING, PathParts
from flaxgraph.variablelib.variable import is_variable


class NodeStates:
    """A graph node as a pytree: its GraphDef (static, may be ``None``), States (the children)
    and static ``metadata``.

    ``graphdef`` raises ``ValueError`` if there is none, ``state`` if there is not exactly
    one State.

    Example::

      >>> import jax, flaxgraph as nnx
      >>> ns = nnx.extract.NodeStates.from_split(*nnx.split(nnx.Linear(1, 1, rngs=nnx.Rngs(0))))
      >>> type(nnx.merge(ns.graphdef, ns.state)).__name__, len(jax.tree.leaves(ns))
      ('Linear', 2)
    """

    __slots__ = ("_graphdef", "states", "metadata")

    def __init__(self, _graphdef: GraphDef | None, states: tuple[Any, ...], metadata: Any = None):
        self._graphdef = _graphdef
        self.states = tuple(states)
        self.metadata = metadata

    @property
    def graphdef(self) -> GraphDef:
        if self._graphdef is None:
            raise ValueError("This NodeStates has no GraphDef (it was built from states).")
        return self._graphdef

    @property
    def state(self) -> Any:
        if len(self.states) != 1:
            raise ValueError(
                f"NodeStates.state needs exactly one State, this one has {len(self.states)}; "
                "use .states."
            )
        return self.states[0]

    @classmethod
    def from_split(
        cls, graphdef: GraphDef | None, state: Any, /, *states: Any, metadata: Any = None
    ) -> NodeStates:
        """From what ``split`` returns: ``NodeStates.from_split(*nnx.split(node))``."""
        return cls(graphdef, (state, *states), metadata)

    @classmethod
    def from_states(cls, state: Any, *states: Any) -> NodeStates:
        """States without a GraphDef."""
        return cls(None, (state, *states), None)

    @classmethod
    def from_prefixes(cls, prefixes: Iterable[Any], /, *, metadata: Any = None) -> NodeStates:
        """Prefixes (e.g. axes) in place of States, for prefix trees."""
        return cls(None, tuple(prefixes), metadata)

    def replace(self, **changes: Any) -> NodeStates:
        """A copy with some of ``_graphdef``, ``states``, ``metadata`` replaced."""
        fields = {"_graphdef": self._graphdef, "states": self.states, "metadata": self.metadata}
        fields.update(changes)
        return NodeStates(fields["_graphdef"], fields["states"], fields["metadata"])

    def __eq__(self, other: object) -> bool:
        return (
            type(other) is NodeStates
            and self._graphdef == other._graphdef
            and self.states == other.states
            and self.metadata == other.metadata
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return (
            f"NodeStates(_graphdef={self._graphdef!r}, states={self.states!r}, "
            f"metadata={self.metadata!r})"
        )


def _unflatten_node_states(metadata: Any, children: Any) -> NodeStates:
    return NodeStates(children[0], children[1], metadata)


jax.tree_util.register_pytree_with_keys(
    NodeStates,
    lambda ns: (
        (
            (jax.tree_util.GetAttrKey("_graphdef"), ns._graphdef),
            (jax.tree_util.GetAttrKey("states"), ns.states),
        ),
        ns.metadata,
    ),
    _unflatten_node_states,
    lambda ns: ((ns._graphdef, ns.states), ns.metadata),
)


def clear_non_graph_nodes(tree: Any) -> Any:
    """``tree`` with every leaf that is not a graph node or Variable replaced by ``None``.

    Example::

      >>> import jax.numpy as jnp, flaxgraph as nnx
      >>> v = nnx.Param(jnp.ones(2))
      >>> out = nnx.extract.clear_non_graph_nodes((v, jnp.ones(3), 'x'))
      >>> out[0] is v, out[1], out[2]
      (True, None, None)
    """
    return jax.tree.map(
        lambda x: x if is_node_or_variable(x) else None, tree, is_leaf=is_node_or_variable
    )


def default_split_fn(ctx: SplitContext, path: PathParts, prefix: Any, leaf: Any) -> Any:
    """``to_tree``'s default: ``NodeStates.from_split(*ctx.split(leaf))``."""
    return NodeStates.from_split(*ctx.split(leaf))


def merge_tree_node(ctx: MergeContext, path: PathParts, prefix: Any, leaf: Any) -> Any:
    """``from_tree``'s default: merges a ``NodeStates`` (other leaves pass through)."""
    if not isinstance(leaf, NodeStates):
        return leaf
    return ctx.merge(leaf.graphdef, *leaf.states)


def is_tree_node(x: Any) -> bool:
    """Whether ``x`` is a ``NodeStates`` (what ``from_tree`` merges)."""
    return isinstance(x, NodeStates)


def _key(entry: Any) -> Hashable:
    for name in ("key", "idx", "name"):
        if hasattr(entry, name):
            return getattr(entry, name)
    return str(entry)


def _leaves_with_prefixes(
    tree: Any, prefix: Any, is_leaf: Callable[[Any], bool]
) -> tuple[list[tuple[PathParts, Any, Any]], Any]:
    """The leaves of ``tree`` with their paths and prefix values, and the treedef."""
    pairs, treedef = jax.tree_util.tree_flatten_with_path(tree, is_leaf=is_leaf)
    paths = [tuple(_key(e) for e in p) for p, _ in pairs]
    if prefix is MISSING:
        return [(p, None, x) for p, (_, x) in zip(paths, pairs)], treedef
    prefix_def: Any  # a PyTreeDef (jaxlib ships no stub for it)
    prefix_leaves, prefix_def = jax.tree_util.tree_flatten(prefix, is_leaf=lambda x: x is None)
    try:
        subtrees = prefix_def.flatten_up_to(tree)
    except (ValueError, TypeError) as error:
        raise ValueError(
            f"The prefix does not match the tree: {error}\nFix: give a prefix whose "
            "structure is a prefix of the tree's (as for in_axes)."
        ) from None
    per_leaf = []
    for p, sub in zip(prefix_leaves, subtrees):
        per_leaf.extend([p] * len(jax.tree_util.tree_leaves(sub, is_leaf=is_leaf)))
    return [(path, p, x) for path, p, (_, x) in zip(paths, per_leaf, pairs)], treedef


def to_tree(
    tree: Any,
    /,
    *,
    prefix: Any = MISSING,
    split_fn: Callable[[SplitContext, PathParts, Any, Any], Any] = default_split_fn,
    map_non_graph_nodes: bool = False,
    ctxtag: Hashable | None = None,
    check_aliasing: bool = True,
) -> Any:
    """Replaces every graph node and Variable in ``tree`` by ``split_fn``'s result (by default a
    ``NodeStates``), all split in one ``split_context``.

    Args:
      tree: any pytree holding graph nodes.
      prefix: optional prefix tree (as ``in_axes``); each node's value goes to ``split_fn``.
      split_fn: ``(ctx, path, prefix, node) -> replacement``.
      map_non_graph_nodes: also call ``split_fn`` on the other leaves.
      ctxtag: the tag of an active ``update_context`` to take part in.
      check_aliasing: with a ``prefix``, a node on two paths must get one prefix value.

    Returns:
      ``tree`` with graph nodes replaced (a pure pytree with the default ``split_fn``).

    Raises:
      ValueError: ``prefix`` does not fit ``tree``, or (``check_aliasing``) one node gets
        two prefix values; the message names both paths.

    Example::

      >>> import jax, flaxgraph as nnx
      >>> m = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
      >>> pure = nnx.to_tree((m, {'again': m}))
      >>> type(pure[0]).__name__, len(jax.tree.leaves(pure))      # m stored once
      ('NodeStates', 2)
      >>> a, b = nnx.from_tree(jax.jit(lambda t: t)(pure))
      >>> b['again'] is a
      True
    """
    leaves, treedef = _leaves_with_prefixes(tree, prefix, is_node_or_variable)
    if check_aliasing and prefix is not MISSING:
        seen = RefMap[tuple[PathParts, Any]]()
        for path, p, x in leaves:
            if not is_node_or_variable(x):
                continue
            if x in seen and seen[x][1] != p:
                first, q = seen[x]
                raise ValueError(
                    f"Inconsistent aliasing detected: the same {type(x).__name__} is at "
                    f"{keys_str(first) or '<root>'} with prefix {q!r} and at "
                    f"{keys_str(path) or '<root>'} with prefix {p!r}.\nFix: give every "
                    "alias of an object the same prefix."
                )
            seen.setdefault(x, (path, p))
    with split_context(ctxtag) as ctx:
        out = [
            split_fn(ctx, path, p, x) if map_non_graph_nodes or is_node_or_variable(x) else x
            for path, p, x in leaves
        ]
    return treedef.unflatten(out)


def from_tree(
    tree: Any,
    /,
    *,
    prefix: Any = MISSING,
    merge_fn: Callable[[MergeContext, PathParts, Any, Any], Any] = merge_tree_node,
    is_node_leaf: Callable[[Any], bool] = is_tree_node,
    is_leaf: Callable[[Any], bool] = is_tree_node,
    map_non_graph_nodes: bool = False,
    is_inner: bool | None = None,
    ctxtag: Hashable | None = None,
) -> Any:
    """The inverse of ``to_tree``: merges every ``NodeStates`` in ``tree`` in one ``merge_context``.

    Args:
      tree: a pytree from ``to_tree`` (possibly transformed by JAX).
      prefix: optional prefix tree; each node's prefix value goes to ``merge_fn``.
      merge_fn: ``(ctx, path, prefix, leaf) -> object``.
      is_node_leaf: which leaves ``merge_fn`` is called on.
      is_leaf: where flattening ``tree`` stops.
      map_non_graph_nodes: call ``merge_fn`` on every leaf.
      is_inner: inside a transform (step 2 of an ``update_context``) or outside.
      ctxtag: the tag of an active ``update_context``.

    Returns:
      ``tree`` with the objects rebuilt, references between them restored.

    Example::

      >>> import flaxgraph as nnx
      >>> m = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
      >>> back = nnx.from_tree(nnx.to_tree({'a': m, 'b': m}))
      >>> back['a'] is back['b'], back['a'] is m, back['a'].kernel is m.kernel
      (True, False, True)
    """
    leaves, treedef = _leaves_with_prefixes(tree, prefix, is_leaf)
    with merge_context(ctxtag, is_inner) as ctx:
        out = [
            merge_fn(ctx, path, p, x) if map_non_graph_nodes or is_node_leaf(x) else x
            for path, p, x in leaves
        ]
    return treedef.unflatten(out)


def _prefix_fn(filter_map: Mapping[Filter, Any] | Callable[..., Any]) -> Callable[..., Any]:
    if callable(filter_map) and not isinstance(filter_map, Mapping):
        return filter_map
    rules = [(to_predicate(f), value) for f, value in filter_map.items()]

    def first_match(path: PathParts, leaf: Any) -> Any:
        for predicate, value in rules:
            if predicate(path, leaf):
                return value
        shape = getattr(leaf, "shape", None)
        kind = "Array" if isinstance(leaf, jax.Array) else type(leaf).__name__
        raise ValueError(
            f"No filter matched the {kind}"
            + (f" of shape {tuple(shape)}" if shape is not None else "")
            + f" at path {keys_str(path) or '<root>'}; the filters are "
            + ", ".join(f.__name__ if isinstance(f, type) else repr(f) for f in filter_map)
            + ".\nFix: add a filter for it, or a catch-all `...: value` as the last entry."
        )

    return first_match


@dataclasses.dataclass(frozen=True)
class PrefixRule:
    """``NodeStates.metadata`` in an ``nnx.prefix(..., graph=True)`` result: the prefix rule
    ``fn`` and the object's ``path``, so transforms can ask the prefix of a Variable that
    appears only as a reference (to check its aliases agree)."""

    fn: Callable[[PathParts, Any], Any] = dataclasses.field(compare=False, repr=False)
    path: PathParts

    def rule(self, path: PathParts, leaf: Any) -> Any:
        """The prefix of ``leaf`` at ``path`` (relative to the object)."""
        return self.fn((*self.path, *path), leaf)


def prefix(
    node: Any,
    filter_map: Mapping[Filter, Any] | Callable[[PathParts, Any], Any],
    /,
    *,
    graph: bool | None = None,
) -> Any:
    """Replaces every leaf of ``node`` by a prefix value (e.g. an axis).

    The value is ``filter_map(path, leaf)``, or that of the first matching filter of a
    ``{filter: value}`` mapping. In graph mode the result is ``to_tree(node)`` with prefix
    values in its ``NodeStates``' States (pass all graph nodes of one transform together, so
    shared references are numbered as the transform numbers them).

    Args:
      node: a graph or a pytree holding graphs.
      filter_map: a function of ``(path, leaf)`` or a mapping filter -> value.
      graph: graph or tree mode (``None``: ``nnx.set_graph_mode``'s default).

    Returns:
      Tree mode: ``node``'s pytree (Variables are leaves) of prefix values. Graph mode:
      ``to_tree(node)`` with prefix values (``TreeState``).

    Raises:
      SharedReferenceError (a ``ValueError``): tree mode and a Variable is shared.
      ValueError: with a mapping, no filter matches a leaf (the message names its path).

    Example::

      >>> import jax.numpy as jnp, flaxgraph as nnx
      >>> d = {'a': nnx.Param(jnp.array(2)), 'b': nnx.BatchStat(jnp.arange(5))}
      >>> nnx.prefix(d, {nnx.Param: None, nnx.BatchStat: 0}, graph=False)
      {'a': None, 'b': 0}
    """
    fn = _prefix_fn(filter_map)
    if not resolve_graph(graph):
        flatten_with_paths(node, graph=False)  # sharing is an error in tree mode
        treedef: Any  # a PyTreeDef (jaxlib ships no stub for it)
        pairs, treedef = jax.tree_util.tree_flatten_with_path(node, is_leaf=is_variable)
        return treedef.unflatten([fn(tuple(_key(e) for e in p), x) for p, x in pairs])

    def on_states(path: PathParts, leaf: Any) -> Any:
        if not isinstance(leaf, NodeStates):
            return fn(path, leaf)
        states = tuple(
            State.from_flat_path((p, fn((*path, *p), v)) for p, v in s.flat_state())
            if isinstance(s, State)
            else fn(path, s)
            for s in leaf.states
        )
        return leaf.replace(states=states, metadata=PrefixRule(fn, path))

    tree = to_tree(node)
    pairs, treedef = jax.tree_util.tree_flatten_with_path(tree, is_leaf=is_tree_node)
    return treedef.unflatten([on_states(tuple(_key(e) for e in p), x) for p, x in pairs])


__all__ = [
    "NodeStates",
    "clear_non_graph_nodes",
    "default_split_fn",
    "from_tree",
    "is_tree_node",
    "merge_tree_node",
    "prefix",
    "to_tree",
]
