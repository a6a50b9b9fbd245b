"""Carry objects through plain JAX transforms by hand: ``split_inputs`` / ``merge_inputs``.

Source: Flax NNX 0.12 ``nnx.transforms.general`` (``split_inputs``, ``merge_inputs``,
``resolve_kwargs``).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, NamedTuple, TypeVar

import jax

from flaxgraph.graphlib.build import build_graph
from flaxgraph.graphlib.graphdefs import GraphDef
from flaxgraph.graphlib.refmap import RefMap
from flaxgraph.graphlib.registry import REGISTRY, VARIABLE, is_node_or_variable
from flaxgraph.graphlib.walk import flatten_with_paths

F = TypeVar("F", bound=Callable[..., Any])


class NodeOrigin(NamedTuple):
    """An output node that is a caller's object: its index ``here``, the caller's ``caller``."""

    here: int
    caller: int


class SplitNode:
    """One graph node as a pytree: leaf ``values`` as children; ``graphdef``, ``origins`` static."""

    __slots__ = ("graphdef", "origins", "values")

    def __init__(self, graphdef: GraphDef[Any], origins: tuple[NodeOrigin, ...], values: list[Any]):
        self.graphdef = graphdef
        self.origins = origins
        self.values = list(values)

    def __repr__(self) -> str:
        return f"SplitNode({self.graphdef!r}, origins={self.origins!r}, values={self.values!r})"


def _unflatten_split_node(aux: Any, children: Any) -> SplitNode:
    return SplitNode(aux[0], aux[1], children[0])


jax.tree_util.register_pytree_with_keys(
    SplitNode,
    lambda n: (
        [(jax.tree_util.GetAttrKey("values"), n.values)],
        (n.graphdef, n.origins),
    ),
    _unflatten_split_node,
    lambda n: ([n.values], (n.graphdef, n.origins)),
)


class _Split(NamedTuple):
    """One object split by ``_split_tree``: its index range, GraphDef and leaf values."""

    start: int
    stop: int
    graphdef: GraphDef[Any]
    values: list[Any]


def _is_split_node(x: object) -> bool:
    return isinstance(x, SplitNode)


def _split_tree(tree: object, origin_of: RefMap[int] | None) -> tuple[Any, RefMap[int]]:
    """``tree`` with every graph node a ``SplitNode``, and the map object -> index."""
    ref_index: RefMap[int] = RefMap()
    treedef: object  # a PyTreeDef (jaxlib ships no stub for it)
    leaves, treedef = jax.tree_util.tree_flatten(tree, is_leaf=is_node_or_variable)
    splits: list[_Split | None] = []
    for x in leaves:
        if not is_node_or_variable(x):
            splits.append(None)
            continue
        start = len(ref_index)
        graphdef, pairs = flatten_with_paths(x, ref_index=ref_index)
        values = [v.raw_value if REGISTRY.kind_of(v) is VARIABLE else v for _, v in pairs]
        splits.append(_Split(start, len(ref_index), graphdef, values))
    # The caller's objects among the nodes, by index here (each split adds a range).
    origin = (
        {i: origin_of[obj] for obj, i in ref_index.items() if obj in origin_of}
        if origin_of is not None
        else {}
    )
    out = [
        x
        if split is None
        else SplitNode(
            split.graphdef,
            tuple(NodeOrigin(i, origin[i]) for i in range(split.start, split.stop) if i in origin),
            split.values,
        )
        for x, split in zip(leaves, splits)
    ]
    return treedef.unflatten(out), ref_index


def _merge_tree(tree: object, reuse: dict[int, Any] | None) -> tuple[Any, dict[int, Any]]:
    """The inverse of ``_split_tree``; ``reuse`` maps indices to objects updated in place."""
    index_ref: dict[int, Any] = {}
    treedef: object  # a PyTreeDef (jaxlib ships no stub for it)
    leaves, treedef = jax.tree_util.tree_flatten(tree, is_leaf=_is_split_node)
    out = [
        build_graph(x.graphdef, x.values, index_ref=index_ref, reuse=reuse)
        if isinstance(x, SplitNode)
        else x
        for x in leaves
    ]
    return treedef.unflatten(out), index_ref


def split_inputs(f: F) -> F:
    """Lets the JAX function ``f`` take graph nodes, passed to it as ``SplitNode`` pytrees.

    Shared references stay shared (one index space); from what ``f`` returns, the
    caller's objects are updated in place and the output is rebuilt.

    Args:
      f: a JAX function whose function arguments are ``merge_inputs``-decorated, so it
        returns ``(args_out, out)`` (with ``jax.vmap``: ``out_axes=(in_axes, ...)``).

    Returns:
      A function of ``f``'s arguments returning ``out`` (an object that is one of the
      arguments' is the caller's same object), after writing every change back.

    Raises:
      TypeError: ``f`` did not return the ``(args_out, out)`` pair of ``merge_inputs``.

    Example::

      >>> import jax, jax.numpy as jnp, flaxgraph as nnx
      >>> from flaxgraph.transforms import general
      >>> class Counter(nnx.Module):
      ...   def __init__(self): self.count = nnx.BatchStat(jnp.array(0))
      >>> counter = Counter()
      >>> @general.merge_inputs
      ... def bump(c):
      ...   c.count[...] += 1
      >>> general.split_inputs(jax.jit(bump))(counter)
      >>> int(counter.count[...])
      1
    """

    @functools.wraps(f)
    def split_inputs_wrapper(*args: object) -> object:
        pure_args, ref_index = _split_tree(args, None)
        result = f(*pure_args)
        if not (isinstance(result, tuple) and len(result) == 2):
            raise TypeError(
                f"split_inputs expected {getattr(f, '__name__', f)!r} to return the pair "
                f"(args_out, out) of a merge_inputs function, got {type(result).__name__}.\n"
                "Fix: decorate the function the JAX transform calls with merge_inputs."
            )
        objects = {i: obj for obj, i in ref_index.items()}
        nodes = jax.tree_util.tree_leaves(result, is_leaf=_is_split_node)
        reuse = {
            here: objects[there]
            for node in nodes
            if isinstance(node, SplitNode)
            for here, there in node.origins
        }
        (_, out), _ = _merge_tree(result, reuse)
        return out

    return split_inputs_wrapper  # type: ignore[return-value]


def merge_inputs(f: F) -> F:
    """The inner half of ``split_inputs``: rebuilds the objects, calls ``f``, splits them again.

    Args:
      f: a function of objects.

    Returns:
      A function of pure pytrees returning ``(args_out, out)``, every change
      (structural ones included) carried, each node marked with its caller object.
      Example: see ``split_inputs``.
    """

    @functools.wraps(f)
    def merge_inputs_wrapper(*pure_args: object) -> tuple[Any, Any]:
        args, index_ref = _merge_tree(pure_args, None)
        origin_of = RefMap.from_pairs((obj, i) for i, obj in index_ref.items())
        out = f(*args)
        (args_out, pure_out), _ = _split_tree((args, out), origin_of)
        return args_out, pure_out

    return merge_inputs_wrapper  # type: ignore[return-value]


def resolve_kwargs(
    f: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """``(args, kwargs)`` of a call of ``f`` with keyword arguments moved to their positions.

    Defaults are filled in; ``kwargs`` keeps the keyword-only ones; unchanged if
    ``f`` has no signature. Raises ``TypeError`` if the arguments do not fit ``f``.

    Example::

      >>> resolve_kwargs(lambda a, b=2, *, c=3: None, (1,), {'c': 4})
      ((1, 2), {'c': 4})
    """
    try:
        signature = inspect.signature(f)
    except (TypeError, ValueError):
        return args, kwargs
    bound = signature.bind(*args, **kwargs)
    bound.apply_defaults()
    return tuple(bound.args), dict(bound.kwargs)


__all__ = ["SplitNode", "merge_inputs", "resolve_kwargs", "split_inputs"]
